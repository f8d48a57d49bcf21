"""ruff over the package with the project's settings ([tool.ruff] in pyproject.toml): pyflakes'
errors (an unused or undefined name) and lines past 100 columns. Files written before the limit
are listed there, per file, until they are rewrapped."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "tunix_lite", "tests"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
