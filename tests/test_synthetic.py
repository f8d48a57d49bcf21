"""Tests for tunix_lite.data.synthetic and the tiny tokenizer built from its corpus.

Every answer is re-derived here from the prompt text alone, by a solver written independently of the generators.
"""

import pathlib
import re

import pytest
import sentencepiece as spm

import tunix_lite
from tunix_lite.data import synthetic as syn

TOKENIZER = pathlib.Path(tunix_lite.__file__).parent / "assets" / "tiny" / "tokenizer.model"


# ---- Independent solvers: prompt -> answer ----

def solve_arithmetic(prompt):
    value = None
    for sentence in re.findall(r"[^.?]+[.?]", prompt):
        s = sentence.strip()
        if m := re.fullmatch(r"\w+ has (\d+) \w+\.", s):
            value = int(m[1])
        elif m := re.fullmatch(r"\w+ (?:gets|finds) (\d+) more\.", s):
            value += int(m[1])
        elif m := re.fullmatch(r"\w+ (?:gives away|loses) (\d+)\.", s):
            value -= int(m[1])
        elif re.fullmatch(r"\w+ (doubles|triples) them\.", s):
            value *= 2 if "doubles" in s else 3
        elif m := re.fullmatch(r"\w+ splits them into (\d+) equal groups and keeps one group\.", s):
            assert value % int(m[1]) == 0
            value //= int(m[1])
        else:
            assert re.fullmatch(r"How many \w+ does \w+ have now\?", s), s
        assert value > 0
    return str(value)


def solve_compare(prompt):
    word, a, b = re.fullmatch(r"Which is (larger|smaller), (\d+) or (\d+)\?", prompt).groups()
    return str((max if word == "larger" else min)(int(a), int(b)))


def solve_sort(prompt):
    order, numbers = re.fullmatch(r"Sort from (\w+) to \w+: ([\d, ]+)\.", prompt).groups()
    return ", ".join(map(str, sorted(map(int, numbers.split(", ")), reverse=order == "largest")))


def solve_count(prompt):
    letter, word = re.fullmatch(r"How many times does the letter (\w) appear in (\w+)\?", prompt).groups()
    return str(word.count(letter))


def solve_facts(prompt):
    country_of = {city: country for country, city in syn.CAPITALS.items()}
    animal_of = {sound: animal for animal, sound in syn.SOUNDS.items()}
    colour_of = {thing: colour for thing, colour in syn.COLOURS_OF.items()}
    patterns = {
        r"What is the capital of the country where (\w+) lives\?": lambda p: syn.CAPITALS[syn.PEOPLE[p][0]],
        r"What sound does the pet of (\w+) make\?": lambda p: syn.SOUNDS[syn.PEOPLE[p][1]],
        r"What is the capital of (\w+)\?": syn.CAPITALS.__getitem__,
        r"(\w+) is the capital of which country\?": country_of.__getitem__,
        r"What colour is ([\w ]+)\?": colour_of.__getitem__,
        r"What sound does a (\w+) make\?": syn.SOUNDS.__getitem__,
        r"Which animal says (\w+)\?": animal_of.__getitem__,
        r"Where does (\w+) live\?": lambda p: syn.PEOPLE[p][0],
        r"What pet does (\w+) have\?": lambda p: syn.PEOPLE[p][1],
        r"What is the favourite colour of (\w+)\?": lambda p: syn.PEOPLE[p][2],
    }
    for pattern, solve in patterns.items():
        if m := re.fullmatch(pattern, prompt):
            return solve(m[1])
    raise AssertionError(f"unknown fact question: {prompt}")


def solve_sequence(prompt):
    terms = [int(t) for t in re.fullmatch(r"What comes next: ([\d, ]+)\?", prompt)[1].split(", ")]
    steps = {b - a for a, b in zip(terms, terms[1:])}
    assert len(steps) == 1 and len(terms) >= 4
    return str(terms[-1] + steps.pop())


def solve_instruction(prompt):
    if m := re.fullmatch(r"Reverse the word (\w+)\.", prompt):
        return m[1][::-1]
    if m := re.fullmatch(r"Write the word (\w+) in capital letters\.", prompt):
        return m[1].upper()
    word, times = re.fullmatch(r"Repeat the word (\w+) (\d+) times\.", prompt).groups()
    return " ".join([word] * int(times))


SOLVERS = {"arithmetic": solve_arithmetic, "compare": solve_compare, "sort": solve_sort, "count": solve_count,
           "facts": solve_facts, "sequence": solve_sequence, "instruction": solve_instruction}


def test_every_domain_has_a_solver():
    assert set(SOLVERS) == set(syn.DOMAINS)


@pytest.mark.parametrize("domain", syn.DOMAINS)
@pytest.mark.parametrize("split", syn.SPLITS)
def test_examples_are_correct_and_well_formed(domain, split):
    for ex in syn.generate(domain, 100, seed=3, split=split):
        assert ex["domain"] == domain and syn.split_of(ex["prompt"]) == split
        assert ex["completion"] == f"{ex['reasoning']} <answer>{ex['answer']}</answer>"
        assert syn.answer_of(ex["completion"]) == ex["answer"] == SOLVERS[domain](ex["prompt"])


def test_arithmetic_reasoning_steps_are_true_and_chained():
    for ex in syn.generate("arithmetic", 200, seed=4):
        steps = re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)\.", ex["reasoning"])
        assert 2 <= len(steps) <= 4 and len(steps) == ex["reasoning"].count("=")
        for i, (a, op, b, c) in enumerate(steps):
            assert eval(f"{a} {op.replace('/', '//')} {b}") == int(c)
            assert i == 0 or a == steps[i - 1][3]
        assert steps[-1][3] == ex["answer"]


def test_generate_is_deterministic_per_seed():
    assert syn.generate("arithmetic", 20, seed=1) == syn.generate("arithmetic", 20, seed=1)
    assert syn.generate("arithmetic", 20, seed=1) != syn.generate("arithmetic", 20, seed=2)
    assert list(syn.pretraining_corpus(30, seed=5)) == list(syn.pretraining_corpus(30, seed=5))
    assert syn.preference_pairs(20, seed=6) == syn.preference_pairs(20, seed=6)


def test_make_splits_are_deterministic_disjoint_and_mixed():
    splits = syn.make_splits(350, 140, 140, seed=0)
    again = syn.make_splits(350, 140, 140, seed=0)
    assert all(splits[name].to_list() == again[name].to_list() for name in syn.SPLITS)
    assert {name: len(ds) for name, ds in splits.items()} == {"train": 350, "validation": 140, "test": 140}
    prompts = {name: set(ds["prompt"]) for name, ds in splits.items()}
    assert not prompts["train"] & prompts["validation"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["validation"] & prompts["test"]
    assert set(splits["test"]["domain"]) == set(syn.DOMAINS)
    # Membership is a function of the prompt alone, so other seeds cannot leak across splits either.
    other = syn.make_splits(70, 70, 70, seed=1)
    assert all(syn.split_of(p) == name for name, ds in other.items() for p in ds["prompt"])


def test_answer_of():
    assert syn.answer_of("3 + 4 = 7. <answer>7</answer>") == "7"
    assert syn.answer_of("<answer> Velo \n</answer>") == "Velo"
    assert syn.answer_of("<answer>1</answer> no, <answer>2</answer>") == "2"
    assert syn.answer_of("<answer>1<answer>2</answer>") == "2"
    assert syn.answer_of("the answer is 7") is None
    assert syn.answer_of("<answer>7") is None


def test_reward_exact_match():
    completions = ["x <answer>42</answer>", "<answer> 42 </answer>", "<answer>41</answer>", "42", "<answer>42"]
    assert syn.reward_exact_match([""] * 5, completions, ["42"] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]
    spaced = ["<answer>3,  5</answer>", "<answer>3,5</answer>"]
    assert syn.reward_exact_match(["", ""], spaced, ["3, 5"] * 2) == [1.0, 0.0]  # runs of spaces count as one
    assert syn.reward_exact_match([""], ["<answer>CAT</answer>"], ["cat"]) == [0.0]  # case matters (uppercase task)
    # TRL passes dataset columns by name.
    assert syn.reward_exact_match(prompts=[""], completions=["<answer>a</answer>"], answer=["a"], domain=["x"]) == [1.0]


def test_reward_format():
    cases = {
        "r. <answer>4</answer>": 1.0,
        "<answer>4</answer>\n": 1.0,
        "<answer>4</answer> and more": 0.0,  # the answer must end the completion
        "<answer> </answer>": 0.0,
        "<answer>4": 0.0,
        "4</answer>": 0.0,
        "<answer>1</answer><answer>2</answer>": 0.0,
        "</answer>4<answer>": 0.0,
        "4": 0.0,
    }
    assert syn.reward_format([""] * len(cases), list(cases)) == list(cases.values())


def test_reference_completions_get_full_reward():
    rows = syn.make_splits(70, 0, 0)["train"]
    assert syn.reward_format(rows["prompt"], rows["completion"]) == [1.0] * 70
    assert syn.reward_exact_match(rows["prompt"], rows["completion"], rows["answer"]) == [1.0] * 70


def test_preference_pairs_prefer_the_correct_formatted_answer():
    rows = syn.preference_pairs(140, seed=2)
    assert all(set(row) == {"domain", "prompt", "chosen", "rejected", "answer"} for row in rows)
    assert all(syn.split_of(row["prompt"]) == "train" for row in rows)
    assert all(SOLVERS[row["domain"]](row["prompt"]) == row["answer"] for row in rows)
    prompts, answers = [row["prompt"] for row in rows], [row["answer"] for row in rows]
    chosen, rejected = [row["chosen"] for row in rows], [row["rejected"] for row in rows]
    assert syn.reward_exact_match(prompts, chosen, answers) == [1.0] * len(rows)
    assert syn.reward_format(prompts, chosen) == [1.0] * len(rows)
    wrong = syn.reward_exact_match(prompts, rejected, answers)
    broken = syn.reward_format(prompts, rejected)
    assert all(w == 0.0 or b == 0.0 for w, b in zip(wrong, broken))
    assert 0 < sum(broken) < len(rows)  # both kinds of flaw occur


def test_pretraining_corpus_documents():
    docs = list(syn.pretraining_corpus(300, seed=0))
    assert all(len(doc) == 1 for doc in docs)
    texts = [doc["text"] for doc in docs if "text" in doc]
    chats = [doc["messages"] for doc in docs if "messages" in doc]
    assert texts and chats and len(texts) + len(chats) == 300
    assert all([m["role"] for m in chat] == ["user", "assistant"] for chat in chats)
    facts = set(syn.fact_sentences())
    for text in texts:
        if text.startswith("Question: "):
            for problem in text.split("\n\n"):
                prompt = re.fullmatch(r"Question: (.*)\nAnswer: .* <answer>[^<]+</answer>", problem)[1]
                assert syn.split_of(prompt) == "train"
        else:
            assert set(re.split(r"(?<=\.) ", text)) <= facts


# ---- The tiny tokenizer ----

@pytest.fixture(scope="module")
def sp():
    return spm.SentencePieceProcessor(model_file=str(TOKENIZER))


def test_tokenizer_special_ids(sp):
    assert (sp.pad_id(), sp.eos_id(), sp.bos_id(), sp.unk_id()) == (0, 1, 2, 3)
    assert sp.vocab_size() <= 2048
    for piece in ("<start_of_turn>", "<end_of_turn>", "<answer>", "</answer>"):
        assert sp.encode(piece) == [sp.piece_to_id(piece)] and sp.piece_to_id(piece) != sp.unk_id()


def test_tokenizer_splits_digits(sp):
    assert [sp.id_to_piece(i) for i in sp.encode("9876543210")] == list("9876543210")
    assert [sp.id_to_piece(i) for i in sp.encode("<answer>120</answer>")] == ["<answer>", "1", "2", "0", "</answer>"]


def test_tokenizer_round_trips_the_corpus_without_byte_fallback(sp):
    for doc in syn.pretraining_corpus(200, seed=7):
        for text in [doc["text"]] if "text" in doc else [m["content"] for m in doc["messages"]]:
            ids = sp.encode(text)
            assert sp.decode(ids) == text
            assert not any(sp.is_byte(i) or sp.is_unknown(i) for i in ids), text


def test_the_answer_budget_fits_every_reference_completion():
    """TaskEval's default budget follows the data: a model that wrote the reference reply (and then stopped)
    would be cut off nowhere and score full marks, in every domain, validation and test splits alike."""
    from tunix_lite.evaluation import answer_budget

    _, tokenizer = tunix_lite.load("tiny")
    rows = [ex for split in ("validation", "test") for domain in syn.DOMAINS
            for ex in syn.generate(domain, 40, seed=11, split=split)]
    budget = answer_budget(tokenizer, [r["completion"] for r in rows])
    for r in rows:
        stop = tokenizer.piece_to_id("<end_of_turn>")
        reply = tokenizer.encode(r["completion"]) + [stop]
        assert len(reply) <= budget, r
        text = tokenizer.decode([t for t in reply[:budget] if t != stop])  # as the sampler decodes it
        assert syn.reward_exact_match(None, [text], [r["answer"]]) == [1.0]
        assert syn.reward_format(None, [text]) == [1.0]
    sort_longest = max(len(tokenizer.encode(r["completion"])) for r in rows if r["domain"] == "sort")
    assert sort_longest > 48  # the old fixed budget of 48 tokens cut the sort domain's reasoning off


def test_the_reasoning_style_tags_the_same_examples():
    plain = syn.make_splits(35, 7, 7, seed=5)
    tagged = syn.make_splits(35, 7, 7, seed=5, style="reasoning")
    for split in syn.SPLITS:
        for a, b in zip(plain[split], tagged[split], strict=True):
            assert {k: v for k, v in a.items() if k != "completion"} == {k: v for k, v in b.items() if k != "completion"}
            assert b["completion"] == f"<reasoning>{a['reasoning']}</reasoning><answer>{a['answer']}</answer>"
    completions = tagged["train"]["completion"]
    answers = tagged["train"]["answer"]
    assert syn.reward_exact_match(None, completions, answers) == [1.0] * 35
    assert syn.reward_format(None, completions) == syn.reward_reasoning_format(None, completions) == [1.0] * 35
    assert all(map(syn.has_reasoning, completions))
    assert syn.reward_reasoning_format(None, plain["train"]["completion"]) == [0.0] * 35
    assert not any(map(syn.has_reasoning, plain["train"]["completion"]))
    bad = ["<reasoning></reasoning><answer>3</answer>", "<reasoning>x</reasoning><answer>3</answer> more",
           "<answer>3</answer>", "<reasoning>x<answer>3</answer>"]
    assert syn.reward_reasoning_format(None, bad) == [0.0] * 4
    with pytest.raises(ValueError, match="unknown completion style 'xml'"):
        syn.generate("sort", 1, style="xml")


def test_reasoning_style_preference_pairs_keep_the_tags_on_the_chosen_side():
    rows = syn.preference_pairs(40, seed=2, style="reasoning")
    plain = syn.preference_pairs(40, seed=2)
    assert [r["prompt"] for r in rows] == [r["prompt"] for r in plain]
    assert syn.reward_reasoning_format(None, [r["chosen"] for r in rows]) == [1.0] * 40
    rejected_ok = syn.reward_exact_match(None, [r["rejected"] for r in rows], [r["answer"] for r in rows])
    assert sum(rejected_ok) == 0 and all(syn.has_reasoning(r["rejected"]) for r in rows)
