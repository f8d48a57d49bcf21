"""environment.yml installs exactly what pyproject.toml's [all] extra does; the hosted extra stays slim."""

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _expand(extras: dict[str, list[str]], name: str) -> list[str]:
    """An extra's requirements, following the ones that name tunix-lite itself ("tunix-lite[hosted]")."""
    out = []
    for req in extras[name]:
        if req.startswith("tunix-lite["):
            for inner in req.split("[")[1].rstrip("]").split(","):
                out += _expand(extras, inner)
        else:
            out.append(req)
    return out


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"]) + _expand(project["optional-dependencies"], "all")
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(p for p in pip if p != "-e .") == sorted(wanted)
    assert len(set(wanted)) == len(wanted), "a requirement is listed twice across the extras"
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert project["requires-python"] == ">=" + python.split("=")[1]


def test_test_reference_pins_the_local_torch_wheel():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "torch==2.13.0" in extras["test"]  # any other spec downloads GBs of CUDA wheels
    assert not any(dep.startswith("torch") for dep in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def test_hosted_extra_leaves_the_notebook_server_alone():
    """Colab/Kaggle run [hosted]: reinstalling the kernel or Jupyter under a live notebook breaks it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    hosted = {Requirement(req).name for req in _expand(extras, "hosted")}
    assert not hosted & {"jupyterlab", "notebook", "ipykernel", "ipython", "jupyter-client", "nbval", "tunix-lite"}
    assert "tunix-lite[hosted]" in extras["course"]  # the laptop set is the hosted set plus Jupyter
