"""pytest plugin: a table of how long each notebook took under nbval (a record, not a timed test).

    pytest -p tunix_lite.course.nbtiming --nbval-lax notebooks/ solutions/

Sums setup + call + teardown of every nbval cell item per notebook (the first cell's setup includes
the kernel start). `--nb-timing-json PATH` also writes {notebook: seconds}.
"""

from __future__ import annotations

import json
from collections import defaultdict

_seconds: dict[str, float] = defaultdict(float)
_cells: dict[str, int] = defaultdict(int)
_failed: dict[str, int] = defaultdict(int)


def pytest_addoption(parser):
    parser.addoption("--nb-timing-json", default=None, help="write per-notebook execution seconds as JSON")


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    if not path.endswith(".ipynb"):
        return
    _seconds[path] += report.duration
    if report.when == "call":
        _cells[path] += 1
    if report.failed:
        _failed[path] += 1


def pytest_terminal_summary(terminalreporter, config):
    if not _seconds:
        return
    width = max(len(p) for p in _seconds)
    tr = terminalreporter
    tr.section("notebook execution time")
    tr.write_line(f"{'notebook':<{width}}  cells  seconds  failed")
    for path in sorted(_seconds):
        tr.write_line(f"{path:<{width}}  {_cells[path]:>5}  {_seconds[path]:>7.1f}  {_failed[path]:>6}")
    tr.write_line(f"{'total':<{width}}  {sum(_cells.values()):>5}  {sum(_seconds.values()):>7.1f}")
    out = config.getoption("--nb-timing-json")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump({p: round(s, 2) for p, s in sorted(_seconds.items())}, f, indent=1)
