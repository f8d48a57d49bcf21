"""Real reasoning tasks from reasoning-gym, named by one spec string wherever data is accepted.

reasoning-gym (the `tasks` extra) generates ~100 verifiable tasks offline from a seed, each with
its own scorer. A spec names the tasks, the global size and seed, and each task's own config
(values read as YAML):

    reasoning_gym:leg_counting,basic_arithmetic?size=500&seed=7&basic_arithmetic.max_terms=2
    reasoning_gym:chain_sum,products?style=reasoning     # demonstrations with a worked trace
    reasoning_gym:chain_sum,products?products.weight=3   # 3 products for each sum

    train_data: reasoning_gym:leg_counting?size=2000    # a config file (SFT, GRPO, PPO, ...)
    rewards: [reasoning_gym]                            # the task's own scorer, in a worker pool
    records = make_records("reasoning_gym:leg_counting", size=64, seed=1)

A record is {"prompt", "answer", "domain" (the task), "entry" (JSON: the task's entry plus its
name and config, what its scorer reads), "completion" (an SFT demonstration)}. The demonstration is
`<answer>ANSWER</answer>`; with `style=reasoning`, `<reasoning>TRACE</reasoning><answer>ANSWER
</answer>` where a trace exists: the task's own worked solution (gsm_symbolic's `answer_cot`), or
one written here by procedure (`TRACES`: the arithmetic tasks, one operation a line). The tasks
share the size in proportion to their weights (`TASK.weight`, 1 unless set) and are shuffled
together: the records are a pure function of the spec.

Each task is generated from its own seed, a hash of (task, seed): reasoning-gym draws item i from
`Random(seed + i)`, so seeds 7 and 8 would share all items but one, while hashed seeds lie far
apart and give disjoint items in practice. In practice is not enough for a task with few questions
(one-digit products have 100: every seed asks them again), so a spec can ask for one side of a
content split, `split=train` or `split=test` (`test_fraction`, 0.2 unless set, of the questions
are test questions): each question's side is fixed by a hash of the question itself
(`tunix_lite.data.questions`: `question_key`, `on_test_side`), so no seed of the test side asks
a question that any seed of the train side asks:

    reasoning_gym:products?products.max_digits=1&split=train&size=4000   # 76 of the 100 facts
    reasoning_gym:products?products.max_digits=1&split=test&seed=5       # the other 24
    reasoning_gym:products?products.max_digits=1&split=test&unordered=true   # 3 * 7 and 7 * 3 too

`unordered=true` splits by `unordered_key`: a sum or product and its mirror lie on one side, so a
test fact's mirror is never a training fact.

Upstream scorers are not all sound (`game_of_life_halting` gives any non-empty answer full marks),
so `probe_scorers` checks a task before RL trains on it: a config naming the reasoning_gym reward
runs it when it is built.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import random
import warnings
from collections.abc import Iterable, Mapping

import yaml

from tunix_lite.data.questions import (SPLITS, TEST_FRACTION, on_test_side,  # noqa: F401
                                       question_key, unordered_key)
from tunix_lite.rewards.reasoning_gym import INSTALL, reward_reasoning_gym  # noqa: F401 - old home
from tunix_lite.rewards.tags import ANSWER_CLOSE, ANSWER_OPEN, answer_of, write_completion

PREFIX = "reasoning_gym:"
SIZE, SEED = 1000, 0  # a spec's size and seed unless it sets them
INSTRUCTION = "End your reply with your final answer inside <answer></answer> tags."
GARBAGE = "@@ zqxv @@"  # the probe's wrong answer: no task's reference contains it
STYLES = ("answer", "reasoning")  # demonstrations: the tagged answer alone, or a trace before it
WEIGHT = "weight"  # TASK.weight=W: the task's share of the size (no task config has this key)
_NOT_TASKS = ("composite",)  # registered upstream, but a mixer of tasks (a spec mixes them itself)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A parsed spec: tasks (name -> that task's config overrides), the total size, the seed."""

    tasks: dict[str, dict]
    size: int = SIZE
    seed: int = SEED
    style: str = "answer"  # or "reasoning": demonstrations with a trace where one exists
    weights: dict[str, float] = dataclasses.field(default_factory=dict)  # task -> share; unset: 1
    split: str | None = None  # "train" or "test": only that side's questions (None: all)
    test_fraction: float = TEST_FRACTION  # the share of the questions on the test side
    unordered: bool = False  # split by `unordered_key`: 3 * 7 and 7 * 3 on one side


def is_spec(source) -> bool:
    """Whether a data source (a config value) is a reasoning_gym spec (not a file, "synthetic")."""
    return isinstance(source, str) and source.startswith(PREFIX)


def _registry() -> dict:
    """reasoning-gym's tasks, name -> (dataset class, config class); ImportError names the extra."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise ImportError(INSTALL) from None
    return {name: classes for name, classes in DATASETS.items() if name not in _NOT_TASKS}


def task_names() -> list[str]:
    """Every task a spec may name."""
    return sorted(_registry())


def parse_spec(spec: str | TaskSpec) -> TaskSpec:
    """A TaskSpec from `reasoning_gym:TASK[,TASK...][?key=value&...]`.

    ValueError in one line naming the part, the value and the fix: an unknown task, a key the task
    does not take, a value that does not parse or that the task rejects, size < 1."""
    if isinstance(spec, TaskSpec):
        return spec
    if not is_spec(spec):
        raise ValueError(f"{spec!r} is not a reasoning_gym spec; write "
                         f"{PREFIX}TASK[,TASK...][?size=N&seed=S&TASK.KEY=VALUE]")
    names, _, query = spec.removeprefix(PREFIX).partition("?")
    registry = _registry()
    tasks: dict[str, dict] = {}
    for name in (n.strip() for n in names.split(",")):
        if name not in registry:
            close = difflib.get_close_matches(name, registry, n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise ValueError(f"{spec}: task {name!r} is not a reasoning_gym task; {hint}every "
                             "task: python -c \"import tunix_lite.data.reasoning_gym as r; "
                             "print(r.task_names())\"")
        tasks[name] = {}
    values = {"size": SIZE, "seed": SEED}
    style, weights, split, test_fraction, unordered = "answer", {}, None, None, None
    for part in filter(None, query.split("&")):
        key, eq, text = part.partition("=")
        if not eq:
            raise ValueError(f"{spec}: {part!r} is not key=value; write e.g. size=500 or "
                             f"{name}.KEY=VALUE")
        value = _value(spec, part, text)
        task, dot, field = key.rpartition(".")
        if key == "style":
            if value not in STYLES:
                raise ValueError(f"{spec}: {part!r}: style must be one of {', '.join(STYLES)}")
            style = value
        elif key == "split":
            if value not in SPLITS:
                raise ValueError(f"{spec}: {part!r}: split must be train or test (the two sides "
                                 "of the content split); write e.g. split=test")
            split = value
        elif key == "test_fraction":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
                raise ValueError(f"{spec}: {part!r}: test_fraction is the share of the questions "
                                 "on the test side, a number between 0 and 1 (both excluded); "
                                 "write e.g. test_fraction=0.2")
            test_fraction = float(value)
        elif key == "unordered":
            if not isinstance(value, bool):
                raise ValueError(f"{spec}: {part!r}: unordered is true or false (true: a sum or "
                                 "product and its mirror lie on one side of the split); write "
                                 "unordered=true")
            unordered = value
        elif not dot and key in values:
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{spec}: {part!r}: {key} must be an integer, got {text!r}")
            values[key] = value
        elif task in tasks and field == WEIGHT:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{spec}: {part!r}: a task's weight is its share of the size, a "
                                 f"number above 0; write e.g. {task}.weight=2")
            weights[task] = value
        elif task in tasks:
            own = [f.name for f in dataclasses.fields(registry[task][1])
                   if f.name not in ("seed", "size")]
            if field not in own:
                raise ValueError(f"{spec}: {part!r}: {task} has no config key {field!r}; it takes "
                                 f"{', '.join(own)} (and {WEIGHT}, its share of the size)")
            tasks[task][field] = value
        else:
            raise ValueError(f"{spec}: {part!r}: {key!r} is neither size, seed, style, split, "
                             f"test_fraction, unordered nor TASK.KEY for a task of the spec "
                             f"({', '.join(tasks)})")
    if values["size"] < 1:
        raise ValueError(f"{spec}: size={values['size']}: need at least 1 example")
    if test_fraction is not None and split is None:  # it would change nothing: say so
        raise ValueError(f"{spec}: test_fraction={test_fraction:g} sizes the sides of the content "
                         "split, but the spec asks for no side; add split=train or split=test")
    if unordered is not None and split is None:
        raise ValueError(f"{spec}: unordered={str(unordered).lower()} says how the content split "
                         "keys a question, but the spec asks for no side; add split=train or "
                         "split=test")
    # the task's own checks: ranges, min <= max when it is built, others (simple_equations'
    # operators against operators_weights) only when an item is made
    for task, config in tasks.items():
        try:
            _dataset(task, config, 1, 0)[0]
        except Exception as e:  # noqa: BLE001 - upstream raises AssertionError, TypeError, ...
            raise ValueError(f"{spec}: {task} rejects its config {config} ({type(e).__name__}: "
                             f"{e}); see reasoning_gym's {registry[task][1].__name__}") from None
    return TaskSpec(tasks, values["size"], values["seed"], style, weights, split,
                    TEST_FRACTION if test_fraction is None else test_fraction, bool(unordered))


def _value(spec: str, part: str, text: str):
    """A value as YAML reads it (2 -> int, 0.5 -> float, true -> bool, [+, -] -> list, else str)."""
    try:
        value = yaml.safe_load(text)
        json.dumps(value)  # it travels inside each record's entry column
    except (yaml.YAMLError, TypeError, ValueError):
        raise ValueError(f"{spec}: {part!r}: cannot read {text!r} as a number, true/false, a "
                         "string or a list") from None
    return value


def _task_seed(task: str, seed: int) -> int:
    """The task's reasoning-gym seed, far from every other (task, seed)'s: no shared items."""
    return int.from_bytes(hashlib.sha256(f"{task}/{seed}".encode()).digest()[:4], "big") >> 1


def _dataset(task: str, config: dict, size: int, seed: int):
    dataset_cls, config_cls = _registry()[task]
    return dataset_cls(config_cls(**config, size=size, seed=seed))


def make_records(spec: str | TaskSpec, *, size: int | None = None,
                 seed: int | None = None) -> list[dict]:
    """`size` records (default: the spec's) of the spec's tasks in shares proportional to their
    weights (`task_shares`), shuffled together; `seed` replaces the spec's (another seed: other
    prompts). With a split, each task's first `share` items on that side (`_side_entries`).

    The completion is `<reasoning>TRACE</reasoning><answer>ANSWER</answer>` where the task's
    metadata carries a worked solution (gsm_symbolic's `answer_cot`) or, with `style=reasoning`,
    where `TRACES` writes one; else `<answer>ANSWER</answer>`. A task whose entries have no single
    reference answer (rush_hour, graph_color, ...) is refused: it could be neither demonstrated nor
    exact-matched.
    """
    spec = parse_spec(spec)
    size, seed = size or spec.size, spec.seed if seed is None else seed
    records = []
    for (task, config), n in zip(spec.tasks.items(), task_shares(spec, size), strict=True):
        if not n:  # fewer items than tasks; reasoning-gym refuses an empty dataset
            continue
        if spec.split is None:
            dataset = _dataset(task, config, n, _task_seed(task, seed))
            entries = (dataset[index] for index in range(n))
        else:
            entries = _side_entries(task, config, n, _task_seed(task, seed), spec)
        for entry in entries:
            answer = entry["answer"]
            if not isinstance(answer, str):
                raise ValueError(f"{PREFIX}{task}: its entries have no reference answer "
                                 f"({answer!r}), so they can be neither SFT demonstrations nor "
                                 "exact-matched; choose another task")
            trace = _trace(task, entry, spec.style)
            completion = (write_completion(trace, answer, "reasoning") if trace is not None
                          else f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}")
            records.append({"prompt": f"{entry['question'].rstrip()}\n\n{INSTRUCTION}",
                            "answer": answer, "domain": task,
                            "entry": _entry_json(task, config, entry), "completion": completion})
    random.Random(f"reasoning_gym/{seed}").shuffle(records)
    return records


def _side_entries(task: str, config: dict, n: int, seed: int, spec: TaskSpec) -> list[dict]:
    """The first `n` items of the task's stream whose question lies on `spec.split`'s side, in the
    stream's order: the task's own mix of questions, less the other side's (a task with few
    questions repeats them, as without a split). The stream is drawn anew, twice as long, until it
    holds `n`; a side that stays short is refused in one line."""
    test = spec.split == "test"
    key = unordered_key if spec.unordered else str
    share = spec.test_fraction if test else 1 - spec.test_fraction
    drawn, limit = int(n / share) + 16, int(16 * n / share) + 1024
    while True:
        dataset = _dataset(task, config, drawn, seed)
        entries = [entry for entry in (dataset[index] for index in range(drawn))
                   if on_test_side(key(question_key(entry)), spec.test_fraction) == test]
        if len(entries) >= n:
            return entries[:n]
        if drawn >= limit:
            raise ValueError(f"{PREFIX}{task}: split={spec.split}: {len(entries)} of {drawn} "
                             f"items lie on that side (test_fraction={spec.test_fraction:g}), "
                             f"not the {n} asked for; the task asks too few distinct questions "
                             "for this split: widen its config or change test_fraction")
        drawn *= 2


def task_shares(spec: TaskSpec, size: int) -> list[int]:
    """How many of `size` records each task of the spec gets, in its order: shares of the size in
    proportion to the weights, by largest remainder (equal weights: the first size % k one more)."""
    from tunix_lite.data.sft import largest_remainder

    return largest_remainder([spec.weights.get(task, 1) for task in spec.tasks], size)


def _trace(task: str, entry: dict, style: str) -> str | None:
    """The worked steps before an entry's answer: the task's own solution, or with style
    "reasoning" one written by procedure (None: the task has neither)."""
    solution = entry["metadata"].get("answer_cot")  # "steps\n#### answer"
    if isinstance(solution, str):
        return solution.rpartition("####")[0].strip()
    if style == "reasoning" and task in TRACES:
        return TRACES[task](entry)
    return None


def arithmetic_trace(entry: dict) -> str:
    """One operation a line, left to right, for an expression of integers joined by + and - (or by
    * alone), where left to right is the order of evaluation: "12 + 7 = 19\n19 - 4 = 15". Any other
    expression (precedence, division, brackets) is one line: "EXPRESSION = ANSWER"."""
    expression, answer = entry["metadata"]["expression"], entry["answer"]
    terms = expression.split()
    numbers, operators = terms[0::2], terms[1::2]
    if (len(terms) < 3 or len(terms) % 2 == 0
            or not all(n.lstrip("-").isdigit() for n in numbers)
            or not (set(operators) <= {"+", "-"} or set(operators) == {"*"})):
        return f"{expression} = {answer}"
    value, lines = int(numbers[0]), []
    for operator, text in zip(operators, numbers[1:]):
        term = int(text)
        result = {"+": value + term, "-": value - term, "*": value * term}[operator]
        lines.append(f"{value} {operator} {text} = {result}")
        value = result
    return "\n".join(lines) if str(value) == answer else f"{expression} = {answer}"


# a task's trace by procedure: the tasks whose metadata carry the expression they ask about
TRACES = {"basic_arithmetic": arithmetic_trace, "chain_sum": arithmetic_trace,
          "products": arithmetic_trace}


def _entry_json(task: str, config: dict, entry: dict) -> str:
    """The entry as its scorer needs it: the task's name and config beside question, answer and
    metadata. Tuples come back as lists: `probe_scorers` checks the reference still scores 1.0."""
    return json.dumps({"task": task, "config": config} | entry, default=str)


# ----------------------------------------------------------------------- probing the scorers


_PROBED: dict[str, str | None] = {}  # task + config -> the probe's note (None: clean), per process


def probe_scorers(tasks: TaskSpec | str | Mapping[str, dict] | Iterable[str], *,
                  entries: int = 3) -> dict[str, str]:
    """Check each task's scorer on `entries` items before RL trains on it: its reference answer
    (read back from the demonstration's tags) must score 1.0 on the stored entry, an empty and a
    garbage answer less than 1.0. A task that fails is refused (ValueError, one line). A scorer
    that raises on a wrong answer is only reported, as a warning and in the returned {task: note}:
    the verifier pool scores such calls 0.0. Cached per task and config in the process."""
    if not isinstance(tasks, (str, TaskSpec, Mapping)):  # task names
        tasks = PREFIX + ",".join(tasks)
    if isinstance(tasks, (str, TaskSpec)):
        tasks = parse_spec(tasks).tasks
    notes = {}
    for task, config in tasks.items():
        key = f"{task}{json.dumps(config, sort_keys=True)}"
        if key not in _PROBED:
            _PROBED[key] = _probe(task, config, entries)
            if _PROBED[key]:
                warnings.warn(_PROBED[key], stacklevel=2)
        if _PROBED[key]:
            notes[task] = _PROBED[key]
    return notes


def _probe(task: str, config: dict, entries: int) -> str | None:
    """Raise if the task's scorer cannot be a reward; the note for a scorer that raised, or None."""
    records = make_records(TaskSpec({task: config}, entries), seed=-1)  # -1: no spec's default
    from tunix_lite.rewards.reasoning_gym_scorer import score_entry  # after make_records' checks

    note = None
    for record in records:
        reference = answer_of(record["completion"]) or ""
        wrong = {"an empty answer": "", f"the garbage answer {GARBAGE!r}": GARBAGE}
        for label, answer in {"its reference answer": reference, **wrong}.items():
            try:
                score = score_entry(answer, record["entry"])
            except Exception as e:  # noqa: BLE001 - an upstream scorer may raise anything
                raised = f"{PREFIX}{task}: its scorer raised on {label} ({type(e).__name__}: {e})"
                if label not in wrong:
                    raise ValueError(f"{raised}; choose another task") from None
                note = f"{raised}; such answers score 0"
                continue
            if label not in wrong and score < 1.0:
                raise ValueError(f"{PREFIX}{task}: its scorer gives its own reference answer "
                                 f"{score:g} (read back from <answer> tags, the entry stored as "
                                 "JSON), so it can neither reward nor evaluate; choose another "
                                 "task")
            if label in wrong and score >= 1.0:
                raise ValueError(f"{PREFIX}{task}: its scorer gives {label} full marks, so it "
                                 "can neither reward nor evaluate; choose another task")
    return note
