"""`tunix-lite grade-capstone RUN_DIR`: grade a capstone pipeline run from what it wrote.

A capstone is a `tunix-lite run` of the learner's recipe (configs/capstone_tiny.yaml is the cheap
example) plus a write-up, `RUN_DIR/WRITEUP.md` (course/CAPSTONE.md says what goes in it). The
check reads the run's held-out report (`report/table.json`: each stage's summary and each test
prompt's greedy verdict) and scores one point per criterion:

- evaluated: the recipe's stage and the baseline have per-prompt verdicts on at least `min_n`
  test prompts;
- decontaminated: no test prompt occurs in any stage's training data. The pipeline counts them
  (each stage's summary: `n` test prompts, `n_unseen` of them in no training data); the check
  reads those counts, so a stricter split the pipeline makes is read the same way;
- beats the baseline: on those unseen prompts, the recipe's greedy accuracy minus the baseline's,
  paired prompt by prompt (`tunix_lite.evaluation.paired_difference`), has a 95% interval whose
  lower end is above `min_lower_bound`;
- the write-up: at least `min_words` words; a heading for each of `sections`; the paired result
  quoted as the check computes it (`+0.05 [+0.01, +0.09]`); the number of test prompts trained on,
  out of n (`0 of 256`); and a line `Claim: ...` that says the recipe beats the baseline exactly
  when the interval says so.

The baseline is a stage of this run (`base`, the start model, unless given) or `DIR:STAGE`, a stage
of another run scored on the same test prompts (an instructor's reference run). The thresholds are
THRESHOLDS below; an instructor's `--tests DIR` reads `DIR/capstone.py`, whose THRESHOLDS override
them (kept out of the learners' copy). The report has `tunix-lite grade`'s shape (`--json`, and
Gradescope's results.json beside it with `--tests`). Exit code 0 when every criterion holds, 1
when some do not, 2 on bad arguments. What no script can judge (is the argument sound, does the
failure analysis find the cause) is the instructor's reading: course/INSTRUCTOR.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path

THRESHOLDS = {
    "baseline": "base",  # a stage of the run, or DIR:STAGE of another run on the same prompts
    "min_n": 200,  # test prompts, at least (a table's figures need 200)
    "min_lower_bound": 0.0,  # the paired change's 95% interval must start above this
    "min_words": 250,
    "sections": ("recipe", "result", "what did not work", "next"),
}
WRITEUP = "WRITEUP.md"
# '+0.05 [+0.01, +0.09]': a change and its interval, as stage tables print them
_RESULT = re.compile(r"([+\-−]?\d*\.\d+)\s*\[\s*([+\-−]?\d*\.\d+)\s*,\s*([+\-−]?\d*\.\d+)\s*\]")
_COUNT = re.compile(r"(\d+)\s+(?:of|out of|/)\s+(?:the\s+)?(\d+)")
_NEGATION = re.compile(r"\b(?:not|no|does ?n[o']t|fails?|cannot)\b", re.IGNORECASE)


class CapstoneError(ValueError):
    """A run directory or argument the check cannot read: one line, what and where."""


def thresholds(tests_dir: str | Path | None) -> dict:
    """THRESHOLDS, overridden by DIR/capstone.py's THRESHOLDS (the instructor's hidden ones)."""
    if tests_dir is None:
        return dict(THRESHOLDS)
    from tunix_lite.course import graded

    path = Path(tests_dir) / "capstone.py"
    if not path.is_file():
        raise CapstoneError(f"--tests {tests_dir}: no capstone.py there (its THRESHOLDS override "
                            "the public ones)")
    module = graded.load_source(path.read_text(encoding="utf-8"), "capstone", str(path))
    unknown = set(getattr(module, "THRESHOLDS", {})) - set(THRESHOLDS)
    if unknown:
        raise CapstoneError(f"{path}: THRESHOLDS has unknown keys {sorted(unknown)}; known: "
                            f"{sorted(THRESHOLDS)}")
    return THRESHOLDS | dict(getattr(module, "THRESHOLDS", {}))


def read_table(run: Path) -> dict:
    """report/table.json of a pipeline run: {stage: {"summary": ..., "greedy_right": [...]}}."""
    path = run / "report" / "table.json"
    if not path.is_file():
        raise CapstoneError(f"{run}: no report/table.json; run the pipeline with an evaluation "
                            "section (`tunix-lite run FILE.yaml`) first")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise CapstoneError(f"{path}: not JSON ({e}); rerun `tunix-lite run` to rewrite "
                            "it") from None


def test_prompts_key(run: Path, n: int) -> str:
    """What identifies a run's first n test prompts: their hash (data/test.jsonl), else the data
    and evaluation sections that generate them (a data.test spec)."""
    path = run / "data" / "test.jsonl"
    if path.is_file():
        lines = path.read_text(encoding="utf-8").splitlines()[:n]
        prompts = [json.loads(line)["prompt"] for line in lines if line.strip()]
        return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()
    spec = run / "pipeline.yaml"
    if not spec.is_file():
        raise CapstoneError(f"{run}: neither data/test.jsonl nor pipeline.yaml: cannot tell which "
                            "prompts it was scored on")
    import yaml

    values = yaml.safe_load(spec.read_text(encoding="utf-8")) or {}
    return json.dumps([values.get("data", {}).get("test"), n])


def _stage(table: dict, name: str, where: Path) -> dict:
    if name not in table:
        raise CapstoneError(f"{where}/report/table.json: no stage {name!r}; its stages: "
                            f"{', '.join(table)}")
    return table[name]


def baseline_of(run: Path, table: dict, spec: str) -> tuple[str, dict]:
    """(its name, its table entry): a stage of `run`, or DIR:STAGE of another run on the same
    prompts."""
    if ":" not in spec:
        return spec, _stage(table, spec, run)
    folder, stage = spec.rsplit(":", 1)
    other = Path(folder)
    entry = _stage(read_table(other), stage, other)
    n = len(entry.get("greedy_right") or [])
    if test_prompts_key(other, n) != test_prompts_key(run, n):
        raise CapstoneError(f"--baseline {spec}: that run was scored on other test prompts than "
                            f"{run}; a paired comparison needs the same ones (the same data and "
                            "evaluation sections)")
    return spec, entry


def _criterion(name: str, passed: bool, message: str) -> dict:
    return {"exercise": "capstone", "test": name, "description": name.replace("_", " "),
            "outcome": "passed" if passed else "failed", "message": "" if passed else message,
            "detail": message}


def _numbers(text: str) -> list[tuple[float, float, float]]:
    return [tuple(float(x.replace("−", "-")) for x in m) for m in _RESULT.findall(text)]


def grade_capstone(run: str | Path, *, recipe: str | None = None, baseline: str | None = None,
                   writeup: str | Path | None = None, tests_dir: str | Path | None = None) -> dict:
    """The report (tunix-lite grade's shape: "tests", "score", "max_score", ...) of one run."""
    from tunix_lite.evaluation import paired_difference

    start = time.perf_counter()
    run = Path(run)
    if not run.is_dir():
        raise CapstoneError(f"no such run directory: {run}")
    limits = thresholds(tests_dir)
    table = read_table(run)
    recipe = recipe or list(table)[-1]
    mine = _stage(table, recipe, run)
    base_name, base = baseline_of(run, table, baseline or limits["baseline"])
    right, before = mine.get("greedy_right") or [], base.get("greedy_right") or []
    summary = mine.get("summary", {})
    n = len(right)
    tests = [_criterion("evaluated", n >= limits["min_n"] and len(before) == n,
                        f"{recipe}: {n} test prompts with verdicts, {base_name}: {len(before)}; "
                        f"needs the same {limits['min_n']} or more (evaluation.n_prompts)")]
    counted = [entry.get("summary", {}) for entry in (mine, base)]
    missing = [s for s in counted if "n_unseen" not in s]
    trained_on = max((int(s.get("n", 0)) - int(s.get("n_unseen", s.get("n", 0))) for s in counted),
                     default=0)
    if missing:
        clean, why = False, ("the report does not count the test prompts a stage trains on "
                             "(no n_unseen): rerun `tunix-lite run` to evaluate again")
    else:
        clean = trained_on == 0
        why = (f"{trained_on} of the {int(summary.get('n', n))} test prompts occur in a stage's "
               "training data: take the test split from prompts no stage trains on")
    tests.append(_criterion("decontaminated", clean, why))
    change = lo = hi = None
    if n and len(before) == n:
        change, lo, hi = paired_difference(before, right)
    beats = clean and lo is not None and lo > limits["min_lower_bound"]
    result = (f"{recipe} - {base_name}: {change:+.2f} [{lo:+.2f}, {hi:+.2f}] paired, n = {n}"
              if change is not None else "no paired result")
    tests.append(_criterion("beats_the_baseline", beats,
                            result + ("" if clean else " (not held out: see decontaminated)")
                            + f"; needs the interval above {limits['min_lower_bound']:+.2f}"))
    tests += _rubric(Path(writeup) if writeup else run / WRITEUP, limits,
                     (change, lo, hi), (trained_on, int(summary.get("n", n))), beats)
    passed = sum(t["outcome"] == "passed" for t in tests)
    return {"notebook": str(run), "phase": "capstone", "seed": None, "tests": tests,
            "hidden_tests": str(tests_dir) if tests_dir else None, "score": passed,
            "max_score": len(tests), "percent": round(100.0 * passed / len(tests), 1),
            "seconds": round(time.perf_counter() - start, 1), "recipe": recipe,
            "baseline": base_name, "paired": [change, lo, hi], "n": n,
            "trained_on": trained_on}


def _rubric(path: Path, limits: dict, paired: tuple, counts: tuple[int, int],
            beats: bool) -> list[dict]:
    """The write-up's criteria: length, sections, the result quoted, the overlap stated, the
    claim matching the evidence."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    where = f"{path.name}" if text else f"{path} (missing)"
    words = len(re.findall(r"[A-Za-z]+", text))
    headings = [line.lstrip("#").strip().lower() for line in text.splitlines()
                if line.startswith("#")]
    absent = [s for s in limits["sections"] if not any(s in h for h in headings)]
    change, lo, hi = paired
    quoted = change is not None and any(
        max(abs(a - change), abs(b - lo), abs(c - hi)) <= 0.006 for a, b, c in _numbers(text))
    stated = any((int(a), int(b)) == counts for a, b in _COUNT.findall(text))
    claims = [line.split(":", 1)[1].strip() for line in text.splitlines()
              if line.strip().lower().startswith("claim:") and line.split(":", 1)[1].strip()]
    says_beats = bool(claims) and not _NEGATION.search(claims[-1])
    shown = f"{change:+.2f} [{lo:+.2f}, {hi:+.2f}]" if change is not None else "(none)"
    return [
        _criterion("writeup_length", words >= limits["min_words"],
                   f"{where}: {words} words, at least {limits['min_words']}"),
        _criterion("writeup_sections", not absent,
                   f"{where}: no heading for {', '.join(repr(s) for s in absent)}"),
        _criterion("writeup_quotes_the_result", quoted,
                   f"{where}: state the paired change and its 95% interval, {shown}"),
        _criterion("writeup_states_decontamination", stated,
                   f"{where}: state how many test prompts a stage trained on, "
                   f"'{counts[0]} of {counts[1]}'"),
        _criterion("writeup_claim_matches_the_evidence", bool(claims) and says_beats == beats,
                   f"{where}: a line 'Claim: ...' that says the recipe "
                   f"{'beats' if beats else 'does not beat'} the baseline, as {shown} says"),
    ]


def format_report(report: dict) -> str:
    lines = [f"capstone {report['notebook']}: {report['recipe']} against {report['baseline']}"
             + (f" (hidden thresholds {report['hidden_tests']})" if report["hidden_tests"] else "")]
    for t in report["tests"]:
        mark = "✓" if t["outcome"] == "passed" else "✗"
        lines.append(f"  {mark} {t['description']}: {t['detail']}")
    lines.append(f"score {report['score']}/{report['max_score']}; the argument itself is the "
                 "instructor's to read (course/INSTRUCTOR.md)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tunix_lite.course.grading import VISIBILITY, gradescope, write_json

    parser = argparse.ArgumentParser(prog="tunix-lite grade-capstone",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("run", help="the pipeline's output_dir, e.g. runs/capstone_tiny")
    parser.add_argument("--recipe", help="the stage graded (default: the run's last)")
    parser.add_argument("--baseline", help="a stage of this run, or DIR:STAGE of another run on "
                                           "the same test prompts (default: base, or the "
                                           "instructor's)")
    parser.add_argument("--writeup", help=f"the write-up (default: RUN/{WRITEUP})")
    parser.add_argument("--tests", help="instructor: a folder whose capstone.py holds THRESHOLDS; "
                                        "also writes Gradescope's results.json")
    parser.add_argument("--visibility", choices=VISIBILITY, default="visible")
    parser.add_argument("--json", help="where to write the JSON report (default: "
                                       "RUN/capstone.grade.json)")
    args = parser.parse_args(argv)
    try:
        report = grade_capstone(args.run, recipe=args.recipe, baseline=args.baseline,
                                writeup=args.writeup, tests_dir=args.tests)
    except CapstoneError as e:
        print(f"tunix-lite grade-capstone: error: {e}", file=sys.stderr)
        return 2
    print(format_report(report))
    out = Path(args.json or Path(args.run) / "capstone.grade.json")
    write_json(out, report)
    print(f"wrote {out}")
    if args.tests:
        write_json(out.parent / "results.json", gradescope(report, args.visibility))
        print(f"wrote {out.parent / 'results.json'} (Gradescope)")
    return 0 if report["score"] == report["max_score"] else 1


if __name__ == "__main__":
    sys.exit(main())
