"""environment.yml installs exactly what pyproject.toml's [all] extra does."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = list(project["dependencies"])
    (all_spec,) = extras["all"]  # "tunix-lite[gemma,hub,course,test,tensorboard]"
    for name in all_spec.split("[")[1].rstrip("]").split(","):
        wanted += extras[name]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(p for p in pip if p != "-e .") == sorted(wanted)
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    assert project["requires-python"] == ">=" + python.split("=")[1]


def test_test_reference_pins_the_local_torch_wheel():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "torch==2.13.0" in extras["test"]  # any other spec downloads GBs of CUDA wheels
    assert not any(dep.startswith("torch") for dep in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
