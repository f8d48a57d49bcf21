"""Before/after: tunix_lite from two checkouts on the same workloads, alternating in one run.

    python benchmarks/ab.py --before ../tunix_lite_old --workloads sft_full,sft_lora --reps 3

Each call is a fresh process of that checkout's benchmarks/impl_tunix_lite.py (its own code, this venv); the two
sides alternate inside every repetition (A B, then B A), so a machine whose load drifts slows both alike. Prints
one line per call and, per workload and side, the median and min-max of tokens/s, peak memory and final loss (the
same loss on both sides says the same computation ran).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

import common

HERE = Path(__file__).resolve().parent.parent


def measure(root: Path, workload: str) -> dict:
    steps, warmup = common.timing(workload)
    env = dict(os.environ, PYTHONPATH=f"{root}:{root / 'benchmarks'}", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, str(root / "benchmarks" / "impl_tunix_lite.py"), "--workload", workload,
                           "--steps", str(steps), "--warmup", str(warmup)], capture_output=True, text=True, env=env)
    return common.parse_result(done.stdout) if done.returncode == 0 else {"error": done.stderr[-300:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, type=Path, help="the other checkout (e.g. a git worktree)")
    parser.add_argument("--after", type=Path, default=HERE, help="default: this checkout")
    parser.add_argument("--workloads", default="sft_full,sft_lora")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    results: dict[tuple[str, str], list[dict]] = {}
    for rep in range(args.reps):
        order = list(sides.items())[:: 1 if rep % 2 == 0 else -1]
        for workload in args.workloads.split(","):
            for name, root in order:
                r = measure(root, workload)
                results.setdefault((workload, name), []).append(r)
                print(workload, name, rep, r.get("tokens_per_s"), r.get("steps_peak_mb"), r.get("final_loss"),
                      r.get("error", ""), flush=True)
    for (workload, name), rs in results.items():
        ok = [r for r in rs if "tokens_per_s" in r]
        if not ok:
            print(f"{workload:12s} {name:6s} every call failed")
            continue
        tps = [r["tokens_per_s"] for r in ok]
        print(f"{workload:12s} {name:6s} tokens/s median {statistics.median(tps):8.1f} (min {min(tps):.1f} max "
              f"{max(tps):.1f}), peak MB {max(r['steps_peak_mb'] for r in ok):.0f}, final loss {ok[-1].get('final_loss', '-')}")


if __name__ == "__main__":
    main()
