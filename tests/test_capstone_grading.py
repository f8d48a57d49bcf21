"""`tunix-lite grade-capstone`: a run's held-out report and write-up, scored as course/CAPSTONE.md
says, through the CLI. The runs are built with the pipeline's own report writer (no training), so
the check reads what `tunix-lite run` writes; the instructor's hidden thresholds come from
course/instructor/hidden/capstone.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tunix_lite import cli
from tunix_lite.course import capstone
from tunix_lite.evaluation import paired_difference

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ROOT / "course" / "instructor" / "hidden"
SECTIONS = ("Recipe", "Result", "What did not work", "Next")


def _verdicts(rng, n: int, rate: float) -> np.ndarray:
    return (rng.random(n) < rate).astype(int)


def _run(folder: Path, *, n: int = 240, gain: float = 0.15, trained_on: int = 0,
         seed: int = 0) -> Path:
    """A pipeline output_dir with report/table.json for stages base, sft, grpo (grpo better than
    sft by about `gain`), data/test.jsonl and pipeline.yaml, written by the pipeline's report
    writer. Each summary counts its test prompts as the pipeline does: `n`, and `n_unseen` of them
    in no stage's training data (the first `trained_on` are)."""
    from tunix_lite.evaluation import ReasoningReport, write_report

    rng = np.random.default_rng(seed)
    base = _verdicts(rng, n, 0.1)
    sft = np.maximum(base, _verdicts(rng, n, 0.3))
    grpo = np.where(rng.random(n) < gain / 0.6, np.maximum(sft, _verdicts(rng, n, 0.9)), sft)
    unseen = np.arange(n) >= trained_on
    reports = {}
    for stage, right in (("base", base), ("sft", sft), ("grpo", grpo)):
        summary = {"accuracy": float(right.mean()), "n": n, "format": 1.0,
                   "n_seen": int((~unseen).sum()), "n_unseen": int(unseen.sum())}
        if unseen.any():
            summary["unseen"] = float(right[unseen].mean())
        reports[stage] = ReasoningReport(summary, {}, [], 1.0, right.tolist())
    folder.mkdir(parents=True)
    write_report(reports, folder / "report")
    (folder / "data").mkdir()
    rows = [{"prompt": f"question {i}?", "answer": str(i)} for i in range(n)]
    (folder / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "pipeline.yaml").write_text("output_dir: x\nmodel: tiny\n")
    return folder


def _writeup(run: Path, baseline: str = "base", claim: str | None = None, words: int = 300) -> str:
    """A write-up with the four sections that quotes the run's own paired result."""
    table = json.loads((run / "report" / "table.json").read_text())
    before, after = table[baseline]["greedy_right"], table["grpo"]["greedy_right"]
    change, lo, hi = paired_difference(before, after)
    summary = table["grpo"]["summary"]
    trained = summary["n"] - summary["n_unseen"]
    claim = claim or ("the recipe beats the baseline." if lo > 0 else "no measurable gain.")
    filler = " ".join(["the held-out curve and its interval"] * (words // 6))
    text = "\n".join([
        "# My recipe", "## Recipe", f"SFT then GRPO. {filler}",
        "## Result", f"grpo against {baseline}: {change:+.2f} [{lo:+.2f}, {hi:+.2f}] paired on "
        f"{summary['n']} prompts; {trained} of {summary['n']} test prompts were trained on.",
        f"Claim: {claim}", "## What did not work", "DPO moved nothing.", "## Next", "More data."])
    (run / "WRITEUP.md").write_text(text)
    return text


def _grade(run: Path, *args: str, out: Path | None = None) -> tuple[int, dict]:
    out = out or run.parent / f"{run.name}.grade.json"
    code = cli.main(["grade-capstone", str(run), "--json", str(out), *args])
    return code, json.loads(out.read_text()) if out.is_file() else {}


def _outcomes(report: dict) -> dict[str, str]:
    return {t["test"]: t["outcome"] for t in report["tests"]}


def test_a_decontaminated_recipe_that_beats_the_baseline_scores_full_marks(tmp_path, capsys):
    run = _run(tmp_path / "good")
    _writeup(run)
    code, report = _grade(run)
    assert code == 0, capsys.readouterr().out
    assert report["score"] == report["max_score"] == 8, report["tests"]
    assert report["recipe"] == "grpo" and report["baseline"] == "base" and report["n"] == 240
    assert report["paired"][1] > 0 and report["trained_on"] == 0


def test_the_unfilled_template_and_a_missing_write_up_fail_the_rubric(tmp_path):
    """The stub of the written part: course/CAPSTONE.md's sections with nothing in them."""
    run = _run(tmp_path / "stub")
    (run / "WRITEUP.md").write_text("\n".join(f"## {s}\n" for s in SECTIONS) + "Claim:\n")
    code, report = _grade(run)
    outcomes = _outcomes(report)
    assert code == 1 and outcomes["beats_the_baseline"] == "passed"
    assert {k for k, v in outcomes.items() if v == "failed"} == {
        "writeup_length", "writeup_quotes_the_result", "writeup_states_decontamination",
        "writeup_claim_matches_the_evidence"}
    (run / "WRITEUP.md").unlink()
    _, report = _grade(run)
    assert all(v == "failed" for k, v in _outcomes(report).items() if k.startswith("writeup"))


def test_a_run_that_trained_on_test_prompts_is_not_held_out(tmp_path):
    """12 of 240 test prompts in a stage's training data: not decontaminated, and its gain does not
    count, however large; the write-up that says so (and claims nothing) keeps its points."""
    run = _run(tmp_path / "leaky", trained_on=12, gain=0.3)
    _writeup(run, claim="no held-out gain can be claimed.")
    code, report = _grade(run)
    outcomes = _outcomes(report)
    assert code == 1 and outcomes["decontaminated"] == "failed"
    assert outcomes["beats_the_baseline"] == "failed" and report["trained_on"] == 12
    message = next(t["detail"] for t in report["tests"] if t["test"] == "decontaminated")
    assert "12 of the 240 test prompts" in message
    assert outcomes["writeup_states_decontamination"] == "passed"
    assert outcomes["writeup_claim_matches_the_evidence"] == "passed"


def test_a_claim_the_interval_does_not_support_costs_its_point(tmp_path):
    run = _run(tmp_path / "flat", gain=0.0)
    _writeup(run, baseline="sft", claim="the recipe beats the baseline.")
    code, report = _grade(run, "--baseline", "sft")
    outcomes = _outcomes(report)
    assert report["paired"][1] <= 0 and outcomes["beats_the_baseline"] == "failed"
    assert outcomes["writeup_claim_matches_the_evidence"] == "failed"
    _writeup(run, baseline="sft", claim="no measurable gain over the baseline.")
    _, report = _grade(run, "--baseline", "sft")
    assert _outcomes(report)["writeup_claim_matches_the_evidence"] == "passed"
    assert report["score"] == report["max_score"] - 1


def test_the_instructors_hidden_thresholds_and_baseline(tmp_path):
    """course/instructor/hidden/capstone.py sets a baseline and bars the learner did not see: a
    gain over the start model that passes the public bar is judged against the SFT stage there,
    and the Gradescope results.json is written beside the report."""
    hidden = capstone.thresholds(HIDDEN)
    assert hidden != capstone.thresholds(None)
    run = _run(tmp_path / "learner", gain=0.0, n=max(240, hidden["min_n"]))
    _writeup(run, words=max(300, hidden["min_words"] + 60))
    public_code, public = _grade(run)
    assert public_code == 0, public["tests"]
    code, report = _grade(run, "--tests", str(HIDDEN), out=tmp_path / "out" / "grade.json")
    assert code == 1 and report["baseline"] == hidden["baseline"]
    assert _outcomes(report)["beats_the_baseline"] == "failed"
    gradescope = json.loads((tmp_path / "out" / "results.json").read_text())
    assert gradescope["max_score"] == report["max_score"] and len(gradescope["tests"]) == 8


def test_a_baseline_from_another_run_must_share_its_test_prompts(tmp_path, capsys):
    run, reference = _run(tmp_path / "mine"), _run(tmp_path / "reference", seed=1)
    _writeup(run)
    code, report = _grade(run, "--baseline", f"{reference}:sft")
    assert code in (0, 1) and report["baseline"] == f"{reference}:sft"
    (reference / "data" / "test.jsonl").write_text(json.dumps({"prompt": "another", "answer": "1"}))
    code, _ = _grade(run, "--baseline", f"{reference}:sft", out=tmp_path / "other.json")
    assert code == 2 and "other test prompts" in capsys.readouterr().err


@pytest.mark.parametrize("args, error", [
    (["missing_dir"], "no such run directory"),
    (["empty"], "no report/table.json"),
    (["good", "--baseline", "dpo"], "no stage 'dpo'; its stages: base, sft, grpo"),
    (["good", "--tests", "TMP"], "no capstone.py there"),
])
def test_bad_input_is_one_line_naming_it(tmp_path, capsys, args, error):
    _run(tmp_path / "good")
    (tmp_path / "empty").mkdir()
    path = tmp_path / args[0]
    args = [str(tmp_path) if a == "TMP" else a for a in args[1:]]
    code = cli.main(["grade-capstone", str(path), *args, "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2 and error in err and len(err.strip().splitlines()) == 1, err
