"""The hosted install, end to end: build the wheel, put it where a Kaggle dataset or a Colab upload
lands, and run a notebook's real setup cell, the way a notebook kernel runs it (IPython), in a fresh
venv on a simulated Colab/Kaggle runtime with no network. Before a release (course.RELEASED False,
as the notebooks are stamped) the wheel route must install tunix_lite from the wheel (not the
checkout) without trying PyPI or GitHub, and setup() must return a profile; with no wheel the cell
must stop with one line, no traceback. The released cell, generated with RELEASED True, must give
one line per failed route.

The fresh venv has no packages of its own: a .pth adds this environment's site-packages (pip, jax and
the rest; tunix_lite filtered out), which play a hosted runtime's preinstalled packages, so nothing is
downloaded and the only tunix_lite the cell can find is the one it installs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tunix_lite import course
from tunix_lite.course.notebook import read, source

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_core_concepts_jax_nnx.ipynb"
UNREACHABLE = "http://127.0.0.1:9/simple"  # connection refused at once: PyPI "offline"

REPORT = """
import importlib.metadata, json, tunix_lite
print("REPORT " + json.dumps({
    "module": tunix_lite.__file__,
    "direct_url": json.loads(importlib.metadata.distribution("tunix-lite").read_text("direct_url.json")),
    "profile": {"name": profile.name, "platform": profile.platform, "mesh_shape": profile.mesh_shape},
}))
"""


def _offline_env(home: Path, **extra) -> dict[str, str]:
    # VIRTUAL_ENV too: IPython would add this environment's site-packages (and its tunix_lite)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON", "XLA_", "COLAB_", "KAGGLE_", "TPU_", "CI", "TUNIX_LITE_",
                                "VIRTUAL_ENV"))}
    return env | {"HOME": str(home), "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": UNREACHABLE,
                  "PIP_DISABLE_PIP_VERSION_CHECK": "1", "GIT_ALLOW_PROTOCOL": "file",  # git refuses https
                  "GIT_TERMINAL_PROMPT": "0", "JAX_PLATFORMS": "cpu", "TUNIX_LITE_PROFILE": "ci"} | extra


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The documented build (course.WHEEL_BUILD) of a copy of the checkout, without build isolation
    (no download of setuptools)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(ROOT / "tunix_lite", src / "tunix_lite", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", *course.WHEEL_BUILD.split(), "--no-build-isolation", "-q"],
                   cwd=src, check=True, env=_offline_env(src), timeout=120)
    (whl,) = (src / "dist").glob(f"tunix_lite-{course.VERSION}-py3-none-any.whl")
    return whl


@pytest.fixture(scope="module")
def preinstalled(tmp_path_factory) -> Path:
    """This environment's site-packages minus tunix_lite, as symlinks: the runtime's preinstalled packages."""
    farm = tmp_path_factory.mktemp("preinstalled")
    for here in {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}:
        for entry in here.iterdir():
            if "tunix_lite" not in entry.name.replace("-", "_") and not (farm / entry.name).exists():
                (farm / entry.name).symlink_to(entry)
    return farm


def _runtime(root: Path, preinstalled: Path) -> Path:
    """A venv whose only packages are the preinstalled ones; returns its python."""
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "preinstalled.pth").write_text(f"import site; site.addsitedir({str(preinstalled)!r})\n")
    return python


def _setup_cell(tmp_path: Path, released: bool = False) -> str:
    """The setup cell (the notebook's own before a release, else the generated released one), with
    /kaggle and /content moved under tmp_path."""
    cell = next(source(c) for c in read(NOTEBOOK)["cells"] if c["cell_type"] == "code")
    assert cell.splitlines()[:-1] == course.setup_cell().splitlines()[:-1]
    if released:
        profile_line = cell.splitlines()[-1]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(course, "RELEASED", True)
            cell = "\n".join([*course.setup_cell().splitlines()[:-1], profile_line])
    for top in ("/kaggle/", "/content/"):
        assert f"'{top}" in cell
        cell = cell.replace(f"'{top}", f"'{tmp_path}{top}")
    return cell


# Run a cell as a notebook kernel does: IPython shows an exception's _render_traceback_, as Jupyter does.
IN_IPYTHON = ("import sys; from IPython.core.interactiveshell import InteractiveShell; "
              "cell = open(sys.argv[1]).read(); "
              "sys.exit(0 if InteractiveShell.instance().run_cell(cell).success else 1)")


def _run(cell: str, tmp_path: Path, preinstalled: Path, **env) -> subprocess.CompletedProcess:
    work = tmp_path / "working"  # not a clone: no tunix_lite/ beside it
    work.mkdir()
    (tmp_path / "cell.py").write_text(cell)
    return subprocess.run([_runtime(tmp_path, preinstalled), "-c", IN_IPYTHON, tmp_path / "cell.py"],
                          cwd=work, capture_output=True, text=True, timeout=240,
                          env=_offline_env(tmp_path, **env))


def _attach(tmp_path: Path, file: Path, upload: str) -> Path:
    """`file`, where a Kaggle dataset or a Colab upload puts it."""
    (tmp_path / upload.lstrip("/")).mkdir(parents=True)
    return Path(shutil.copy(file, tmp_path / upload.lstrip("/")))


@pytest.mark.parametrize("runtime, env, upload", [
    ("kaggle", {"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, "/kaggle/input/tunix-lite-wheel"),
    ("colab", {"COLAB_RELEASE_TAG": "release-colab-simulated"}, "/content"),
])
def test_setup_cell_installs_the_uploaded_wheel_offline(tmp_path, wheel, preinstalled, runtime, env, upload):
    uploaded = _attach(tmp_path, wheel, upload)
    cell = _setup_cell(tmp_path)
    assert "PyPI" not in cell and "git+" not in cell  # no network route before a release
    r = _run(cell + REPORT, tmp_path, preinstalled, **env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert not [line for line in lines if " failed (" in line], r.stdout
    assert f"installed tunix-lite from uploaded wheel: {uploaded}" in lines
    report = json.loads(next(line for line in lines if line.startswith("REPORT "))[len("REPORT "):])
    assert report["module"].startswith(str(tmp_path / "venv")), report  # the wheel's copy, not the checkout
    assert report["direct_url"]["url"] == uploaded.as_uri()
    assert report["profile"] == {"name": "ci", "platform": runtime,
                                 "mesh_shape": {"data": 1, "fsdp": 1, "tensor": 1}}


def test_setup_cell_without_a_wheel_says_what_to_do_in_one_line(tmp_path, preinstalled):
    r = _run(_setup_cell(tmp_path), tmp_path, preinstalled, KAGGLE_KERNEL_RUN_TYPE="Batch")
    assert r.returncode != 0
    assert r.stdout.splitlines() == [f"tunix-lite {course.VERSION} is not published yet: "
                                     f"{course.wheel_instructions()}"], r.stdout
    assert "Traceback" not in r.stdout + r.stderr and course.WHEEL_BUILD in r.stdout


def test_released_setup_cell_gives_one_line_per_failed_route(tmp_path, preinstalled, monkeypatch):
    """A broken wheel, then PyPI and GitHub offline: each says why it failed and what comes next."""
    broken = tmp_path / f"tunix_lite-{course.VERSION}-py3-none-any.whl"
    broken.write_text("not a zip file")
    _attach(tmp_path, broken, "/content")
    r = _run(_setup_cell(tmp_path, released=True), tmp_path, preinstalled,
             COLAB_RELEASE_TAG="release-colab-simulated")
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert [line.split(" failed (")[0] for line in lines] == [
        "tunix-lite from uploaded wheel", "tunix-lite from PyPI", "tunix-lite from GitHub"], r.stdout
    assert lines[0].endswith("; trying PyPI next") and lines[1].endswith("; trying GitHub next")
    monkeypatch.setattr(course, "RELEASED", True)
    assert lines[2].endswith(f"; {course.wheel_instructions()}"), lines[2]  # the last says what to do
