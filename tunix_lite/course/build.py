"""Build exercises/NN_*.ipynb from solutions/NN_*.ipynb (one source, nbgrader-style markers).

In a code cell tagged `graded`, the lines from `### BEGIN SOLUTION` to `### END SOLUTION` become
`raise NotImplementedError("Exercise <function>: ...")` at the same indentation. A demo cell that uses one of
those functions (or what such a cell computed) is tagged `raises-exception`, so "run all" (and nbval) goes on
past it until the learner has written the function. Outputs, execution counts and volatile metadata are
dropped, so the output bytes depend only on the solution's source.

    python -m tunix_lite.course.build            # write exercises/
    python -m tunix_lite.course.build --check    # exit 1 if exercises/ differs from a fresh build
    python -m tunix_lite.course.build --stamp    # first rewrite badges and setup cells from
                                                 # REPO_URL/VERSION/RELEASED
    python -m tunix_lite.course.build --learner-copy DIR   # the course without what only an
                                                           # instructor may see (LEARNER_EXCLUDES)
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tunix_lite import course
from tunix_lite.course.notebook import BEGIN, END, is_graded, read, source

NOTEBOOK_METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}
_DEF = re.compile(r"^(\s*)def\s+(\w+)\s*\(")
# What course.badges() wrote, released (the two badges) or not (one line), so a stamp can flip it.
_BADGES = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\) "
                     r"\[!\[Open In Kaggle\]\([^)]*\)\]\([^)]*\)"
                     rf"|{re.escape(course.OPEN_BY_UPLOAD)}[^\n]*")


def stub(name: str) -> str:
    return f'raise NotImplementedError("Exercise {name}: write your solution here, then run check({name})")'


def strip_solutions(src: str, where: str) -> str:
    """Replace each BEGIN/END SOLUTION region by a NotImplementedError naming the enclosing function."""
    out: list[str] = []
    lines = src.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() != BEGIN:
            if line.strip() == END:
                raise ValueError(f"{where}: {END} without {BEGIN}")
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        name = next((m.group(2) for prev in reversed(out) if (m := _DEF.match(prev)) and len(m.group(1)) < len(indent)),
                    None)
        if name is None:
            raise ValueError(f"{where}: a solution region must sit inside a function (its name names the exercise)")
        try:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == END)
        except StopIteration:
            raise ValueError(f"{where}: {BEGIN} in {name} has no {END}") from None
        out.append(indent + stub(name))
        i = end + 1
    return "\n".join(out)


def _uses(src: str, names: set[str]) -> set[str] | None:
    """The names a cell binds, if it reads one of `names` (passing an exercise to check() is not a use);
    None if it does not."""
    try:
        tree = ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines()))
    except SyntaxError:
        return None
    checked = {id(arg) for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "check"
               for arg in n.args}
    if not any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load) and id(n) not in checked
               for n in ast.walk(tree)):
        return None
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} | {
        n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def build_notebook(nb: dict, where: str = "notebook", name: str | None = None) -> dict:
    """The exercise version of a solutions notebook (a new dict; the input is not modified).

    With `name` (the file name), markdown links and badges to solutions/<name> are pointed at exercises/<name>.
    """
    # what fails until the learner writes it: the stubbed functions, and whatever a cell computes from them
    failing = {m.group(2) for cell in nb["cells"] if is_graded(cell) and BEGIN in source(cell)
               for m in map(_DEF.match, source(cell).splitlines()) if m and not m.group(1)}
    cells = []
    for n, cell in enumerate(nb["cells"]):
        src = source(cell)
        here = f"{where} cell {n}"
        if BEGIN in src and not is_graded(cell):
            raise ValueError(f"{here}: solution regions belong in code cells tagged 'graded'")
        if BEGIN in src:
            src = strip_solutions(src, here)
        if name and cell["cell_type"] == "markdown":
            src = src.replace(f"solutions/{name}", f"exercises/{name}")
        new = {"cell_type": cell["cell_type"], "metadata": {}, "source": src}
        if "id" in cell:
            new["id"] = cell["id"]
        tags = list(cell.get("metadata", {}).get("tags", []))
        bound = _uses(src, failing) if cell["cell_type"] == "code" and not is_graded(cell) else None
        if bound is not None:
            tags = list(dict.fromkeys([*tags, "raises-exception"]))
            failing |= bound
        if tags:
            new["metadata"]["tags"] = tags
        if cell["cell_type"] == "code":
            new["execution_count"] = None
            new["outputs"] = []
        cells.append(new)
    return {"cells": cells, "metadata": NOTEBOOK_METADATA, "nbformat": 4, "nbformat_minor": nb.get("nbformat_minor", 5)}


def dumps(nb: dict) -> str:
    """nbformat's on-disk layout (indent 1, sorted keys, sources as line lists), without importing it."""
    nb = json.loads(json.dumps(nb))
    for cell in nb["cells"]:
        cell["source"] = cell["source"].splitlines(keepends=True)
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def build(solutions: Path, exercises: Path) -> dict[Path, str]:
    """{exercise path: file text} for every solutions/NN_*.ipynb."""
    sources = sorted(solutions.glob("[0-9][0-9]_*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"no NN_*.ipynb in {solutions}")
    return {exercises / p.name: dumps(build_notebook(read(p), str(p), p.name)) for p in sources}


# What a learner's copy leaves out: the solutions, the instructor's kit (hidden tests, quiz answers,
# the guide) and the tests, which grade the solutions (learners grade with check() and
# `tunix-lite grade`, whose public tests live in the package).
LEARNER_EXCLUDES = ("solutions/", "course/instructor/", "course/INSTRUCTOR.md", "tests/", ".ci/")
_UNTRACKED = {".git", ".venv", "runs", "dist", "build", "__pycache__", ".cache", ".pytest_cache"}


def repository_files(root: Path) -> list[str]:
    """The repository's files, relative to root: git's tracked files where root is a checkout,
    else every file outside virtual environments, runs and caches."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True,
                                check=True).stdout.decode().split("\0")
        files = [f for f in listed if f and (root / f).is_file()]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and not _UNTRACKED & set(p.relative_to(root).parts))


def learner_copy(root: Path, target: Path) -> list[str]:
    """Write the course as a learner gets it into `target` (new or empty): every repository file
    but LEARNER_EXCLUDES, with exercises/ built afresh from solutions/. Returns the files
    written."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"--learner-copy {target}: exists and is not an empty folder; "
                              "name a new one (nothing is overwritten)")
    if target.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"--learner-copy {target}: inside the repository {root}; name a folder "
                         "outside it")
    built = {p.relative_to(root).as_posix(): text
             for p, text in build(root / "solutions", root / "exercises").items()}
    written = []
    for rel in repository_files(root):
        if rel.startswith(LEARNER_EXCLUDES) or rel in LEARNER_EXCLUDES:
            continue
        out = target / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if rel in built:
            out.write_text(built.pop(rel), encoding="utf-8")
        else:
            shutil.copy2(root / rel, out)
        written.append(rel)
    for rel, text in built.items():  # an exercise not committed yet
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_text(text, encoding="utf-8")
        written.append(rel)
    return written


def stamp(path: Path, rel: str) -> bool:
    """Rewrite a notebook's badges and setup cell from REPO_URL / VERSION / RELEASED; True if the
    file changed."""
    nb = read(path)
    setup = course.setup_cell().splitlines()[:-1]  # keep each notebook's own `profile = setup(...)` line
    first_code = True
    for cell in nb["cells"]:
        src = source(cell)
        if cell["cell_type"] == "markdown":
            cell["source"] = _BADGES.sub(lambda _: course.badges(rel), src)
        elif first_code:
            first_code = False
            cell["source"] = "\n".join(setup + src.splitlines()[-1:])
        else:
            cell["source"] = src
    text = dumps(nb)
    if text == path.read_text(encoding="utf-8"):
        return False
    path.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tunix-lite build-exercises", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed exercises are stale")
    parser.add_argument("--solutions", default="solutions", type=Path)
    parser.add_argument("--exercises", default="exercises", type=Path)
    parser.add_argument("--stamp", action="store_true",
                        help="first rewrite badges and setup cells in notebooks/ and solutions/ from REPO_URL/VERSION")
    parser.add_argument("--learner-copy", type=Path, metavar="DIR",
                        help="write the course without solutions, quiz answers, instructor "
                             "files and tests into DIR (new or empty), then stop")
    args = parser.parse_args(argv)
    if args.learner_copy:
        try:
            written = learner_copy(args.solutions.resolve().parent, args.learner_copy)
        except (FileExistsError, ValueError) as e:
            print(f"tunix-lite build-exercises: error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {len(written)} files to {args.learner_copy} (left out: "
              f"{', '.join(LEARNER_EXCLUDES)})")
        return 0
    if args.stamp:
        root = args.solutions.resolve().parent
        for path in sorted([*(root / "notebooks").glob("*.ipynb"), *args.solutions.glob("*.ipynb")]):
            if stamp(path, path.resolve().relative_to(root).as_posix()):
                print(f"stamped {path}")
    built = build(args.solutions, args.exercises)
    if args.check:
        stale = [str(p) for p, text in built.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
        orphans = [str(p) for p in sorted(args.exercises.glob("[0-9][0-9]_*.ipynb")) if p not in built]
        for p in stale:
            print(f"stale: {p}")
        for p in orphans:
            print(f"no solutions notebook for: {p}")
        if stale or orphans:
            print("run `tunix-lite build-exercises` (python -m tunix_lite.course.build) and commit the result")
            return 1
        print(f"{len(built)} exercise notebooks are up to date")
        return 0
    args.exercises.mkdir(parents=True, exist_ok=True)
    for p, text in built.items():
        p.write_text(text, encoding="utf-8")
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
