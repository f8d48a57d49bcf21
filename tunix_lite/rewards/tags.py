"""The answer-tag protocol: how a completion is written, how its answer is read back, and the
rewards that check it.

    <reasoning>5 + 3 = 8. 8 * 2 = 16.</reasoning><answer>16</answer>     # the "reasoning" style
    5 + 3 = 8. 8 * 2 = 16. <answer>16</answer>                           # the "plain" style

Every task of the library (the synthetic ones, reasoning-gym's, a records file) is answered this
way, so one reader (`answer_of`) serves the rewards, the verifiers, evaluation and the preference
pairs. The rewards follow TRL's convention,
`reward(prompts, completions, **columns) -> list[float]`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
REASONING_OPEN, REASONING_CLOSE = "<reasoning>", "</reasoning>"
# How a completion is written: "plain" is `{reasoning} <answer>{answer}</answer>` (what the tiny
# model was pretrained on); "reasoning" wraps the reasoning in tags,
# `<reasoning>{reasoning}</reasoning><answer>{answer}</answer>`, the format reasoning-model recipes
# (and the capstone) train and reward.
STYLES = ("plain", "reasoning")


def write_completion(reasoning: str, answer: str, style: str = "plain") -> str:
    """A completion in one of the STYLES."""
    if style == "plain":
        return f"{reasoning} {ANSWER_OPEN}{answer}{ANSWER_CLOSE}"
    if style == "reasoning":
        return f"{REASONING_OPEN}{reasoning}{REASONING_CLOSE}{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"
    raise ValueError(f"unknown completion style {style!r}; choose one of {', '.join(STYLES)}")


_ANSWER = re.compile(r"<answer>([^<]*)</answer>")  # no answer of ours contains "<"


def answer_of(text: str) -> str | None:
    """The stripped content of the last <answer>...</answer> in `text`, or None if there is none."""
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


def same_answer(got: str | None, reference: str) -> bool:
    """Whether a tagged answer equals the reference (whitespace runs count as one)."""
    return got is not None and got.split() == reference.split()


def reward_exact_match(prompts: Sequence, completions: Sequence[str], answer: Sequence[str],
                       **kwargs) -> list[float]:
    """1.0 for each completion whose tagged answer equals the reference (whitespace runs count as
    one), else 0.0.

    A TRL-style reward function. The references are named `answer` after the dataset column, because
    TRL passes the dataset's columns as keyword arguments.
    """
    return [float(same_answer(answer_of(c), ref)) for c, ref in zip(completions, answer,
                                                                     strict=True)]


def reward_format(prompts: Sequence, completions: Sequence[str], **kwargs) -> list[float]:
    """1.0 for each completion with exactly one non-empty <answer>...</answer> that ends it, else
    0.0.

    Requiring the answer to come last teaches the policy to stop once it has answered.
    """
    def well_formed(text):
        if text.count(ANSWER_OPEN) != 1 or text.count(ANSWER_CLOSE) != 1:
            return False
        body, closed, rest = text.partition(ANSWER_OPEN)[2].partition(ANSWER_CLOSE)
        return bool(closed and body.strip()) and not rest.strip()
    return [float(well_formed(c)) for c in completions]


_REASONED = re.compile(r"\s*<reasoning>(?P<reasoning>[^<]*\S[^<]*)</reasoning>"
                       r"\s*<answer>[^<]*\S[^<]*</answer>\s*")


def reward_reasoning_format(prompts: Sequence, completions: Sequence[str], **kwargs) -> list[float]:
    """1.0 for each completion that is exactly `<reasoning>...</reasoning><answer>...</answer>`
    (both non-empty, nothing before or after but whitespace), else 0.0: the "reasoning" style's
    format reward."""
    return [float(_REASONED.fullmatch(c) is not None) for c in completions]


def has_reasoning(text: str) -> bool:
    """Whether `text` holds a closed, non-empty <reasoning>...</reasoning> block
    (the reasoning-marker rate)."""
    _, opened, rest = text.partition(REASONING_OPEN)
    inside, closed, _ = rest.partition(REASONING_CLOSE)
    return bool(opened and closed and inside.strip())


def answer_flaw(text: str, answer: str) -> str:
    """"correct", "wrong" (a closed tag with another answer), "untagged" (no <answer>) or "unclosed"
    (<answer> but no complete <answer>...</answer>): the three flaws the synthetic preference pairs
    reject (`tunix_lite.data.synthetic.preference_pairs`)."""
    if ANSWER_OPEN not in text:
        return "untagged"
    got = answer_of(text)
    if got is None:
        return "unclosed"
    return "correct" if same_answer(got, answer) else "wrong"
