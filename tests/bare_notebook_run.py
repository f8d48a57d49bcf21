"""Run one notebook top to bottom in its own folder, as a learner's "Run all" does, and print one JSON
line: {"ok", "seconds", "cpu_seconds" (the kernel's and this process's), "error"}.

    python bare_notebook_run.py FOLDER/NOTEBOOK.ipynb TIMEOUT

Run by tests/test_notebooks_from_wheel.py with the runtime's python, so the kernel is that runtime's.
Cells tagged raises-exception may raise (nbclient's rule, as nbval's).
"""

import json
import re
import resource
import sys
import time
from pathlib import Path

import nbclient
import nbformat

path, timeout = Path(sys.argv[1]), int(sys.argv[2])
notebook = nbformat.read(path, as_version=4)
start = time.perf_counter()
error = None
try:
    nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
except nbclient.exceptions.CellExecutionError as e:
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines()  # without the colours
    error = "\n".join(lines[-40:])
except Exception as e:  # a timeout, a dead kernel: say which
    error = f"{type(e).__name__}: {e}"
usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(json.dumps({"ok": error is None, "seconds": round(time.perf_counter() - start, 1),
                  "cpu_seconds": round(sum(u.ru_utime + u.ru_stime for u in usage), 1),
                  "error": error}))
