"""Synthetic, verifiable tasks: the data every lesson trains and evaluates on.

Seven tiny domains whose answers a program can check, so the same examples serve SFT (imitate the
completion), DPO (prefer the correct completion over a flawed one) and GRPO (reward the checked
answer). An example:

    {"domain": "arithmetic",
     "prompt": "Ana has 5 pens. Ana gets 3 more. Ana doubles them. "
               "How many pens does Ana have now?",
     "reasoning": "5 + 3 = 8. 8 * 2 = 16.",
     "answer": "16",
     "completion": "5 + 3 = 8. 8 * 2 = 16. <answer>16</answer>"}

Everything is a pure function of its seed (string-seeded `random.Random`, no global state). A
prompt's split is fixed by a hash of its text (`split_of`), so train, validation and test never
share a prompt, whatever seeds and sizes are asked for. The vocabulary is digits and a few hundred
words: the tiny model's 1,024-piece tokenizer (scripts/build_tiny_tokenizer.py) covers it without
byte fallback.
"""

import functools
import operator
import random
import string
from collections.abc import Iterator, Sequence

from tunix_lite.data.questions import key_hash
# The answer-tag protocol (how a completion is written and read) and its rewards live with the
# other rewards; the course imports them from here too.
from tunix_lite.rewards.tags import (ANSWER_CLOSE, ANSWER_OPEN,  # noqa: F401
                                     REASONING_CLOSE, REASONING_OPEN, STYLES, answer_of,
                                     has_reasoning, reward_exact_match, reward_format,
                                     reward_reasoning_format, write_completion)

SPLITS = ("train", "validation", "test")

# The small world. Fixed tables rather than seeded draws, so a fact is the same in every seed and
# split; the countries are invented so that the tiny model can only know them from its own
# pretraining corpus.
NAMES = ("Ana", "Ben", "Cal", "Dee", "Eli", "Fay", "Gus", "Ivy", "Jon", "Kim",
         "Leo", "Mia", "Ned", "Oli", "Pam", "Rex", "Sam", "Tom", "Una", "Zoe")
ITEMS = ("apples", "pens", "books", "coins", "eggs", "cups", "stones", "cards", "shells", "beads")
CAPITALS = {"Zarnia": "Velo", "Mondor": "Pika", "Tessa": "Rulo", "Brivia": "Kamo", "Olland": "Suri",
            "Quenta": "Dovo", "Larum": "Fenn", "Estra": "Golo", "Corvia": "Miro", "Pallen": "Tiva",
            "Yorra": "Bexa", "Hestia": "Lume"}
SOUNDS = {"dog": "woof", "cat": "meow", "cow": "moo", "duck": "quack", "sheep": "baa",
          "pig": "oink", "hen": "cluck", "lion": "roar", "bee": "buzz", "frog": "ribbit",
          "horse": "neigh", "mouse": "squeak"}
COLOURS_OF = {"the sky": "blue", "grass": "green", "snow": "white", "coal": "black",
              "a banana": "yellow", "a tomato": "red", "a carrot": "orange", "milk": "white",
              "a leaf": "green", "the sun": "yellow", "a cherry": "red", "chocolate": "brown",
              "a plum": "purple", "ash": "grey"}
PEOPLE = {  # name: (home country, pet, favourite colour)
    "Ana": ("Zarnia", "cow", "red"), "Ben": ("Mondor", "dog", "blue"),
    "Cal": ("Tessa", "frog", "green"), "Dee": ("Brivia", "cat", "yellow"),
    "Eli": ("Olland", "horse", "purple"), "Fay": ("Quenta", "bee", "pink"),
    "Gus": ("Larum", "pig", "orange"), "Ivy": ("Estra", "duck", "white"),
    "Jon": ("Corvia", "lion", "black"), "Kim": ("Pallen", "mouse", "brown"),
    "Leo": ("Yorra", "sheep", "grey"), "Mia": ("Hestia", "hen", "red"),
    "Ned": ("Zarnia", "duck", "green"), "Oli": ("Mondor", "cat", "pink"),
    "Pam": ("Tessa", "dog", "purple"), "Rex": ("Brivia", "lion", "blue"),
    "Sam": ("Olland", "cow", "yellow"), "Tom": ("Quenta", "horse", "white"),
    "Una": ("Larum", "frog", "black"), "Zoe": ("Estra", "bee", "orange"),
}
# Words to spell, count and transform: reused from the world to keep the vocabulary small.
WORDS = (*SOUNDS, *dict.fromkeys(COLOURS_OF.values()), *(item[:-1] for item in ITEMS))

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}


# ---- Domains: each draws one (prompt, reasoning, answer) from `rng`. ----

def _arithmetic(rng: random.Random) -> tuple[str, str, str]:
    name, items, value = rng.choice(NAMES), rng.choice(ITEMS), rng.randint(2, 20)
    sentences, steps = [f"{name} has {value} {items}."], []
    for _ in range(rng.randint(2, 4)):
        # Only moves that keep every intermediate a small positive integer.
        moves = (["+"] + ["-"] * (value > 1) + ["*"] * (value <= 50)
                 + ["/"] * (value % 2 == 0 or value % 3 == 0))
        op = rng.choice(moves)
        if op == "+":
            arg = rng.randint(1, 9)
            sentences.append(f"{name} {rng.choice(('gets', 'finds'))} {arg} more.")
        elif op == "-":
            arg = rng.randint(1, value - 1)
            sentences.append(f"{name} {rng.choice(('gives away', 'loses'))} {arg}.")
        elif op == "*":
            arg = rng.choice((2, 3))
            sentences.append(f"{name} {'doubles' if arg == 2 else 'triples'} them.")
        else:
            arg = rng.choice([k for k in (2, 3) if value % k == 0])
            sentences.append(f"{name} splits them into {arg} equal groups and keeps one group.")
        result = _OPS[op](value, arg)
        steps.append(f"{value} {op} {arg} = {result}.")
        value = result
    sentences.append(f"How many {items} does {name} have now?")
    return " ".join(sentences), " ".join(steps), str(value)


def _compare(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.sample(range(1000), 2)
    word, pick = rng.choice((("larger", max), ("smaller", min)))
    return (f"Which is {word}, {a} or {b}?", f"{max(a, b)} is more than {min(a, b)}.",
            str(pick(a, b)))


def _sort(rng: random.Random) -> tuple[str, str, str]:
    numbers = rng.sample(range(100), rng.randint(3, 5))
    word, pick, order = rng.choice((("Smallest", min, "smallest to largest"),
                                    ("Largest", max, "largest to smallest")))
    # Selection sort, written out: take the extreme, say what is left.
    left, done, steps = list(numbers), [], []
    while len(left) > 1:
        done.append(pick(left))
        left.remove(done[-1])
        steps.append(f"{word} is {done[-1]}, leaving {_join(left)}.")
    return f"Sort from {order}: {_join(numbers)}.", " ".join(steps), _join(done + left)


def _count(rng: random.Random) -> tuple[str, str, str]:
    word = rng.choice(WORDS)
    # Mostly letters that occur, sometimes one that does not, so 0 is a possible answer.
    letter = rng.choice(word) if rng.random() < 0.8 else rng.choice(string.ascii_lowercase)
    spelled, n = [], 0
    for ch in word:
        if ch == letter:
            n += 1
            ch = f"{ch} ({n})"
        spelled.append(ch)
    return (f"How many times does the letter {letter} appear in {word}?",
            f"Spell {word}: {', '.join(spelled)}. That makes {n}.", str(n))


def _facts(rng: random.Random) -> tuple[str, str, str]:
    prompt, facts, answer = rng.choice(_fact_questions())
    return prompt, " ".join(facts), answer


def _sequence(rng: random.Random) -> tuple[str, str, str]:
    step, length = rng.randint(1, 9), rng.randint(4, 5)
    if rng.random() < 0.5:
        start, op, verb = rng.randint(0, 20), "+", "adds"
    else:  # start high enough that the next term is still >= 0
        start, op, verb = rng.randint(step * length, step * length + 20), "-", "takes away"
    terms = [start]
    for _ in range(length):
        terms.append(_OPS[op](terms[-1], step))
    *shown, nxt = terms
    return (f"What comes next: {_join(shown)}?",
            f"Each step {verb} {step}. {shown[-1]} {op} {step} = {nxt}.", str(nxt))


def _instruction(rng: random.Random) -> tuple[str, str, str]:
    word, task = rng.choice(WORDS), rng.choice(("reverse", "uppercase", "repeat"))
    letters = " ".join(word)
    if task == "reverse":
        return (f"Reverse the word {word}.",
                f"Spell {word}: {letters}. Backwards: {letters[::-1]}.", word[::-1])
    if task == "uppercase":
        return (f"Write the word {word} in capital letters.",
                f"Spell {word}: {letters}. In capitals: {letters.upper()}.", word.upper())
    times = rng.randint(2, 5)
    counted = ", ".join(f"{i} {word}" for i in range(1, times + 1))
    return f"Repeat the word {word} {times} times.", f"Count: {counted}.", " ".join([word] * times)


_GENERATORS = {"arithmetic": _arithmetic, "compare": _compare, "sort": _sort, "count": _count,
               "facts": _facts, "sequence": _sequence, "instruction": _instruction}
DOMAINS = tuple(_GENERATORS)


def _join(numbers: Sequence[int]) -> str:
    return ", ".join(map(str, numbers))


@functools.cache
def _fact_questions() -> tuple[tuple[str, tuple[str, ...], str], ...]:
    """Every question the world answers, as (prompt, the fact sentences that answer it, answer)."""
    capital = {country: f"The capital of {country} is {city}."
               for country, city in CAPITALS.items()}
    says = {animal: f"A {animal} says {sound}." for animal, sound in SOUNDS.items()}
    questions = []
    for country, city in CAPITALS.items():
        questions += [(f"What is the capital of {country}?", (capital[country],), city),
                      (f"{city} is the capital of which country?", (capital[country],), country)]
    for thing, colour in COLOURS_OF.items():
        questions.append((f"What colour is {thing}?", (f"{thing.capitalize()} is {colour}.",),
                          colour))
    for animal, sound in SOUNDS.items():
        questions += [(f"What sound does a {animal} make?", (says[animal],), sound),
                      (f"Which animal says {sound}?", (says[animal],), animal)]
    for name, (country, pet, colour) in PEOPLE.items():
        lives, has = f"{name} lives in {country}.", f"{name} has a pet {pet}."
        questions += [
            (f"Where does {name} live?", (lives,), country),
            (f"What pet does {name} have?", (has,), pet),
            (f"What is the favourite colour of {name}?",
             (f"The favourite colour of {name} is {colour}.",), colour),
            # Two hops: the answer needs two facts chained, a case where written reasoning helps.
            (f"What is the capital of the country where {name} lives?", (lives, capital[country]),
             CAPITALS[country]),
            (f"What sound does the pet of {name} make?", (has, says[pet]), SOUNDS[pet]),
        ]
    return tuple(questions)


def fact_sentences() -> list[str]:
    """Every fact of the small world, one sentence each, in a fixed order."""
    return list(dict.fromkeys(fact for _, facts, _ in _fact_questions() for fact in facts))


# ---- Examples and splits ----

def split_of(prompt: str) -> str:
    """The split a prompt belongs to, fixed by its hash (`questions.key_hash`, the content split's):
    about 80% train, 10% validation, 10% test.

    The hash is of the prompt as generated, not of its normalised text: the generator words each
    question one way (no two of its prompts normalise alike, a test checks), so this is a split by
    question; and the sides stay those the embedded tiny model was pretrained on (the train side
    only, `pretraining_corpus`)."""
    bucket = key_hash(prompt) % 10
    return "train" if bucket < 8 else "validation" if bucket == 8 else "test"


def _draw(domain: str, rng: random.Random, split: str, style: str = "plain") -> dict[str, str]:
    """One example of `domain` whose prompt falls in `split` (rejection sampling on the prompt's
    hash)."""
    make = _GENERATORS[domain]
    for _ in range(10_000):
        prompt, reasoning, answer = make(rng)
        if split_of(prompt) == split:
            completion = write_completion(reasoning, answer, style)
            return {"domain": domain, "prompt": prompt, "reasoning": reasoning, "answer": answer,
                    "completion": completion}
    raise ValueError(f"no prompt of domain {domain!r} falls in split {split!r}")


def generate(domain: str, n: int, *, seed: int = 0, split: str = "train",
             style: str = "plain") -> list[dict[str, str]]:
    """`n` examples of one domain, all with prompts in `split`, completions written in `style`
    (see STYLES).

    Prompts never repeat across splits but may repeat within one: the facts domain has only 162
    questions in all. The style changes only the completion: the prompts, reasoning and answers are
    the same in both.
    """
    rng = random.Random(f"{domain}/{split}/{seed}")
    return [_draw(domain, rng, split, style) for _ in range(n)]


def _mixture(n: int, domains: Sequence[str], seed: int, split: str,
             style: str = "plain") -> list[dict[str, str]]:
    """`n` examples from `split`, the domains in equal shares (the first few one more), in seeded
    random order."""
    k = len(domains)
    rows = [ex for i, domain in enumerate(domains)
            for ex in generate(domain, n // k + (i < n % k), seed=seed, split=split, style=style)]
    random.Random(f"mixture/{split}/{seed}").shuffle(rows)
    return rows


def make_splits(n_train: int, n_val: int, n_test: int, *, domains: Sequence[str] = DOMAINS,
                seed: int = 0, style: str = "plain"):
    """A `datasets.DatasetDict` with "train", "validation" and "test" splits of mixed domains, no
    prompt shared; completions written in `style` ("plain" or "reasoning", see STYLES)."""
    import datasets  # only the course needs `datasets`; the library imports without it

    sizes = dict(zip(SPLITS, (n_train, n_val, n_test)))
    return datasets.DatasetDict(
        {split: datasets.Dataset.from_list(_mixture(n, domains, seed, split, style))
         for split, n in sizes.items()})


# ---- Preference pairs (DPO) ----

def preference_pairs(n: int, seed: int = 0, *, domains: Sequence[str] = DOMAINS,
                     split: str = "train", style: str = "plain") -> list[dict[str, str]]:
    """`n` rows {"domain", "prompt", "chosen", "rejected", "answer"}: chosen is the reference
    completion; rejected keeps the reasoning but gives a wrong answer (half the rows), drops the
    answer tags, or leaves the tag unclosed. The answer is kept so that a lesson can score the
    policy on the same prompts. `style` as in `make_splits`."""
    rng = random.Random(f"preference/{split}/{seed}")
    rows = []
    for ex in _mixture(n, domains, seed, split, style):
        reasoning, answer = ex["reasoning"], ex["answer"]
        flaw = rng.choice(("wrong", "wrong", "untagged", "unclosed"))
        body = write_completion(reasoning, "", style).removesuffix(f"{ANSWER_OPEN}{ANSWER_CLOSE}")
        if flaw == "wrong":
            rejected = write_completion(reasoning, _wrong_answer(ex, rng), style)
        elif flaw == "untagged":
            rejected = f"{body}{answer}"
        else:
            rejected = f"{body}{ANSWER_OPEN}{answer}"
        rows.append({"domain": ex["domain"], "prompt": ex["prompt"], "chosen": ex["completion"],
                     "rejected": rejected, "answer": answer})
    return rows


def _wrong_answer(example: dict[str, str], rng: random.Random) -> str:
    """A plausible wrong answer: a nearby number, two neighbours of a list swapped, or another
    answer of the domain."""
    answer = example["answer"]
    if answer.isdigit():
        delta = rng.choice((-2, -1, 1, 2))
        return str(int(answer) + delta if int(answer) + delta >= 0 else int(answer) - delta)
    if ", " in answer:
        items = answer.split(", ")
        i = rng.randrange(len(items) - 1)
        items[i], items[i + 1] = items[i + 1], items[i]
        return ", ".join(items)
    while (other := _GENERATORS[example["domain"]](rng)[2]) == answer:
        pass
    return other


# ---- Pretraining corpus ----

def pretraining_corpus(n_docs: int, seed: int = 0) -> Iterator[dict]:
    """Yield `n_docs` pretraining documents, each a dict with exactly one key:

    - {"text": str}: plain text to tokenize as is. Either 3-8 sentences about the small world
      ("Ana lives in Zarnia. A cow says moo. ..."; 30% of documents) or 1-3 worked problems from any
      domain, each written as "Question: {prompt}\\nAnswer: {completion}" and separated by blank
      lines (50%).
    - {"messages": [{"role": "user", "content": prompt},
                    {"role": "assistant", "content": completion}]}:
      an instruction exchange (20%). The pretrainer renders it with the same chat template as SFT,
      inserting the turn markers as token ids, so that their embeddings are trained before the SFT
      lessons.

    Problems come from the train split only, so validation and test prompts stay unseen by the
    pretrained model.
    """
    rng = random.Random(f"corpus/{seed}")
    facts = fact_sentences()
    for _ in range(n_docs):
        kind = rng.random()
        if kind < 0.3:
            yield {"text": " ".join(rng.sample(facts, rng.randint(3, 8)))}
        elif kind < 0.8:
            problems = [_draw(rng.choice(DOMAINS), rng, "train") for _ in range(rng.randint(1, 3))]
            yield {"text": "\n\n".join(f"Question: {ex['prompt']}\nAnswer: {ex['completion']}"
                                       for ex in problems)}
        else:
            ex = _draw("instruction", rng, "train")
            yield {"messages": [{"role": "user", "content": ex["prompt"]},
                                {"role": "assistant", "content": ex["completion"]}]}
