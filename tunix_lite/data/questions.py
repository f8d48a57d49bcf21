"""What makes two prompts the same question, and which side of a content split a question lies on.

A held-out question is one that occurs in no training data. Strings are not questions: "What is
2 + 3?" and "what is  2 + 3?" ask the same thing, and reasoning-gym's basic_arithmetic words one
expression four ways. So every data source is split, and every evaluation decontaminated, by a
question's key:

    question_key(entry)      # a reasoning-gym entry: the expression it asks about, else its text
    record_keys(record)      # what a record asks: its normalised prompt (and its entry's key)
    on_test_side(key, 0.2)   # the content split: a stable hash of the key, one side for ever
    unordered_key(key)       # "7 * 3" -> "3 * 7": a split that keeps a fact and its mirror together

The hash (`key_hash`, the first 8 bytes of SHA-256) depends on the key alone, never on a seed or
a size, so no seed of the test side asks a question that any seed of the train side asks. The
reasoning-gym specs (`split=test`), record files (`data.jsonl?split=test`) and the synthetic
generator (`synthetic.split_of`) all split with it; `tunix_lite.evaluation.decontamination`
counts and excludes with `record_keys`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

SPLITS = ("train", "test")  # split=SIDE: only the questions on that side of the content split
TEST_FRACTION = 0.2  # of the questions, on the test side unless a source sets test_fraction


def normalise(text: str) -> str:
    """A question's text as compared: lower case, each run of whitespace one space."""
    return " ".join(str(text).lower().split())


def key_hash(key: str) -> int:
    """A number in [0, 2**64) fixed by `key` alone: the first 8 bytes of its SHA-256."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


def on_test_side(key: str, test_fraction: float = TEST_FRACTION) -> bool:
    """Whether the question with this key is a test question: its `key_hash`, read as a fraction
    of 2**64, falls below `test_fraction` (so the test side at 0.2 lies inside the test side at
    0.3)."""
    return key_hash(key) < test_fraction * 2**64


def question_key(entry: Mapping) -> str:
    """What a reasoning-gym entry asks: the expression where its metadata names one
    (basic_arithmetic words one expression four ways; the same sum asked by two tasks is one
    question), else its question's text; normalised."""
    text = entry["metadata"].get("expression") or entry["question"]
    return normalise(text)


def unordered_key(key: str) -> str:
    """A question's key with its terms sorted where one operator that ignores order (+ or *) joins
    them all ("7 * 3" and "3 * 7" -> "3 * 7"), else the key itself. A split by this key puts a fact
    and its mirror on one side: a model that learned 3 * 7 has not thereby seen 7 * 3 answered."""
    terms = key.split(" ")
    numbers, operators = terms[0::2], set(terms[1::2])
    if len(terms) < 3 or len(terms) % 2 == 0 or len(operators) != 1 or not operators <= {"+", "*"}:
        return key
    return f" {operators.pop()} ".join(sorted(numbers))


def prompt_of(record: Mapping) -> str | None:
    """A record's prompt: its `prompt` column, else its first user message (chat records)."""
    prompt = record.get("prompt")
    if prompt is None:
        users = [m.get("content") for m in record.get("messages") or ()
                 if isinstance(m, Mapping) and m.get("role") == "user"]
        prompt = users[0] if users else None
    return prompt


def split_key(record: Mapping) -> str:
    """The key a record's side of the content split is hashed from: its reasoning-gym entry's
    `question_key` where it carries one (so a file of generated records splits as the spec that
    generated them), else its normalised prompt. ValueError when it has neither."""
    entry = record.get("entry")
    if entry:
        return question_key(json.loads(entry) if isinstance(entry, str) else entry)
    prompt = prompt_of(record)
    if prompt is None:
        raise ValueError(f"a record with no prompt, messages or entry ({', '.join(record)}): "
                         "nothing to split it by")
    return normalise(prompt)


def record_keys(record: Mapping) -> set[str]:
    """Every key a record answers to: its normalised prompt, and its entry's question where it
    carries one. Two records ask the same question when they share a key (a generated record read
    back without its entry column still matches its prompt)."""
    keys = set()
    prompt = prompt_of(record)
    if prompt is not None:
        keys.add("prompt:" + normalise(prompt))
    if record.get("entry"):
        keys.add("question:" + split_key(record))
    return keys
