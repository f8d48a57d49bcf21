"""Re-execute a notebook under a profile and commit what a learner should see.

    python scripts/refresh_notebook.py notebooks/02_gemma3_from_scratch.ipynb  # run (ci), rewrite
    python scripts/refresh_notebook.py notebooks/*.ipynb --finish-bars-only    # no run: fix bars

Running writes every cell's fresh outputs back into the file, as CI's nbval run computes them (the
`ci` profile, CPU, the notebook's own directory). It runs the .ipynb's cells, so it first checks
that they are what its .py pair makes (`jupytext --sync` after editing the .py:
course/AUTHORING.md). Either way, a tqdm progress bar is stored as its finished text
("train: 100%|##########| 300/300"), not as the live widget, which a saved notebook shows frozen at
0% (the widget's state is not saved with it).

Each executed code cell is stamped with a hash of its source and the profile that ran it (in its
metadata's `execution` record, beside the run's times: jupytext keeps that record when it syncs the
pair), so a committed output can be traced to the code that made it: CI fails on an output whose
stamp does not match its cell's source (`stale_outputs`; tests/test_notebook_outputs.py).
A run keeps the outputs another profile made (`--profile cpu --cells 33`: a longer run's payoff,
labelled with its command in the cell) as long as their cells' sources are unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from pathlib import Path

WIDGET = "application/vnd.jupyter.widget-view+json"
# tqdm's first frame: "desc:   0%|          | 0/300 [00:00<?, ?it/s]" (desc and total optional)
BAR = re.compile(r"^(?:(?P<desc>.*?): *)?\d+%\|[^|]*\| *\d+/(?P<total>\d+|\?)")


def finished_bar(text: str) -> str | None:
    """The finished form of a tqdm bar's text, or None when `text` is not a tqdm bar."""
    match = BAR.match(text.strip())
    if match is None:
        return None
    total, desc = match["total"], match["desc"]
    bar = f"100%|{'█' * 10}| {total}/{total}" if total != "?" else "done"
    return f"{desc}: {bar}\n" if desc else f"{bar}\n"


def finish_progress_bars(notebook: dict) -> int:
    """Replace every stored tqdm widget by its finished text (a stderr stream, as tqdm writes it
    outside Jupyter); returns how many were replaced. Cells whose outputs nbval compares with a
    fresh run (`# NBVAL_CHECK_OUTPUT`) keep the widget a fresh run makes."""
    replaced = 0
    for cell in notebook["cells"]:
        if "NBVAL_CHECK_OUTPUT" in "".join(cell.get("source", "")):
            continue
        outputs = []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            text = finished_bar("".join(data.get("text/plain", ""))) if WIDGET in data else None
            if text is None:
                outputs.append(output)
                continue
            outputs.append({"name": "stderr", "output_type": "stream", "text": [text]})
            replaced += 1
        if "outputs" in cell:
            cell["outputs"] = outputs
    return replaced


SOURCE, PROFILE = "tunix_lite.source", "tunix_lite.profile"  # the stamp's keys in `execution`


def source_hash(cell: dict) -> str:
    """The stamp of a cell's source: the first 16 hex digits of its SHA-256."""
    source = "".join(cell.get("source", ""))
    return "sha256:" + hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def stamp_of(cell: dict) -> dict:
    """{SOURCE: hash, PROFILE: name} of a cell ({} when unstamped)."""
    record = cell.get("metadata", {}).get("execution", {})
    return {key: record[key] for key in (SOURCE, PROFILE) if key in record}


def stamp(notebook: dict, profile: str) -> None:
    """Record in each code cell's metadata the hash of the source that made its outputs and the
    profile it ran under."""
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["metadata"].setdefault("execution", {}).update(
                {SOURCE: source_hash(cell), PROFILE: profile})


def keep_committed(fresh: dict, committed: dict, profile: str, cells: set[int] | None) -> int:
    """Put the committed outputs (and stamps) back into `fresh` (the same cells, run now) where they
    stay: with `cells`, every other cell; without, the cells whose output another profile made from
    the source they still have. Returns how many outputs stayed."""
    kept = 0
    for index, (new, old) in enumerate(zip(fresh["cells"], committed["cells"])):
        was = stamp_of(old)
        other_run = was.get(PROFILE, profile) != profile and was.get(SOURCE) == source_hash(new)
        stays = index not in cells if cells is not None else other_run
        if new["cell_type"] == "code" and stays:
            new["outputs"] = old.get("outputs", [])
            new["metadata"]["execution"] = old.get("metadata", {}).get("execution", {})
            kept += 1
    return kept


def stale_outputs(notebook: dict) -> list[str]:
    """One line per code cell whose committed outputs no stamp ties to its current source."""
    stale = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code" or not cell.get("outputs"):
            continue
        stamped = stamp_of(cell).get(SOURCE)
        if stamped != source_hash(cell):
            why = "has no stamp" if stamped is None else "was made by another source"
            stale.append(f"cell {index}: its output {why}")
    return stale


def check_paired(path: Path) -> None:
    """Stop when the .ipynb's cells are not what its .py pair makes: a run would store them."""
    import jupytext

    pair = path.with_suffix(".py")
    if not pair.is_file():
        return
    sources = [[(c.cell_type, c.source) for c in jupytext.read(p).cells] for p in (path, pair)]
    if sources[0] != sources[1]:
        raise SystemExit(f"{path} differs from {pair}: run `jupytext --sync {pair}` first")


def execute(path: Path, profile: str, timeout: int = 600) -> dict:
    """The notebook run top to bottom in its own directory, as CI runs it (`timeout`: per cell)."""
    import nbclient
    import nbformat

    os.environ.update(JAX_PLATFORMS="cpu", TUNIX_LITE_PROFILE=profile)
    notebook = nbformat.read(path, as_version=4)
    resources = {"metadata": {"path": str(path.parent)}}
    nbclient.NotebookClient(notebook, timeout=timeout, resources=resources).execute()
    return json.loads(nbformat.writes(notebook))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--profile", default="ci",
                        help="TUNIX_LITE_PROFILE to run under (default: ci)")
    parser.add_argument("--cells", type=lambda text: {int(i) for i in text.split(",")},
                        help="store only these cells' outputs (indices, e.g. 33,36), e.g. a longer "
                             "profile's payoff; the others keep what is committed")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may take")
    parser.add_argument("--finish-bars-only", action="store_true",
                        help="do not run: only store the progress bars already there as finished")
    args = parser.parse_args()
    for path in args.notebooks:
        notebook = json.loads(path.read_text())
        kept = None
        if not args.finish_bars_only:
            check_paired(path)
            committed, notebook = notebook, execute(path, args.profile, args.timeout)
            stamp(notebook, args.profile)
            kept = keep_committed(notebook, committed, args.profile, args.cells)
        bars = finish_progress_bars(notebook)
        # nbformat's on-disk layout, as tunix_lite.course.build writes it (keys sorted)
        path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        ran = "" if kept is None else f"ran ({args.profile}), {kept} outputs kept as committed, "
        print(f"{path}: {ran}{bars} progress bars stored finished")


if __name__ == "__main__":
    main()
