"""The hosted install, end to end: build the wheel, put it where a Kaggle dataset or a Colab upload
lands, and run a notebook's real setup cell, the way a notebook kernel runs it (IPython), in a fresh
venv on a simulated Colab/Kaggle runtime with no network. Before a release (course.RELEASED False,
as the notebooks are stamped) the wheel route must install tunix_lite from the wheel (not the
checkout) without trying PyPI or GitHub, and setup() must return a profile; with no wheel the cell
must stop with one line, no traceback. The released cell, generated with RELEASED True, must give
one line per failed route.

The fresh venv has no packages of its own (tests/hosted_runtime.py): this environment's site-packages
play a hosted runtime's preinstalled packages, so nothing is downloaded and the only tunix_lite the
cell can find is the one it installs.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hosted_runtime import ROOT, build_wheel, farm, offline_env, runtime
from tunix_lite import course
from tunix_lite.course.notebook import read, source

NOTEBOOK = ROOT / "notebooks" / "01_core_concepts_jax_nnx.ipynb"

REPORT = """
import importlib.metadata, json, tunix_lite
print("REPORT " + json.dumps({
    "module": tunix_lite.__file__,
    "direct_url": json.loads(importlib.metadata.distribution("tunix-lite").read_text("direct_url.json")),
    "profile": {"name": profile.name, "platform": profile.platform, "mesh_shape": profile.mesh_shape},
}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def preinstalled(tmp_path_factory) -> Path:
    """This environment's site-packages minus tunix_lite: the runtime's preinstalled packages."""
    return farm(tmp_path_factory.mktemp("preinstalled"))


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
    return _moved(cell, tmp_path)


def _moved(cell: str, tmp_path: Path) -> str:
    """A setup cell whose /kaggle and /content are under tmp_path."""
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
    return subprocess.run([runtime(tmp_path, preinstalled), "-c", IN_IPYTHON, tmp_path / "cell.py"],
                          cwd=work, capture_output=True, text=True, timeout=240,
                          env=offline_env(tmp_path, **env))


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


# The wheelhouse test: the extras an offline hackathon session needs; the packages its runtime lacks
# (real wheels, repacked from this environment); the rest stand in as empty wheels of the installed
# versions, which the runtime already has (as Kaggle has jax, numpy, ...), so pip never installs them.
WHEELHOUSE_EXTRAS = ("hosted", "gemma", "tasks")
LACKING = ("math-verify", "latex2sympy2_extended")  # [tasks]' math-verify and what it needs


def _write_wheel(folder: Path, name: str, version: str, files: dict[str, bytes], metadata: str) -> Path:
    """A pure-Python wheel of `files` with this METADATA, and a RECORD of their hashes."""
    info = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    files = files | {f"{info}/METADATA": metadata.encode(),
                     f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                      b"Tag: py3-none-any\n"}
    digest = {path: base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
              for path, data in files.items()}
    files[f"{info}/RECORD"] = "".join([*(f"{path},sha256={digest[path]},{len(data)}\n"
                                         for path, data in files.items()), f"{info}/RECORD,,\n"]).encode()
    wheel = folder / f"{info.removesuffix('.dist-info')}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def _repack(folder: Path, name: str) -> Path:
    """The installed distribution `name` as the wheel it was installed from."""
    dist = importlib.metadata.distribution(name)
    files = {str(f): f.locate().read_bytes() for f in dist.files
             if not str(f).startswith("..") and ".dist-info/" not in str(f) and f.suffix != ".pyc"}
    return _write_wheel(folder, dist.metadata["Name"], dist.version, files, dist.read_text("METADATA"))


def _requirements(extras: tuple[str, ...]) -> set[str]:
    """The distribution names tunix-lite and these extras require (pyproject.toml; first level)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *(r for e in extras for r in project["optional-dependencies"][e])]
    return {Requirement(line).name for line in lines}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


@pytest.fixture(scope="module")
def package_index(tmp_path_factory) -> Path:
    """What pip would download, offline: real wheels of LACKING, installed-version stand-ins of the rest
    (every requirement of tunix-lite[hosted,gemma,tasks] and of the LACKING packages)."""
    index = tmp_path_factory.mktemp("index")
    needed = _requirements(WHEELHOUSE_EXTRAS) | {Requirement(r).name for name in LACKING
                                                 for r in importlib.metadata.requires(name) or []
                                                 if "extra ==" not in r}
    for name in sorted(needed):
        if _normal(name) in {_normal(n) for n in LACKING}:
            _repack(index, name)
        else:
            version = importlib.metadata.version(name)
            _write_wheel(index, name, version, {}, f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for name in LACKING:
        if not any(_normal(p.name).startswith(_normal(name) + "-") for p in index.iterdir()):
            _repack(index, name)
    return index


def test_the_wheelhouse_command_collects_the_wheel_and_every_dependency_and_installs_offline(
        tmp_path, package_index):
    """course.WHEELHOUSE_BUILD, run in a checkout, writes tunix-lite's wheel and one wheel per
    requirement of [hosted,gemma,tasks]; attached to an offline Kaggle session (pip may not reach any
    index), the setup cell of a notebook that needs [tasks] installs tunix-lite and what the runtime
    lacks from it alone."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "tunix_lite", src / "tunix_lite", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    assert course.WHEELHOUSE_BUILD == 'pip wheel ".[hosted,gemma,tasks]" -w wheelhouse'
    offline = ["--no-index", "--find-links", str(package_index), "--no-build-isolation", "-q"]
    subprocess.run([sys.executable, "-m", *shlex.split(course.WHEELHOUSE_BUILD), *offline], cwd=src,
                   check=True, env=offline_env(src), timeout=180)
    wheelhouse = src / "wheelhouse"
    names = {_normal(p.name.split("-")[0]) for p in wheelhouse.glob("*.whl")}
    assert {_normal(n) for n in _requirements(WHEELHOUSE_EXTRAS)} | {"tunix_lite"} <= names, names

    attached = tmp_path / "kaggle" / "input" / "wheelhouse"
    shutil.copytree(wheelhouse, attached)
    lacking = farm(tmp_path / "preinstalled", leave_out=tuple(_normal(n) for n in LACKING))
    cell = _moved(course.setup_cell('extras=["gemma", "tasks"]'), tmp_path)
    report = "\nimport math_verify; print('REPORT', math_verify.__file__)\n"
    r = _run(cell + report, tmp_path, lacking, KAGGLE_KERNEL_RUN_TYPE="Batch", PIP_NO_INDEX="1")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert f"installed tunix-lite from uploaded wheel: {attached}/tunix_lite-{course.VERSION}-py3-none-any.whl" \
        in lines, r.stdout
    installing = next(line for line in lines if line.startswith("installing "))
    assert installing.startswith(f"installing tunix-lite[hosted,gemma,tasks]=={course.VERSION} for: math-verify "), \
        installing
    module = next(line for line in lines if line.startswith("REPORT ")).split()[1]
    assert module.startswith(str(tmp_path / "venv")), module  # from the wheelhouse, into the runtime
