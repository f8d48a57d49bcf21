"""reasoning-gym tasks as data (`reasoning_gym:TASK...` specs), their scorers as a reward, the probe
that refuses unsound scorers, and math-verify behind the `math` reward: through the CLI, the
configs, the pipeline and the reward registry. The pool tests share the process's default pool, so
its workers start once."""

import collections
import json
import re
import sys

import pytest
import yaml

from tunix_lite.cli import main
from tunix_lite.data import reasoning_gym, reasoning_gym_scorer
from tunix_lite.data.reasoning_gym import INSTRUCTION, TaskSpec, make_records, parse_spec
from tunix_lite.pipeline import load_pipeline
from tunix_lite.rl.rewards import reward_set
from tunix_lite.training.inputs import load_data, synthetic_tasks
from tunix_lite.training.sft import SFTConfig
from tunix_lite.math_answers import check_math
from tunix_lite.verifiers import default_pool, reward_math

SPEC = "reasoning_gym:leg_counting,basic_arithmetic?size=500&seed=7&basic_arithmetic.max_terms=2"
SMALL = "reasoning_gym:leg_counting,basic_arithmetic?size=5&basic_arithmetic.operators=[+, -]"
LEGS = "reasoning_gym:leg_counting"


def cli_error(capsys, tmp_path, **config) -> str:
    """The one line `tunix-lite train --config FILE` prints for a config it refuses."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    capsys.readouterr()
    assert main(["train", "--config", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tunix-lite train: error: {path}: "), lines
    return lines[0].removeprefix(f"tunix-lite train: error: {path}: ")


def test_a_spec_names_tasks_size_seed_and_each_tasks_config():
    tasks = {"leg_counting": {}, "basic_arithmetic": {"max_terms": 2}}
    assert parse_spec(SPEC) == TaskSpec(tasks, size=500, seed=7)
    assert parse_spec(LEGS) == TaskSpec({"leg_counting": {}}, size=1000, seed=0)
    assert parse_spec(SMALL).tasks["basic_arithmetic"] == {"operators": ["+", "-"]}  # YAML values
    assert reasoning_gym.is_spec(SPEC) and not reasoning_gym.is_spec("data/train.jsonl")


@pytest.mark.parametrize("spec, message", [
    (f"{LEGS}in", "task 'leg_countingin' is not a reasoning_gym task; did you mean leg_counting"),
    (f"{LEGS}?leg_counting.legs=4",
     "'leg_counting.legs=4': leg_counting has no config key 'legs'; it takes min_animals,"),
    (f"{LEGS}?leg_counting.max_animals=[2",
     "'leg_counting.max_animals=[2': cannot read '[2' as a number"),
    (f"{LEGS}?size=0", "size=0: need at least 1 example"),
    (f"{LEGS}?size=many", "'size=many': size must be an integer, got 'many'"),
    (f"{LEGS}?max_terms=2", "'max_terms=2': 'max_terms' is neither size, seed, style, split, "
                            "test_fraction, unordered nor TASK.KEY for a task of the spec "
                            "(leg_counting)"),
    (f"{LEGS}?split=validation", "'split=validation': split must be train or test (the two sides "
                                 "of the content split); write e.g. split=test"),
    (f"{LEGS}?split=test&test_fraction=1", "'test_fraction=1': test_fraction is the share of the "
                                           "questions on the test side, a number between 0 and 1"),
    (f"{LEGS}?split=test&test_fraction=0", "'test_fraction=0': test_fraction is the share of"),
    (f"{LEGS}?split=test&test_fraction=true", "'test_fraction=true': test_fraction is the share"),
    (f"{LEGS}?test_fraction=0.3", "test_fraction=0.3 sizes the sides of the content split, but "
                                  "the spec asks for no side; add split=train or split=test"),
    (f"{LEGS}?split=test&unordered=yes please", "'unordered=yes please': unordered is true or "
                                                "false"),
    (f"{LEGS}?unordered=true", "unordered=true says how the content split keys a question, but "
                               "the spec asks for no side; add split=train or split=test"),
    (f"{LEGS}?style=cot", "'style=cot': style must be one of answer, reasoning"),
    (f"{LEGS}?leg_counting.weight=0", "'leg_counting.weight=0': a task's weight is its share of "
                                      "the size, a number above 0; write e.g. leg_counting.weight=2"),
    (f"{LEGS}?leg_counting.weight=true", "'leg_counting.weight=true': a task's weight is its share"),
    ("reasoning_gym:basic_arithmetic?basic_arithmetic.max_terms=1",
     "basic_arithmetic rejects its config {'max_terms': 1}"),
])
def test_a_bad_spec_is_one_line_naming_the_part_the_value_and_the_fix(tmp_path, capsys, spec,
                                                                       message):
    error = cli_error(capsys, tmp_path, train_data=spec)
    assert error.startswith(f"train_data: {spec}: {message}"), error


def test_without_the_extra_the_error_names_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)  # its import fails
    assert cli_error(capsys, tmp_path, validation_data=LEGS) == (
        "validation_data: reasoning_gym data needs the tasks extra: "
        "pip install 'tunix-lite[tasks]'")


def test_records_mix_the_tasks_evenly_and_are_a_function_of_the_seed():
    records = make_records(SMALL)
    assert records == make_records(SMALL)
    domains = collections.Counter(r["domain"] for r in records)
    assert domains == {"leg_counting": 3, "basic_arithmetic": 2}
    assert records[0]["prompt"].endswith(f"\n\n{INSTRUCTION}")
    assert records[0]["completion"] == f"<answer>{records[0]['answer']}</answer>"
    # reasoning-gym seeds item i with seed + i: hashed task seeds keep neighbouring seeds disjoint
    prompts = {seed: {r["prompt"] for r in make_records(f"{LEGS}?size=40", seed=seed)}
               for seed in (7, 8)}
    assert len(prompts[7]) > 30 and not prompts[7] & prompts[8]
    worked = make_records("reasoning_gym:gsm_symbolic?size=1")[0]["completion"]
    assert worked.startswith("<reasoning>") and "</reasoning><answer>" in worked
    assert "####" not in worked


PRODUCTS = "reasoning_gym:products?products.max_digits=1"  # 100 questions: every seed repeats them


def test_the_sides_of_a_split_share_no_question_whatever_the_seeds_and_give_the_size_asked():
    train = [make_records(f"{PRODUCTS}&split=train&size=150", seed=seed) for seed in (1, 2, 3)]
    test = [make_records(f"{PRODUCTS}&split=test&size=40", seed=seed) for seed in (1, 4, 5)]
    assert [len(r) for r in train + test] == [150] * 3 + [40] * 3  # repeats fill a small side
    assert make_records(f"{PRODUCTS}&split=test&size=40", seed=4) == test[1]
    trained = {r["prompt"] for records in train for r in records}
    tested = {r["prompt"] for records in test for r in records}
    assert not trained & tested and len(trained | tested) == 100  # every fact, once
    assert 10 <= len(tested) <= 30  # about test_fraction = 0.2 of them
    wider = {r["prompt"] for r in make_records(f"{PRODUCTS}&split=test&size=400&test_fraction=0.4")}
    assert tested < wider  # a larger test fraction only moves questions to the test side
    # one expression is one question, however a task words it: sides share no expression
    sums = ("reasoning_gym:basic_arithmetic,chain_sum?size=60&basic_arithmetic.max_terms=2&"
            "basic_arithmetic.max_digits=1&chain_sum.max_terms=2&chain_sum.max_digits=1")
    expressions = {side: {reasoning_gym.question_key(json.loads(r["entry"]))
                          for r in make_records(f"{sums}&split={side}", seed=seed)}
                   for side, seed in (("train", 1), ("test", 2))}
    assert len(expressions["test"]) > 10 and not expressions["train"] & expressions["test"]


def test_a_side_with_too_few_questions_is_refused_in_one_line():
    # the lowest of the 100 products' hashes is 0.0052: at 0.005, no test question
    with pytest.raises(ValueError) as error:
        make_records(f"{PRODUCTS}&split=test&test_fraction=0.005&size=2")
    assert str(error.value).startswith("reasoning_gym:products: split=test: 0 of ")
    assert str(error.value).endswith("not the 2 asked for; the task asks too few distinct "
                                     "questions for this split: widen its config or change "
                                     "test_fraction")


def test_weights_share_the_size_in_proportion_and_equal_weights_change_nothing():
    spec = "reasoning_gym:chain_sum,products,leg_counting?size=10&seed=3"
    weighted = parse_spec(f"{spec}&products.weight=3&chain_sum.weight=1.5")
    assert weighted.weights == {"products": 3, "chain_sum": 1.5}
    # quotas 10 * (1.5, 3, 1) / 5.5 = (2.73, 5.45, 1.82): floors (2, 5, 1), the two records left
    # go to the largest remainders, chain_sum's .73 and leg_counting's .82
    assert reasoning_gym.task_shares(weighted, 10) == [3, 5, 2]
    domains = collections.Counter(r["domain"] for r in make_records(weighted))
    assert domains == {"chain_sum": 3, "products": 5, "leg_counting": 2}
    equal = f"{spec}&products.weight=2&chain_sum.weight=2&leg_counting.weight=2"
    assert make_records(equal) == make_records(spec)  # the first size % k tasks get one more
    assert reasoning_gym.task_shares(parse_spec(spec), 10) == [4, 3, 3]


@pytest.mark.parametrize("expression, answer, trace", [
    ("48 - 91 + 7", "-36", "48 - 91 = -43\n-43 + 7 = -36"),
    ("-7 - -1", "-6", "-7 - -1 = -6"),
    ("3 * 4 * 5", "60", "3 * 4 = 12\n12 * 5 = 60"),
    ("2 + 3 * 4", "14", "2 + 3 * 4 = 14"),         # precedence: not left to right, so one line
    ("( 6 + 2 ) / 4", "2", "( 6 + 2 ) / 4 = 2"),
    ("4 + 1", "6", "4 + 1 = 6"),                   # steps that miss the reference: never written
])
def test_an_arithmetic_trace_is_one_operation_a_line_where_that_is_the_order(expression, answer, trace):
    entry = {"answer": answer, "metadata": {"expression": expression}}
    assert reasoning_gym.arithmetic_trace(entry) == trace


def test_style_reasoning_writes_a_trace_before_the_answer_where_the_task_has_one():
    spec = "reasoning_gym:chain_sum,leg_counting?size=20&seed=3&chain_sum.max_terms=3"
    plain, traced = make_records(spec), make_records(f"{spec}&style=reasoning")
    assert [r["prompt"] for r in plain] == [r["prompt"] for r in traced]  # only the demonstrations differ
    for before, after in zip(plain, traced):
        answer = before["answer"]
        if before["domain"] == "chain_sum":
            steps = after["completion"].removeprefix("<reasoning>").split("</reasoning>")[0].splitlines()
            assert steps[-1].endswith(f"= {answer}") and after["completion"].endswith(f"<answer>{answer}</answer>")
        else:  # no trace for leg counting: the answer alone, as without the style
            assert after["completion"] == before["completion"] == f"<answer>{answer}</answer>"


def test_train_data_takes_a_spec_with_an_unseen_validation_split_by_default():
    config = SFTConfig(train_data=f"{LEGS}?size=24", n_validation=8)
    train, validation = load_data(config, synthetic_tasks)
    assert (len(train), len(validation)) == (24, 8)
    assert {"prompt", "answer", "domain", "entry", "completion"} <= set(train.column_names)
    assert not set(train["prompt"]) & set(validation["prompt"])


def test_a_spec_longer_than_any_file_name_is_data_not_a_path(tmp_path, capsys):
    """A spec with several tasks' settings runs past the 255 bytes a file name may have: asking the
    file system about it must not end the run (training's input fingerprints, eval's data)."""
    from tunix_lite.model_eval import eval_records
    from tunix_lite.training.harness import input_fingerprints

    long_spec = LEGS + "?" + "&".join(["leg_counting.min_animals=1"] * 12)
    assert len(long_spec) > 255
    assert input_fingerprints(SFTConfig(train_data=long_spec)) == {}
    records, reward_fn = eval_records(long_spec, n=4, seed=1)
    assert len(records) == 4 and reward_fn is reasoning_gym.reward_reasoning_gym


def test_the_reward_scores_right_wrong_and_untagged_answers_with_the_tasks_scorer():
    records = make_records("reasoning_gym:leg_counting,basic_arithmetic?size=2&seed=3")
    right = [f"Thinking. <answer>{r['answer']}</answer>" for r in records]
    wrong = ["<answer>-1</answer>"] * 2
    untagged = [r["answer"] for r in records]
    rewards = reward_set(["reasoning_gym"])  # the registered name, as a config file lists it
    columns = {k: [r[k] for r in records] * 3 for k in ("answer", "domain", "entry")}
    total, _ = rewards([r["prompt"] for r in records] * 3, right + wrong + untagged, **columns)
    assert total.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_a_scorer_that_raises_scores_zero_and_is_counted():
    record = make_records("reasoning_gym:prime_factorization?size=1")[0]
    pool = default_pool()
    errors = pool.stats["errors"]
    completions = ["<answer>not a number</answer>", f"<answer>{record['answer']}</answer>"]
    scores = reasoning_gym.reward_reasoning_gym([record["prompt"]] * 2, completions,
                                                entry=[record["entry"]] * 2)
    assert scores == [0.0, 1.0] and pool.stats["errors"] == errors + 1
    assert "ValueError" in pool.last_errors[-1]


def test_the_probe_refuses_a_scorer_that_gives_wrong_answers_full_marks(tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.setattr(reasoning_gym, "_PROBED", {})
    grpo = {"algorithm": "grpo", "rewards": ["reasoning_gym"]}
    assert cli_error(capsys, tmp_path, **grpo, train_data="reasoning_gym:game_of_life_halting") == (
        "rewards: reasoning_gym:game_of_life_halting: its scorer gives the garbage answer "
        "'@@ zqxv @@' full marks, so it can neither reward nor evaluate; choose another task")
    monkeypatch.setattr(reasoning_gym_scorer, "score_entry", lambda answer, entry: 1.0)  # a stub
    with pytest.raises(ValueError, match="leg_counting: its scorer gives an empty answer full"):
        reasoning_gym.probe_scorers(["leg_counting"])
    assert cli_error(capsys, tmp_path, **grpo) == (
        "rewards: reasoning_gym scores reasoning_gym data (its entry column); set train_data: "
        "reasoning_gym:TASK")


def test_the_probe_reports_a_scorer_that_raises_and_runs_once_per_task(monkeypatch):
    monkeypatch.setattr(reasoning_gym, "_PROBED", {})
    with pytest.warns(UserWarning, match="prime_factorization: its scorer raised on the garbage"):
        notes = reasoning_gym.probe_scorers("reasoning_gym:prime_factorization,leg_counting")
    assert list(notes) == ["prime_factorization"]
    assert notes["prime_factorization"].endswith("such answers score 0")
    monkeypatch.setattr(reasoning_gym_scorer, "score_entry", lambda answer, entry: 1 / 0)
    assert reasoning_gym.probe_scorers(["leg_counting"]) == {}  # cached: not probed again


def pipeline(tmp_path, **data):
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "data": data, "evaluation": {"n_prompts": 4},
        "defaults": {"seq_len": 192, "warmup_steps": 1},
        "stages": [{"name": "sft", "algorithm": "sft", "steps": 2},
                   {"name": "grpo", "algorithm": "grpo", "steps": 2,
                    "rewards": ["reasoning_gym"]}]}))
    return path


def test_a_pipelines_data_takes_specs(tmp_path, capsys):
    specs = {"train": f"{LEGS}?size=32", "validation": f"{LEGS}?seed=1", "test": f"{LEGS}?seed=2"}
    for stage in load_pipeline(pipeline(tmp_path, **specs)).stages:
        assert (stage.config.train_data, stage.config.validation_data) == (specs["train"],
                                                                           specs["validation"])
    no_validation = load_pipeline(pipeline(tmp_path, train=specs["train"], test=specs["test"]))
    assert no_validation.stages[0].config.validation_data is None  # drawn by load_data, unseen
    path = pipeline(tmp_path, **specs | {"test": f"{LEGS}?size=-3"})
    assert main(["run", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (f"tunix-lite run: error: {path}: data.test: "
                                               f"{LEGS}?size=-3: size=-3: need at least 1 example")


def test_math_verify_backs_the_math_reward_where_installed_and_the_rules_stay(monkeypatch):
    from math_verify import parse, verify

    cases = [("\\frac{1}{2}", "0.5", 1.0), ("1+x^2", "x^2+1", 1.0), ("4, 5, 7", "3, 5, 7", 0.0),
             ("bleu", "blue", 0.0), ("32/2", "16", 1.0)]
    assert [check_math(p, r, latex=(parse, verify)) for p, r, _ in cases] == [c[2] for c in cases]
    assert [check_math(p, r) for p, r, _ in cases] == [0.0, 0.0, 0.0, 0.0, 1.0]
    completions = ["<answer>\\frac{1}{2}</answer>", "The answer is 0.5", "<answer>16</answer>"]
    references = ["0.5", "0.5", "16"]
    assert reward_math(None, completions, references) == [1.0, 0.0, 1.0]  # untagged: no answer
    monkeypatch.setitem(sys.modules, "tunix_lite.rewards.math_latex", None)  # as without math-verify
    assert reward_math(None, completions, references) == [0.0, 0.0, 1.0]


@pytest.mark.slow
def test_test_prompts_a_stage_trained_on_are_counted_and_the_rest_scored_apart(tmp_path, capsys,
                                                                               micro_model):
    """One-digit products have 100 questions, so another seed's test prompts are mostly training prompts:
    with allow_overlap the run says how many, and the table scores the others first, with its interval."""
    products = "reasoning_gym:products?products.max_digits=1"
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "export": False, "model": str(micro_model),
        "data": {"train": f"{products}&size=60&seed=1", "test": f"{products}&size=40&seed=2"},
        "defaults": {"seq_len": 96, "warmup_steps": 0, "batch_size": 2, "eval_every": 0, "n_accuracy": 0},
        "stages": [{"name": "sft", "algorithm": "sft", "steps": 1}],
        "evaluation": {"n_prompts": 30, "samples": 1, "scaling": [1], "max_new_tokens": 4,
                       "allow_overlap": True}}))
    assert main(["run", str(path)]) == 0
    trained = {r["prompt"] for r in make_records(f"{products}&size=60&seed=1")}
    tested = [r["prompt"] for r in make_records(f"{products}&size=40&seed=2")]
    tested = list(dict.fromkeys(tested))[:30]
    seen = sum(prompt in trained for prompt in tested)
    assert 0 < seen < 30
    assert (f"evaluation: {seen} of the 30 test prompts are training prompts (sft's {seen})"
            in capsys.readouterr().out)
    header, _, base, sft = (tmp_path / "run" / "report" / "table.md").read_text().splitlines()
    assert header.startswith(f"| stage | unseen, n={30 - seen} [95% CI] |")
    column = header.split(" | ").index(f"unseen, n={30 - seen} [95% CI]")
    assert re.fullmatch(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", sft.split(" | ")[column])


def test_rl_on_a_task_it_trains_whole_needs_no_validation_unless_it_reads_one(tmp_path, capsys,
                                                                              micro_model):
    """The train side of one-digit products is 81 facts, every one a training prompt under any
    seed: a GRPO run that answers no validation prompts (n_accuracy: 0) trains on it; one that
    would answer some is refused in one line naming the fix, before a step."""
    config = {"algorithm": "grpo", "model": str(micro_model), "rewards": ["reasoning_gym"],
              "train_data": "reasoning_gym:products?size=2000&seed=1&split=train&unordered=true"
                            "&products.max_digits=1",
              "steps": 1, "batch_size": 2, "group_size": 2, "max_new_tokens": 4, "seq_len": 128,
              "warmup_steps": 0, "eval_every": 0, "output_dir": str(tmp_path / "run")}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    capsys.readouterr()
    assert main(["train", "--config", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        "tunix-lite train: error: validation_data: every generated prompt is also a training "
        "prompt; choose tasks or configs with more distinct questions, or set validation_data (an "
        "RL run with n_accuracy: 0 reads none)")
    assert not (tmp_path / "run").exists()
    path.write_text(yaml.safe_dump(config | {"n_accuracy": 0}))
    assert main(["train", "--config", str(path)]) == 0
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\"reward\"") == 1
