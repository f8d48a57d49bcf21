"""Where a tunix_lite training step spends its time: per-op totals from a jax.profiler trace.

    python benchmarks/profile_step.py --workload sft_full            # the benchmark's step, 3 traced steps
    python benchmarks/profile_step.py --workload gemma_lora --top 15

Builds the step exactly as impl_tunix_lite.py does, warms it up, traces a few steps, and prints
milliseconds per step (1) per kind of compiled op: `ynn_fusion` are matmuls (XLA:CPU hands them to
YNNPACK, with whatever elementwise work it fused in), the rest are XLA's own loop fusions and copies;
and (2) for the largest single ops, with their output shape and the JAX operation they came from
(`transpose(jvp(...))` = the backward pass). On XLA:CPU ops run one after another, each over all
cores, so the per-step total is close to the step time.

This is how benchmarks/RESULTS.md's profile notes were measured.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
import impl_tunix_lite  # noqa: E402


def op_table(hlo_text: str) -> dict[str, tuple[str, str]]:
    """Compiled HLO instruction name -> (output shape, the JAX op_name in its metadata)."""
    ops = {}
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%(\S+) = (\S+) ", line)
        if m:
            op_name = re.search(r'op_name="([^"]+)"', line)
            ops[m.group(1)] = (m.group(2), op_name.group(1) if op_name else "")
    return ops


def op_durations(trace_dir: str) -> dict[str, list[float]]:
    """HLO instruction name -> its durations in microseconds, from the perfetto trace's XLA threads."""
    path = sorted(glob.glob(f"{trace_dir}/**/perfetto_trace.json.gz", recursive=True))[-1]
    events = json.load(gzip.open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    durations = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "Eigen" in threads.get((e["pid"], e["tid"]), "") and not e["name"].startswith(
                ("ThunkExecutor", "SlinkyThreadPool", "ThreadpoolListener", "end:")):
            durations[e["name"]].append(e["dur"])
    return durations


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="sft_full",
                   choices=[w for w, spec in common.WORKLOADS.items() if spec["kind"] == "sft"])
    p.add_argument("--steps", type=int, default=3, help="traced steps (after two warm-up steps)")
    p.add_argument("--top", type=int, default=20, help="how many single ops to list")
    args = p.parse_args()

    import jax

    from tunix_lite.training.trainer import train_step

    trainer, batch = impl_tunix_lite.train_setup(common.WORKLOADS[args.workload])
    for _ in range(2):
        float(trainer.step(batch)["loss"])
    compiled = train_step.lower(trainer.model, trainer.optimizer, trainer.frozen, batch, loss_fn=trainer.loss_fn,
                                wrt=trainer.wrt, micro_batches=trainer.micro_batches).compile()  # the step's program, for its op names
    ops = op_table(compiled.as_text())
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
        for _ in range(args.steps):
            float(trainer.step(batch)["loss"])
        jax.profiler.stop_trace()
        durations = op_durations(trace_dir)

    per_step = {name: sum(d) / 1e3 / args.steps for name, d in durations.items()}  # ms
    total = sum(per_step.values())
    kinds = collections.Counter()
    for name, ms in per_step.items():
        kinds[re.sub(r"[._0-9]+$", "", name)] += ms
    print(f"{args.workload}: {total:.0f} ms per step in compiled ops ({args.steps} traced steps)\n")
    print(f"{'ms/step':>8} {'share':>6}  kind of op")
    for kind, ms in kinds.most_common(12):
        print(f"{ms:8.1f} {100 * ms / total:5.1f}%  {kind}")
    print(f"\n{'ms/step':>8} {'share':>6}  {'op':<28} {'output':<28} from")
    for name, ms in sorted(per_step.items(), key=lambda item: -item[1])[:args.top]:
        shape, op_name = ops.get(name, ("?", "?"))
        print(f"{ms:8.1f} {100 * ms / total:5.1f}%  {name:<28} {shape.split('{')[0]:<28} "
              f"{op_name.removeprefix('jit(train_step)/')[-70:]}")


if __name__ == "__main__":
    main()
