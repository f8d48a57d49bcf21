"""Scaling: each strategy on 8 fake CPU devices (correctness and overhead only), the planner against XLA's memory
plan, and the planner's predictions for real chips; on an accelerator, the measured step beside its plan.

    python benchmarks/scaling.py                 # CPU: 8 fake devices (the flag is set here), then the predictions
    python benchmarks/scaling.py --measure       # on a GPU/TPU: measured step time, MFU and memory vs the plan

Fake devices share this machine's cores, so their step times say what sharding costs in overhead, never what it
gains. Prints markdown tables (paste them into RESULTS.md's scaling section).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

PREDICTIONS = [  # (model, devices, strategy, batch, seq, options)
    ("gemma3-270m", "v5e-1", "fsdp", 8, 1024, dict(logits_chunk=1024)),
    ("gemma3-1b", "v5e-8", "fsdp", 32, 1024, dict(lora_rank=8, remat=True, logits_chunk=1024)),
    ("gemma3-1b", "v5e-8", "fsdp", 32, 1024, dict(remat=True, logits_chunk=1024)),
    ("gemma3-1b", "v3-8", "fsdp", 32, 1024, dict(remat=True, logits_chunk=1024)),
    ("gemma3-1b", "v4-8", "fsdp", 32, 1024, dict(remat=True, logits_chunk=1024)),
    ("gemma3-1b", "v5p-8", "fsdp", 32, 1024, dict(logits_chunk=1024)),
    ("gemma3-1b", "v6e-8", "fsdp", 32, 1024, dict(remat=True, logits_chunk=1024)),
    ("llama3.2-1b", "v5e-8", "fsdp_tp", 32, 2048, dict(remat=True, logits_chunk=1024)),
    ("llama3.2-1b", "h100-8", "fsdp", 32, 2048, dict(logits_chunk=1024)),
    ("llama3.2-1b", "a100-8", "fsdp", 32, 2048, dict(remat=True, logits_chunk=1024)),
]


def _batch(rows: int, seq: int, vocab: int):
    import numpy as np

    tokens = np.random.default_rng(0).integers(0, vocab, (rows, seq + 1)).astype(np.int32)
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": np.ones((rows, seq), np.float32),
            "positions": np.tile(np.arange(seq, dtype=np.int32), (rows, 1))}


def _time_steps(trainer, batch, steps: int) -> list[float]:
    float(trainer.step(batch)["loss"])  # compile
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        float(trainer.step(batch)["loss"])
        times.append(time.perf_counter() - start)
    return times


def fake_devices(steps: int) -> str:
    """Each strategy on 8 fake devices against one device: step time, loss difference, per-device memory."""
    import jax
    import optax
    from flax import nnx

    from tunix_lite import planner, sharding
    from tunix_lite.models import Transformer, get_config
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import Trainer

    assert jax.device_count() == 8, jax.devices()
    config = get_config("tiny")
    rows, seq = 16, 128
    batch = _batch(rows, seq, config.vocab_size)
    lines = [f"tiny ({config.num_layers} layers, d {config.embed_dim}, vocab {config.vocab_size}), batch {rows} x {seq}, "
             f"AdamW, float32, {steps} timed steps after a compile; {os.cpu_count()} CPU cores shared by 8 fake devices",
             "", "| strategy | mesh | step (ms) | vs 1 device | max abs loss diff | XLA MiB/device | planned MiB/device "
             "| planner error |", "|---|---|---|---|---|---|---|---|"]
    reference = None
    for strategy in (None, "dp", "fsdp", "tp", "fsdp_tp"):
        mesh = sharding.resolve_mesh(strategy) if strategy else None
        trainer = Trainer(Transformer(config, rngs=nnx.Rngs(0)), optax.adamw(1e-3), lm_loss, mesh=mesh)
        stats = trainer.lower(batch).compile().memory_analysis()
        measured = (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
                    - stats.alias_size_in_bytes)
        shape = dict(mesh.shape) if mesh else {"data": 1, "fsdp": 1, "tensor": 1}
        planned = sum(planner.plan_memory(config, config, shape, batch=rows, seq=seq,
                                          compute_dtype="float32").values())
        times = _time_steps(trainer, batch, steps)
        losses = [h["loss"] for h in trainer.history]
        median = statistics.median(times)
        if reference is None:
            reference = (median, losses)
        diff = max(abs(a - b) for a, b in zip(losses, reference[1]))
        lines.append(f"| {strategy or 'one device'} | {shape} | {median * 1e3:.0f} | {median / reference[0]:.2f}x | "
                     f"{diff:.1e} | {measured / 2**20:.1f} | {planned / 2**20:.1f} | "
                     f"{(planned - measured) / measured:+.0%} |")
    return "\n".join(lines)


def strategies_memory() -> str:
    """The planner against XLA:CPU's plan under each strategy on 8 fake devices, at 2 and 8 rows per device, with
    one device at 2 rows as the control (memory plans only: nothing runs)."""
    from tunix_lite import planner, sharding
    from tunix_lite.models import get_config

    config = get_config("tiny")
    lines = ["| strategy | batch (rows per device) | XLA MiB/device | planned MiB/device | planner error |",
             "|---|---|---|---|---|"]
    for strategy, batch in [(None, 2), (None, 8)] + [(s, b) for b in (16, 64) for s in sharding.STRATEGIES]:
        mesh = sharding.resolve_mesh(strategy) if strategy else None
        memory = planner.against_xla(config, batch=batch, seq=128, mesh=mesh)
        measured, planned = memory["xla"], memory["planned"]
        rows = batch // (mesh.shape["data"] * mesh.shape["fsdp"]) if mesh else batch
        lines.append(f"| {strategy or 'one device'} | {batch} x 128 ({rows}) | {measured / 2**20:.1f} | "
                     f"{planned / 2**20:.1f} | {(planned - measured) / measured:+.0%} |")
    return "\n".join(lines)


def planner_vs_xla() -> str:
    """The planner's per-device total against XLA:CPU's plan for the real step on one device."""
    import common
    import impl_tunix_lite

    from tunix_lite import planner
    from tunix_lite.models import get_config

    lines = ["| shape | batch | options | XLA MiB | planned MiB | error |", "|---|---|---|---|---|---|"]
    for name, config, rows, seq in (("tiny", get_config("tiny"), 8, 128),
                                    ("llama", impl_tunix_lite.llama_config(common.SHAPES["llama"]), 8, 256)):
        for options in ({}, {"lora_rank": 8}, {"logits_chunk": 256}, {"remat": True}):
            memory = planner.against_xla(config, batch=rows, seq=seq, **options)
            measured, planned = memory["xla"], memory["planned"]
            lines.append(f"| {name} | {rows} x {seq} | {options or 'full fine-tuning'} | {measured / 2**20:.1f} | "
                         f"{planned / 2**20:.1f} | {(planned - measured) / measured:+.0%} |")
    return "\n".join(lines)


def predictions() -> str:
    from tunix_lite.planner import GiB, Plan

    lines = ["| model | devices | strategy | batch | options | GiB/device | fits | step (ms) | tokens/s | bound | "
             "MFU ceiling |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, devices, strategy, batch, seq, options in PREDICTIONS:
        plan = Plan.make(model, devices, strategy, batch=batch, seq=seq, **options)
        t = plan.times
        shown = ", ".join(f"{k}={v}" for k, v in options.items())
        lines.append(f"| {model} | {devices} | {strategy} | {batch} x {seq} | {shown} | {plan.total / GiB:.1f} | "
                     f"{'yes' if plan.fits.get(strategy) else 'no'} | {t['step'] * 1e3:.0f} | "
                     f"{batch * seq / t['step']:,.0f} | {t['bound']} | {t['mfu']:.0%} |")
    return "\n".join(lines)


MEASURED = [  # (model, batch, seq, options): one accelerator device, bf16 compute
    ("gemma3-270m", 8, 1024, dict(logits_chunk=1024)),
    ("gemma3-1b", 8, 1024, dict(logits_chunk=1024)),
    ("gemma3-1b", 8, 1024, dict(logits_chunk=1024, remat=True)),
    ("gemma3-1b", 8, 1024, dict(logits_chunk=1024, lora_rank=8)),
    ("llama3.2-1b", 4, 2048, dict(logits_chunk=1024)),
]


def measure(steps: int, chip: str, cases=MEASURED) -> str:
    """On this accelerator (one device): measured step time and XLA's memory plan beside the planner's."""
    import jax
    import optax
    from flax import nnx

    from tunix_lite import planner
    from tunix_lite.lora import apply_lora
    from tunix_lite.models import Transformer, get_config, set_training_options
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import Trainer

    lines = [f"{jax.devices()[0].device_kind}, planned as {chip}-1", "",
             "| model | batch | options | step (ms) | planned (ms) | MFU measured | MFU ceiling | XLA GiB | planned GiB "
             "| memory error |", "|---|---|---|---|---|---|---|---|---|---|"]
    for model, rows, seq, options in cases:
        config = get_config(model)
        m = Transformer(config, rngs=nnx.Rngs(0))
        if options.get("lora_rank"):
            apply_lora(m, rank=options["lora_rank"], alpha=16.0, rngs=nnx.Rngs(1))
        set_training_options(m, compute_dtype="bfloat16", remat=options.get("remat", False),
                             logits_chunk=options.get("logits_chunk", 0))
        trainer = Trainer(m, optax.adamw(1e-5), lm_loss, wrt=nnx.LoRAParam if options.get("lora_rank") else nnx.Param)
        batch = _batch(rows, seq, config.vocab_size)
        stats = trainer.lower(batch).compile().memory_analysis()
        measured_bytes = (stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
                          - stats.alias_size_in_bytes)
        try:
            median = statistics.median(_time_steps(trainer, batch, steps))
        except jax.errors.JaxRuntimeError as error:  # out of memory: XLA's plan is still worth its row
            median = float("nan")
            print(f"{model} {rows} x {seq} {options}: {str(error).splitlines()[0][:120]}", flush=True)
        plan = planner.Plan.make(model, f"{chip}-1", "fsdp", batch=rows, seq=seq, compute_dtype="bfloat16", **options)
        mfu = plan.flops["model"] / (median * plan.chip.tflops * 1e12) if plan.chip.tflops else float("nan")
        shown = ", ".join(f"{k}={v}" for k, v in options.items())
        t = plan.times or {"step": float("nan"), "mfu": float("nan")}
        lines.append(f"| {model} | {rows} x {seq} | {shown} | {median * 1e3:.0f} | {t['step'] * 1e3:.0f} | "
                     f"{mfu:.0%} | {t['mfu']:.0%} | {measured_bytes / 2**30:.2f} | {plan.total / 2**30:.2f} | "
                     f"{(plan.total - measured_bytes) / measured_bytes:+.0%} |")
        del trainer, m
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure", action="store_true", help="time the step on this accelerator")
    parser.add_argument("--chip", default="h100", help="the planner's chip for --measure (h100, a100, v5e, ...)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="--measure on the tiny model only (checks the script)")
    args = parser.parse_args()
    if args.measure:
        print(measure(args.steps, args.chip, [("tiny", 4, 64, dict(logits_chunk=64))] if args.smoke else MEASURED))
        return
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    print("## Strategies on 8 fake CPU devices\n")
    print(fake_devices(args.steps))
    print("\n## Planner vs XLA's memory plan per strategy (8 fake CPU devices, float32)\n")
    print(strategies_memory())
    print("\n## Planner vs XLA's memory plan (one CPU device, float32)\n")
    print(planner_vs_xla())
    print("\n## Planner predictions for real chips (bf16 compute, float32 parameters and AdamW)\n")
    print(predictions())


if __name__ == "__main__":
    main()
