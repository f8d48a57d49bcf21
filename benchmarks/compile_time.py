"""What one compile costs on XLA:CPU, and how it grows with the decoder's layers.

    python benchmarks/compile_time.py                      # tiny's shape at 1, 2 and 6 layers
    python benchmarks/compile_time.py --layers 1 6 --json out.json

For each layer count: the tiny model's architecture with `num_layers` replaced (random weights), the
persistent compilation cache off, so every figure is a real compile.
- train step: SFT on batch 16 x 128 with AdamW. `trace + lower` is Python tracing the step to
  StableHLO (Trainer.lower), `XLA compile` is `.compile()`, `kernels` the compiled program's
  fusions (on CPU each becomes one LLVM function, and their number drives the compile), `step` the
  median of the steps after it;
- generate: the first `Sampler.generate` call (8 prompts x 32 new tokens: compile and run), then
  the second (run only).

Why it matters: on a 2-core machine most of a short test or notebook cell is compiling, and
tiny's 6 layers are unrolled into the program. Whether a `lax.scan` over the layers compiles
faster is measured apart, by benchmarks/scan_layers.py: on XLA:CPU, at tiny's depth, it does not.
benchmarks/RESULTS.md has runs of both.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
import impl_tunix_lite  # noqa: E402

BATCH, SEQ = 16, 128
PROMPTS, NEW_TOKENS = 8, 32


def kernels(hlo_text: str) -> int:
    """How many fusions a compiled program holds (`%add_fusion.3 = f32[...] fusion(...)` lines)."""
    return len(re.findall(r"^\s*(?:ROOT )?%\S+ = \S+ fusion\(", hlo_text, re.M))


def measure(layers: int, steps: int) -> dict:
    import jax
    import optax
    from flax import nnx

    from tunix_lite.loading import resolve_checkpoint
    from tunix_lite.models import Transformer, get_config
    from tunix_lite.sampler import Sampler
    from tunix_lite.tokenizer import load_tokenizer
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import Trainer

    config = get_config("tiny").replace(num_layers=layers)
    trainer = Trainer(Transformer(config, rngs=nnx.Rngs(0)), optax.adamw(1e-4), lm_loss)
    batch = impl_tunix_lite.random_batch(config.vocab_size, BATCH, SEQ)
    start = time.perf_counter()
    lowered = trainer.lower(batch)
    traced = time.perf_counter()
    compiled = lowered.compile()
    done = time.perf_counter()
    step_times = []
    for _ in range(steps + 1):  # the first call also loads the program: left out
        start_step = time.perf_counter()
        float(trainer.step(batch)["loss"])
        step_times.append(time.perf_counter() - start_step)

    tokenizer = load_tokenizer(resolve_checkpoint("tiny"))  # load() would turn the cache on
    sampler = Sampler(trainer.model, tokenizer)
    generate_times = []
    for question in ("What is 2 + 3?", "What is 4 + 1?"):
        start_generate = time.perf_counter()
        out = sampler.generate([f"Question: {question}"] * PROMPTS, NEW_TOKENS)
        jax.block_until_ready(out.tokens)
        generate_times.append(time.perf_counter() - start_generate)
    return dict(layers=layers, trace_lower_s=traced - start, compile_s=done - traced,
                kernels=kernels(compiled.as_text()), step_s=statistics.median(step_times[1:]),
                generate_first_s=generate_times[0], generate_second_s=generate_times[1])


def table(records: list[dict]) -> str:
    rows = ["| layers | trace + lower s | XLA compile s | kernels | step s "
            "| generate, 1st call s | generate, 2nd call s |", "|---|---|---|---|---|---|---|"]
    for r in records:
        rows.append(f"| {r['layers']} | {r['trace_lower_s']:.2f} | {r['compile_s']:.2f} "
                    f"| {r['kernels']} | {r['step_s']:.3f} | {r['generate_first_s']:.2f} "
                    f"| {r['generate_second_s']:.3f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, nargs="+", default=[1, 2, 6],
                   help="layer counts to compile")
    p.add_argument("--steps", type=int, default=3, help="timed train steps after the compile")
    p.add_argument("--json", type=Path, help="also write the records here")
    args = p.parse_args(argv)
    if min(args.layers) < 1 or args.steps < 1:
        p.error(f"--layers {args.layers} and --steps {args.steps} must be >= 1")

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_compilation_cache", False)  # every figure a real compile
    jax.jit(lambda x: x + 1)(jnp.zeros(2)).block_until_ready()  # XLA's start-up: not in a row
    records = [measure(layers, args.steps) for layers in args.layers]
    print(f"tiny's shape (d 256, vocab 1024), train batch {BATCH} x {SEQ}, AdamW, float32; "
          f"generate {PROMPTS} prompts x {NEW_TOKENS} new tokens; persistent cache off; "
          f"{common.machine()}\n")
    print(table(records))
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
