"""nbval's kernels for the lessons (notebooks/) start with tests/source_tree_guard.py: a cell that
opens or lists a file of the repository outside notebooks/ (../configs, ../course, ../runs) fails,
as it would on Colab or Kaggle, where a notebook has nothing of the repository beside it. Allowed
besides that folder: the package (the checkout's tunix_lite/, what the wheel ships), the
environment and the compilation cache. (tests/test_notebooks_from_wheel.py runs the lessons from
the wheel itself; other kernels, a test's own, start without the guard.)"""

import atexit
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
LESSONS = ROOT / "notebooks"


@functools.cache
def _guard_environment() -> dict[str, str]:
    """Kernels read IPython's startup files from IPYTHONDIR and inherit this process's
    environment: a folder of their own, with the guard as its only startup file."""
    tmp = Path(tempfile.mkdtemp(prefix="tunix-lite-ipython-"))
    atexit.register(shutil.rmtree, tmp, True)
    startup = tmp / "profile_default" / "startup"
    startup.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "source_tree_guard.py", startup / "00_source_tree_guard.py")
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".cache"))
    allowed = [ROOT / "tunix_lite", Path(sys.prefix).resolve(), ROOT / ".cache",
               Path(cache).resolve()]
    return {"IPYTHONDIR": str(tmp), "SOURCE_TREE_FORBIDDEN": str(ROOT),
            "SOURCE_TREE_ALLOWED": os.pathsep.join(map(str, allowed))}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    """nbval starts a notebook's kernel in the setup of its first cell: a lesson's, guarded."""
    guard = _guard_environment()
    saved = {key: os.environ.get(key) for key in guard}
    if LESSONS in Path(str(item.path)).resolve().parents:
        os.environ.update(guard)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
