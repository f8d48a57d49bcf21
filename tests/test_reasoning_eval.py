"""Held-out evaluation estimators against closed forms and brute force over every subset."""

import itertools
import math

import numpy as np
import pytest

from tunix_lite.reasoning_eval import ReasoningReport, best_of_k, majority_at_k, pass_at_k, stage_table


@pytest.mark.parametrize("n, c, k", [(16, 0, 1), (16, 3, 1), (16, 3, 4), (16, 15, 2), (16, 16, 16), (10, 4, 7),
                                     (200, 17, 100)])
def test_pass_at_k_is_the_unbiased_closed_form(n, c, k):
    closed = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(closed, abs=1e-12)
    if n <= 16:  # and equals the fraction of k-subsets holding a right sample
        right = [i < c for i in range(n)]
        hits = [any(right[i] for i in s) for s in itertools.combinations(range(n), k)]
        assert pass_at_k(n, c, k) == pytest.approx(np.mean(hits), abs=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(n, c, n + 1)


def _brute_best_of(scores, correct, k):
    """Average over subsets of the (tie-averaged) correctness of the top-scored samples."""
    values = []
    for subset in itertools.combinations(range(len(scores)), k):
        top = max(scores[i] for i in subset)
        winners = [i for i in subset if scores[i] == top]
        values.append(np.mean([correct[i] for i in winners]))
    return np.mean(values)


@pytest.mark.parametrize("seed", range(4))
def test_best_of_k_is_exact_with_ties(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, 9).astype(float)  # few distinct scores: many ties
    correct = rng.random(9) < 0.4
    for k in range(1, 10):
        assert best_of_k(scores, correct, k) == pytest.approx(_brute_best_of(scores, correct, k), abs=1e-12)
    assert best_of_k(scores, correct, 1) == pytest.approx(correct.mean())


def test_majority_vote_counts_ties_and_ignores_missing_answers():
    answers = ["4", "4", "5", None, " 5 ", "6"]

    def right(reference):  # what a scorer says of each sample
        return [a is not None and a.strip() == reference for a in answers]

    assert majority_at_k(answers, right("4"), 6) == pytest.approx(0.5)  # "4", "5" tie 2-2: half
    assert majority_at_k(answers, right("6"), 6) == 0.0
    assert majority_at_k(answers, right("4"), 1) == pytest.approx(2 / 6)  # a sample's accuracy
    assert majority_at_k([None, None], [False, False], 2) == 0.0
    brute = []
    for subset in itertools.combinations(range(6), 3):
        votes = {}
        for i in subset:
            if answers[i] is not None:
                votes[answers[i].strip()] = votes.get(answers[i].strip(), 0) + 1
        top = max(votes.values()) if votes else 0
        winners = [a for a, v in votes.items() if v == top]
        brute.append(("4" in winners) / len(winners) if winners else 0.0)
    assert majority_at_k(answers, right("4"), 3) == pytest.approx(np.mean(brute))


def test_stage_table_has_a_row_per_stage_and_a_column_per_domain():
    summary = {"accuracy": 0.5, "format": 1.0, "reasoning": 0.25, "length": 31.0, "accuracy/sort": 0.75,
               "pass@1": 0.4, "pass@4": 0.7, "maj@1": 0.4, "maj@4": 0.55}
    reports = {"base": ReasoningReport(summary, {}, [], 1.0),
               "sft": ReasoningReport(summary | {"accuracy": 0.9, "accuracy/count": 1.0}, {}, [], 1.0)}
    markdown, table = stage_table(reports)
    lines = markdown.splitlines()
    assert lines[0] == ("| stage | greedy acc | pass@1 | pass@4 | maj@4 | format | reasoning | length | count | "
                        "sort |")
    assert lines[2] == "| base | 0.50 | 0.40 | 0.70 | 0.55 | 1.00 | 0.25 | 31.0 | - | 0.75 |"
    assert lines[3].startswith("| sft | 0.90 |") and table["sft"]["accuracy/count"] == 1.0


def test_stage_table_gives_intervals_and_each_stage_s_paired_change():
    """With n and per-prompt verdicts: greedy accuracy with its Wilson interval, and the change from
    the stage above with the paired interval (hand-computed)."""
    summary = {"n": 200, "accuracy": 0.5, "format": 1.0, "reasoning": 1.0, "length": 30.0,
               "pass@1": 0.4, "pass@4": 0.7, "maj@4": 0.55}
    base_right = [1] * 100 + [0] * 100
    sft_right = [1] * 120 + [0] * 80
    reports = {"base": ReasoningReport(summary, {}, [], 1.0, base_right),
               "sft": ReasoningReport(summary | {"accuracy": 0.6}, {}, [], 1.0, sft_right)}
    markdown, table = stage_table(reports)
    lines = markdown.splitlines()
    assert lines[0].startswith("| stage | greedy acc [95% CI] | vs previous [95% CI] | pass@1 |")
    # Wilson: 100/200 -> [0.4314, 0.5686]; 120/200 -> [0.5308, 0.6654]
    assert lines[2].startswith("| base | 0.50 [0.43, 0.57] | - | 0.40 |")
    # paired (Agresti-Min): 20 prompts gained, 0 lost of 200: 20/202 +- 1.96 sqrt(21 - 400/202) / 202
    assert lines[3].startswith("| sft | 0.60 [0.53, 0.67] | +0.10 [+0.06, +0.14] | 0.40 |")
    np.testing.assert_allclose(table["sft"]["vs_previous"], [0.1, 0.05669, 0.14133], atol=1e-5)
    # no answer changed: the interval stays open, +- 1.96 / (n + 2)
    unchanged = {"a": reports["sft"], "b": ReasoningReport(summary | {"accuracy": 0.6}, {}, [], 1.0, sft_right)}
    np.testing.assert_allclose(stage_table(unchanged)[1]["b"]["vs_previous"], [0, -1.96 / 202, 1.96 / 202])
    assert ReasoningReport.from_json(reports["sft"].to_json()).greedy_right == sft_right


def test_stages_from_one_base_are_each_paired_with_the_base():
    """Two stages that both start from base (a pipeline's `from: base`): each change is paired with
    the base's verdicts, not with the row above, and the column says so; a chain keeps "vs
    previous"."""
    summary = {"n": 200, "accuracy": 0.5, "format": 1.0, "reasoning": 1.0, "length": 30.0,
               "pass@1": 0.4}
    rows = {"base": [1] * 100 + [0] * 100, "grpo": [1] * 120 + [0] * 80,
            "rloo": [1] * 120 + [0] * 80}
    reports = {name: ReasoningReport(summary | {"accuracy": sum(r) / 200}, {}, [], 1.0, r)
               for name, r in rows.items()}
    markdown, table = stage_table(reports, {"grpo": "base", "rloo": "base"})
    assert "| vs its start [95% CI] |" in markdown.splitlines()[0]
    for stage in ("grpo", "rloo"):
        np.testing.assert_allclose(table[stage]["vs_previous"], [0.1, 0.05669, 0.14133], atol=1e-5)
    chained, table = stage_table(reports, {"grpo": "base", "rloo": "grpo"})
    assert "| vs previous [95% CI] |" in chained.splitlines()[0]
    assert table["rloo"]["vs_previous"][0] == 0
