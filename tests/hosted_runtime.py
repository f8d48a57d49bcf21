"""What the tests of a hosted runtime share (tests/test_hosted_install.py, test_notebooks_from_wheel.py,
and the lessons' nbval kernels, conftest.py): the wheel a learner builds, a fresh venv that plays a
Colab/Kaggle runtime, offline, and a stand-in repository around a notebook's empty folder.

The venv has no packages of its own: a .pth adds a farm of symlinks to this environment's
site-packages (pip, jax and the rest; tunix_lite filtered out), which play the runtime's preinstalled
packages, so nothing is downloaded and the only tunix_lite it can import is the one put there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from tunix_lite import course

ROOT = Path(__file__).resolve().parents[1]
UNREACHABLE = "http://127.0.0.1:9/simple"  # connection refused at once: PyPI "offline"
# not linked into a stand-in repository: what is not the source (the package is: a cell that reads
# ../tunix_lite/configs fails as one that reads ../course does)
NOT_SOURCE = {".git", ".venv", ".cache", ".pytest_cache", "runs", "build", "dist"}


def offline_env(home: Path, **extra) -> dict[str, str]:
    """This process's environment without pip, Python, XLA, hosted-runtime and tunix_lite settings,
    with pip pointed at no index, HOME at `home`, jax on CPU and the `ci` profile; then `extra`."""
    # VIRTUAL_ENV too: IPython would add this environment's site-packages (and its tunix_lite)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON", "XLA_", "COLAB_", "KAGGLE_", "TPU_", "CI", "TUNIX_LITE_",
                                "VIRTUAL_ENV"))}
    return env | {"HOME": str(home), "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": UNREACHABLE,
                  "PIP_DISABLE_PIP_VERSION_CHECK": "1", "GIT_ALLOW_PROTOCOL": "file",  # git refuses https
                  "GIT_TERMINAL_PROMPT": "0", "JAX_PLATFORMS": "cpu", "TUNIX_LITE_PROFILE": "ci"} | extra


def build_wheel(src: Path) -> Path:
    """The documented build (course.WHEEL_BUILD) of a copy of the checkout in `src`, without build
    isolation (no download of setuptools); returns the wheel."""
    shutil.copytree(ROOT / "tunix_lite", src / "tunix_lite", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", *course.WHEEL_BUILD.split(), "--no-build-isolation", "-q"],
                   cwd=src, check=True, env=offline_env(src), timeout=120)
    (whl,) = (src / "dist").glob(f"tunix_lite-{course.VERSION}-py3-none-any.whl")
    return whl


def install_wheel(wheel: Path, target: Path) -> Path:
    """The wheel's files alone in `target` (pip --target, no dependencies): a folder to put first on
    a python's path, so that it imports tunix_lite from the wheel, not from the checkout."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(target), str(wheel)], check=True, env=offline_env(target.parent), timeout=120)
    return target


def stand_in_repository(folder: Path) -> Path:
    """folder, with a link to each entry of the checkout's source: a notebook run in an empty
    subfolder of it reaches the repository by the paths it would in a clone (../configs), so the
    source-tree guard (tests/source_tree_guard.py) sees those reads."""
    folder.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in NOT_SOURCE:
            (folder / entry.name).symlink_to(entry)
    return folder


def farm(folder: Path, leave_out: tuple[str, ...] = ()) -> Path:
    """This environment's site-packages minus tunix_lite and the `leave_out` packages (import names),
    as symlinks in folder/site-packages: a runtime's preinstalled packages. (The name matters: dill,
    under datasets' fingerprints, pickles by reference only what lives in a site-packages.)"""
    folder = folder / "site-packages"
    folder.mkdir(parents=True, exist_ok=True)
    for here in {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}:
        for entry in here.iterdir():
            name = entry.name.replace("-", "_").lower()  # tunix_lite: also its editable finder and .pth
            if "tunix_lite" in name or name.startswith(leave_out) or (folder / entry.name).exists():
                continue
            (folder / entry.name).symlink_to(entry)
    return folder


def runtime(root: Path, preinstalled: Path) -> Path:
    """A venv in root/venv whose only packages are the preinstalled ones; returns its python."""
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "preinstalled.pth").write_text(f"import site; site.addsitedir({str(preinstalled)!r})\n")
    return python
