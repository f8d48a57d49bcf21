"""Grade a roster: `tunix-lite grade-all SUBMISSIONS_DIR --tests DIR --csv out.csv [--phase NN]`.

A learner is one entry of SUBMISSIONS_DIR (hidden entries and other files are skipped):

- a folder: the learner is the folder's name, the notebook its one `.ipynb` (searched below it,
  `.ipynb_checkpoints` ignored); none, or several, is that learner's error;
- an `.ipynb` file: the learner is the file name without `.ipynb`.

A learner's notebook must be that learner's own file: one reached through a link that leaves the
learner's folder, one that is another learner's (a link to it, or a hard link: the same file), is
that learner's error row, never graded (else one learner would get another's grade).

Each notebook is graded by `tunix_lite.course.grading.grade`, the grader of `tunix-lite grade` (its
confined worker, time limits and hidden tests), one after the other; with `--docker IMAGE`, by the
same grader inside a fresh container of IMAGE per learner (tunix_lite.course.container: no network,
read-only, only its results folder writable), a missing docker or image stopping the batch before
the first learner. A notebook that cannot be
graded (invalid JSON, no phase) is one row with its error in one line; a cell that crashes the
worker or hangs costs its exercises inside `grade`, and the row's error column names it. The
batch never stops for one learner. Rows go to a temporary file beside out.csv as they are graded
(flushed, so an interrupted batch can be inspected), which replaces out.csv only once every
learner has a row.

Exit codes: 0 when the CSV is written, whatever the scores; 2 on bad arguments; 130 when interrupted
(out.csv untouched, the partial file kept and named).
"""

from __future__ import annotations

import csv
import functools
import os
import tempfile
import time
from pathlib import Path

from tunix_lite.course import grading
from tunix_lite.course.notebook import shorten

COLUMNS = ("learner", "notebook", "score", "max_score", "exercises", "seed", "seconds", "error")
ERROR_CHARS = 300  # one readable line per learner; the full story is one `tunix-lite grade` away
PROBLEMS = ("error", "timeout")  # outcomes that mean the code crashed or hung, not a wrong answer
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs such text as a formula


def learners(submissions: Path) -> list[tuple[str, Path | None, str]]:
    """(learner, notebook or None, why there is none) for each learner in `submissions`, by name."""
    roster = []
    for entry in sorted(submissions.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            roster.append((entry.name, *_notebook_in(entry)))
        elif entry.suffix == ".ipynb":
            roster.append((entry.stem, entry, ""))
    return _own_notebooks(roster, submissions.resolve())


def _notebook_in(folder: Path) -> tuple[Path | None, str]:
    """The folder's one notebook, found without following links to folders; a notebook that is a
    link out of the folder is refused."""
    home, found = folder.resolve(), []
    for parent, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if f != ".ipynb_checkpoints")
        found += [Path(parent, name) for name in sorted(files) if name.endswith(".ipynb")]
    for path in found:
        if not path.resolve().is_relative_to(home):
            return None, (f"{path.relative_to(folder)} is a link out of the learner's folder "
                          f"(to {path.resolve()}): not graded")
    if len(found) == 1:
        return found[0], ""
    if not found:
        return None, "no .ipynb in the folder"
    names = ", ".join(str(p.relative_to(folder)) for p in found)
    return None, f"{len(found)} notebooks, expected one: {names}"


def _own_notebooks(roster: list, root: Path) -> list[tuple[str, Path | None, str]]:
    """`roster` with every notebook that is another learner's file refused: a link into another
    learner's entry, or the same file (a hard link) as another learner's notebook."""
    names = {entry.name: entry.name if entry.is_dir() else entry.stem for entry in root.iterdir()}
    checked, files = [], {}
    for learner, notebook, why in roster:
        if notebook is not None:
            real = notebook.resolve()
            inside = real.relative_to(root).parts[:1] if real.is_relative_to(root) else ()
            owner = names.get(inside[0]) if inside else None
            if owner is not None and owner != learner:
                why = f"{notebook.name} is a link to {owner}'s notebook ({real}): not graded"
                notebook = None
            else:
                try:
                    info = real.stat()
                    files.setdefault((info.st_dev, info.st_ino), []).append(learner)
                except OSError as e:  # a link to nothing, a file it may not read
                    notebook, why = None, f"{notebook.name} cannot be read: {e.strerror}"
        checked.append((learner, notebook, why))
    shared = {learner: [other for other in sharing if other != learner]
              for sharing in files.values() if len(sharing) > 1 for learner in sharing}
    return [(learner, None, f"the same file as {', '.join(shared[learner])}'s notebook (a hard "
                            "link): not graded") if learner in shared else (learner, notebook, why)
            for learner, notebook, why in checked]


def grade_row(learner: str, notebook: Path | None, why: str, *, phase: str | None,
              tests_dir: str | None, timeout: float, max_score: int | str,
              grader=None) -> dict:
    """One learner's CSV row (graded by `grader`, `grading.grade` unless given). Any exception is
    this learner's error, never the batch's."""
    row = dict.fromkeys(COLUMNS, "") | {"learner": learner, "notebook": str(notebook or ""),
                                        "score": 0, "max_score": max_score, "error": one_line(why)}
    if notebook is None:
        return row
    start = time.perf_counter()
    try:
        report = (grader or grading.grade)(notebook, timeout=timeout, phase=phase,
                                           tests_dir=tests_dir)
    except Exception as e:  # noqa: BLE001 - a broken notebook is one row, whatever broke
        return row | {"seconds": round(time.perf_counter() - start, 1),
                      "error": one_line(f"{type(e).__name__}: {e}")}
    return row | {"score": report["score"], "max_score": report["max_score"],
                  "exercises": exercise_summary(report), "seed": report["seed"],
                  "seconds": report["seconds"], "error": crash_summary(report)}


def exercise_summary(report: dict) -> str:
    """'masked_mean 4/4; pad_to_bucket 0/3 not implemented': per exercise, passed/total tests."""
    return "; ".join(f"{r['exercise']} {r['passed']}/{r['total']}"
                     + ("" if r["status"] == "passed" else f" {r['status']}")
                     for r in report["exercises"])


def crash_summary(report: dict) -> str:
    """The distinct crash and time-limit messages of a graded notebook, in one line ('' if none)."""
    messages = dict.fromkeys(f"{t['exercise']}: {t['message']}" for t in report["tests"]
                             if t["outcome"] in PROBLEMS)
    return one_line("; ".join(messages))


def one_line(text: str) -> str:
    return shorten(" ".join(text.split()), ERROR_CHARS)


def spreadsheet_safe(value: object) -> object:
    """Learner-controlled text (names, error messages) must not start a spreadsheet formula."""
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_START) else value


def max_score_of(phase: str | None, tests_dir: str | None) -> int | str:
    """The phase's test count, also the max of a row that could not be graded ('' without --phase).
    Loading the tests here also stops a bad --tests or --phase before the first learner."""
    if phase is None:
        return ""
    from tunix_lite.course import graded

    module = graded.module_for(phase, tests_dir)
    return sum(len(ex.tests) for ex in graded.exercises(phase, module))


def grade_all(submissions: str | Path, csv_path: str | Path, *, phase: str | None = None,
              tests_dir: str | None = None, timeout: float = grading.EXERCISE_SECONDS,
              image: str | None = None) -> int:
    """Grade every learner of `submissions` into `csv_path` (module docstring), each in a fresh
    container of `image` when given (tunix_lite.course.container); the exit code."""
    from tqdm import tqdm

    submissions, csv_path = Path(submissions), Path(csv_path)
    if not submissions.is_dir():
        raise ValueError(f"no such submissions folder: {submissions}")
    roster = learners(submissions)
    if not roster:
        raise ValueError(f"{submissions}: no learners (sub-folders or .ipynb files)")
    max_score = max_score_of(phase, tests_dir)
    grader = None
    if image is not None:
        from tunix_lite.course import container

        container.check_image(image)
        grader = functools.partial(container.grade, image=image)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=csv_path.parent, prefix=f".{csv_path.name}.",
                                   suffix=".partial")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, COLUMNS)
            writer.writeheader()
            bar = tqdm(roster, desc="grading", unit="learner")
            for learner, notebook, why in bar:
                bar.set_postfix_str(learner)
                row = grade_row(learner, notebook, why, phase=phase, tests_dir=tests_dir,
                                timeout=timeout, max_score=max_score, grader=grader)
                writer.writerow({k: spreadsheet_safe(v) for k, v in row.items()})
                f.flush()  # an interrupted batch leaves every finished row readable
            os.fsync(f.fileno())
    except KeyboardInterrupt:
        print(f"\ninterrupted: {csv_path} left as it was; the rows so far are in {partial}")
        return 130
    os.replace(partial, csv_path)
    print(f"wrote {csv_path} ({len(roster)} learners)")
    return 0
