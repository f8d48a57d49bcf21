"""The benchmark harness runs end to end: `benchmarks/run.py --smoke` on the small workloads."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("sft_full", "sft_lora", "generate_tiny")


@pytest.mark.slow
def test_benchmark_smoke(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", "--workloads",
                           ",".join(WORKLOADS), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    rows = {row["workload"]: row for row in data["summary"] if row["impl"] == "tunix_lite"}
    assert set(rows) == set(WORKLOADS)
    for name, row in rows.items():
        assert row["status"] == "ok", (name, row.get("error"))
        tokens_per_s = row["tokens_per_s"]["median"]
        assert math.isfinite(tokens_per_s) and tokens_per_s > 0, (name, tokens_per_s)
    assert 0 < rows["sft_full"]["mfu"] < 5  # a fraction of the matmul peak (loose: the machine is shared)
    assert rows["generate_tiny"]["decode_tokens_per_s"] > 0
    assert (tmp_path / "results.md").exists() and "| sft_full | tunix_lite |" in proc.stdout


@pytest.mark.slow
def test_profile_step_lists_where_the_step_goes():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_step.py"), "--workload", "sft_full",
                           "--steps", "1", "--top", "5"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    head, kinds, top = proc.stdout.strip().split("\n\n")
    assert float(head.split(": ")[1].split(" ms")[0]) > 0
    assert len(kinds.splitlines()) >= 3  # header + at least two kinds of op
    assert len(top.splitlines()) == 6 and "sft_full" in head
