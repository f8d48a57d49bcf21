"""nbval runs each lesson (notebooks/) and each exercise's solution (solutions/) as a Colab or
Kaggle session would: its kernel imports tunix_lite from the wheel (built once per test run, put
first on the kernel's path) and starts in an empty folder of its own, inside a stand-in repository
(links to the checkout's files), with tests/source_tree_guard.py: a cell that opens or lists a file
of the repository (../configs, ../course, ../tunix_lite/configs) fails, even one that catches the
error, and so does importing the checkout's package. Allowed besides the folder: the wheel's files,
the environment and the compilation caches. The exercise notebooks are the solutions with the
graded cells stubbed (`python -m tunix_lite.course.build --check`), so the solutions' runs cover
them. (Other kernels, a test's own, start as they are; tests/test_notebooks_from_wheel.py runs
every notebook under the cpu profile in a fresh venv, on request.)"""

import atexit
import contextlib
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path
from unittest import mock

import nbval.plugin
import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parent
ROUTED = (ROOT / "notebooks", ROOT / "solutions")  # their kernels start as on Colab
SHARED = "TUNIX_LITE_LESSON_RUNTIME"  # the folder every xdist worker's lesson kernels share
sys.path.insert(0, str(ROOT / "tests"))
from hosted_runtime import build_wheel, install_wheel, stand_in_repository  # noqa: E402


def pytest_configure(config):
    """One folder for the run (the controller's, inherited by xdist's workers), built on first
    use."""
    if SHARED not in os.environ:
        folder = tempfile.mkdtemp(prefix="tunix-lite-lessons-")
        os.chmod(folder, 0o755)  # world-readable as an installed package is (sandbox: `nobody`)
        atexit.register(shutil.rmtree, folder, True)
        os.environ[SHARED] = folder


@functools.cache
def _lesson_runtime() -> dict:
    """The wheel's files, the stand-in repository and the guard's environment (once per run)."""
    shared = Path(os.environ[SHARED])
    with FileLock(shared / "build.lock"):
        if not (shared / "ready").exists():
            install_wheel(build_wheel(shared / "src"), shared / "site")
            stand_in_repository(shared / "repository")
            startup = shared / "ipython" / "profile_default" / "startup"
            startup.mkdir(parents=True)
            shutil.copy(ROOT / "tests" / "source_tree_guard.py", startup / "00_guard.py")
            (shared / "ready").touch()
    cache = os.environ.get("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".cache"))
    allowed = [shared / "site", Path(sys.prefix).resolve(), ROOT / ".cache",
               Path(cache).resolve()]
    environment = {"IPYTHONDIR": str(shared / "ipython"), "PYTHONPATH": str(shared / "site"),
                   "SOURCE_TREE_FORBIDDEN": os.pathsep.join([str(ROOT),
                                                             str(shared / "repository")]),
                   "SOURCE_TREE_ALLOWED": os.pathsep.join(map(str, allowed))}
    return {"repository": shared / "repository", "environment": environment}


@contextlib.contextmanager
def _lesson_kernel(notebook: Path):
    """nbval starts the kernel (in the setup of the notebook's first cell) in `notebook`'s empty
    folder, with the guard's environment."""
    runtime = _lesson_runtime()
    folder = runtime["repository"] / notebook.stem
    folder.mkdir(exist_ok=True)
    start = nbval.plugin.RunningKernel

    def in_folder(name, cwd=None, **options):
        return start(name, cwd=str(folder), **options)

    saved = {key: os.environ.get(key) for key in runtime["environment"]}
    os.environ.update(runtime["environment"])
    try:
        with mock.patch.object(nbval.plugin, "RunningKernel", in_folder):
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    path = Path(str(item.path)).resolve()
    hosted = path.parent in ROUTED and path.suffix == ".ipynb"
    with _lesson_kernel(path) if hosted else contextlib.nullcontext():
        yield


@pytest.fixture(scope="session")
def wheel_site() -> Path:
    """The folder of the wheel's files that the lessons' kernels import tunix_lite from."""
    return Path(_lesson_runtime()["environment"]["PYTHONPATH"])
