"""Asynchronous rollouts: the share of each GRPO step that the rollout side spends waiting, with
rollouts and updates in turn and with rollouts sampled ahead (`max_staleness`).

    python benchmarks/async_rollouts.py               # 8 fake CPU devices (the flag is set here):
                                                      # training on 0-3, sampling on 4-7
    python benchmarks/async_rollouts.py --colocated   # this machine's devices, shared by both sides

One GRPO run per setting (in turn, then max_staleness 1 and 2) on random weights of the tiny shape,
one optimizer step per rollout. Rollout k's side is busy from the moment its weights exist
(`sync_weights`, once the update that made them has finished) until its samples are back; it waits
from the end of rollout k - 1 until then. After the warm-up rollouts (the compiles), the waiting
share is sum(waits) / sum(periods), a period being the time from one rollout's end to the next's:
one optimizer step. In turn, the rollout side waits for every update; sampled ahead, it samples
rollout k + 1 while the trainer steps on rollout k. Fake devices share this machine's cores, so
the two sides' work competes for them: the waiting share is what the schedule leaves idle, the
step time what this machine makes of it. benchmarks/gpu.py runs the same rows on one GPU
(colocated, its `async_rollouts` row); RESULTS.md has the CPU figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

SETTINGS = {"in turn": None, "max_staleness 1": 1, "max_staleness 2": 2}
CPU = dict(prompts=4, group=4, new=32, steps=10, warmup=3)


def random_policy(directory: str, shape: str = "tiny") -> str:
    """A checkpoint of random weights at `shape` with the tiny tokenizer: no download, no cache."""
    from flax import nnx

    from tunix_lite.loading import ASSETS
    from tunix_lite.models import Transformer, get_config
    from tunix_lite.weights.hf import save_hf_model

    save_hf_model(Transformer(get_config(shape), rngs=nnx.Rngs(0)), directory)
    shutil.copy(ASSETS / "tiny" / "tokenizer.model", directory)
    return directory


def measure(policy: str, max_staleness: int | None, *, prompts: int, group: int, new: int,
            steps: int, warmup: int, split: bool) -> dict:
    """One GRPO run; the rollout side's waits and the steps' periods after `warmup` rollouts (at
    least max_staleness + 1)."""
    import jax
    from flax import nnx

    from tunix_lite.rewards.functions import Rewards
    from tunix_lite.rl import grpo, setup
    from tunix_lite.rl.engine import SamplerEngine

    busy = []  # (weights ready, samples back) per rollout

    class TimedEngine(SamplerEngine):
        def sync_weights(self, model):
            # the update that made these weights may still be running (JAX dispatches ahead):
            # until it ends, the rollout side waits
            jax.block_until_ready(nnx.state(model, nnx.Param))
            busy.append([time.perf_counter(), None])
            super().sync_weights(model)

        def generate(self, *args, **kwargs):
            out = super().generate(*args, **kwargs)
            busy[-1][1] = time.perf_counter()
            return out

    def parity(prompts, completions, completion_ids, **columns):
        return [float(ids[0] % 2) for ids in completion_ids]

    config = grpo.GRPOConfig(
        model=policy, n_train=64, n_validation=8, n_accuracy=0, n_test=0, seq_len=128,
        max_new_tokens=new, batch_size=prompts, group_size=group, steps=steps, warmup_steps=0,
        learning_rate=1e-3, beta=0.0, eval_every=0, max_staleness=max_staleness,
        rollout_correction="token_truncate",
        **(dict(mesh="fsdp", rollout_mesh="fsdp") if split else {}))
    setup.SamplerEngine = TimedEngine  # where rl_setup builds the engine
    try:
        grpo.run_grpo(config, rewards=Rewards({"parity": parity}), verbose=False)
    finally:
        setup.SamplerEngine = SamplerEngine
    # rollouts 0..M come from the first weights, sampled before the first update (and its
    # compile) ends: the wait for it falls before rollout M + 1
    busy = busy[max(warmup, (max_staleness or 0) + 1):]
    waits = [start - end for (_, end), (start, _) in zip(busy, busy[1:])]
    periods = [b - a for (_, a), (_, b) in zip(busy, busy[1:])]
    return dict(rollout_wait=sum(waits) / sum(periods), step_times=periods,
                rollout_s=statistics.median(end - start for start, end in busy),
                tokens_per_step=prompts * group * new)


def table(rows: dict[str, dict]) -> str:
    lines = ["| schedule | rollout side waiting | step s (median) | rollout s (median) |",
             "|---|---:|---:|---:|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['rollout_wait']:.0%} | "
                     f"{statistics.median(r['step_times']):.2f} | {r['rollout_s']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--colocated", action="store_true", help="both sides on this machine's "
                        "devices (default: 8 fake CPU devices, 4 + 4)")
    parser.add_argument("--steps", type=int, default=CPU["steps"])
    args = parser.parse_args(argv)
    if not args.colocated:  # before jax starts
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_force_host_platform_device_count=8")
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    from common import machine

    with tempfile.TemporaryDirectory() as policy:
        random_policy(policy)
        rows = {name: measure(policy, staleness, **(CPU | dict(steps=args.steps)),
                              split=not args.colocated)
                for name, staleness in SETTINGS.items()}
    where = (f"{jax.device_count()} devices ({jax.devices()[0].device_kind}), colocated"
             if args.colocated else "8 fake CPU devices: training on 0-3 (fsdp), sampling on 4-7")
    print(f"{where}; {machine()}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
