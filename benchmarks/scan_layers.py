"""Would a `lax.scan` over the decoder's layers make XLA:CPU compile faster? Measured, not assumed.

    python benchmarks/scan_layers.py                       # tiny's shape (6 layers), batch 16 x 128
    python benchmarks/scan_layers.py --model gemma3-270m --batch 2   # 18 layers, vocab 262k

The gradient of a forward pass (mean logit) is lowered and compiled three ways, with the persistent
cache off and random weights:
- unrolled: the model as it is, one copy of the block per layer in the program;
- scan, stacked in the step: the layers' parameters stay stored one module per layer (what
  checkpoints, LoRA, sharding rules and HF loading read) and are stacked inside the program, then
  scanned with one block as the body;
- scan, stored stacked: the parameters arrive already stacked [L, ...], as MaxText's
  `scan_layers` stores them.

Every layer here attends globally (no sliding window), so the blocks share one structure and one
body serves them all; Gemma 3's local layers differ only in data (RoPE base, window), which a
scan would carry as per-layer inputs. The block is the model's own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from compile_time import kernels  # noqa: E402


def measure(name: str, batch: int, seq: int) -> list[dict]:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from tunix_lite.models import Transformer, get_config

    config = get_config(name).replace(sliding_window=None, sliding_window_pattern=None)
    model = Transformer(config, rngs=nnx.Rngs(0))
    tokens = jnp.zeros((batch, seq), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(seq), tokens.shape)
    block_def = nnx.graphdef(model.layers[0])
    layers = [nnx.state(block) for block in model.layers]
    model.layers = nnx.List([])  # the rest: embedding, final norm (and head)
    rest_def, rest = nnx.split(model)

    def head(rest, x):
        outer = nnx.merge(rest_def, rest)
        return outer.logits(outer.final_norm(x)).mean()

    def scanned(rest, stacked):
        def body(x, state):
            return nnx.merge(block_def, state)(x, positions)[0], None

        x, _ = jax.lax.scan(body, nnx.merge(rest_def, rest)._embed(tokens), stacked)
        return head(rest, x)

    def unrolled(rest, layers):
        x = nnx.merge(rest_def, rest)._embed(tokens)
        for state in layers:
            x = nnx.merge(block_def, state)(x, positions)[0]
        return head(rest, x)

    def stack(layers):
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *layers)

    def stacked_in_step(rest, layers):
        return scanned(rest, stack(layers))

    stored = stack(layers)
    records, reference = [], None
    for way, loss, params in (("unrolled", unrolled, layers),
                              ("scan, stacked in the step", stacked_in_step, layers),
                              ("scan, stored stacked", scanned, stored)):
        step = jax.jit(jax.grad(loss, argnums=(0, 1)))
        start = time.perf_counter()
        lowered = step.lower(rest, params)
        traced = time.perf_counter()
        compiled = lowered.compile()
        done = time.perf_counter()
        jax.block_until_ready(compiled(rest, params))
        start_step = time.perf_counter()
        grads = jax.block_until_ready(compiled(rest, params))
        step_s = time.perf_counter() - start_step
        # the same gradients, whatever the program: each layer's, unstacked
        flat = jax.tree.leaves((grads[0], grads[1] if way != "scan, stored stacked" else
                                [jax.tree.map(lambda a, i=i: a[i], grads[1])
                                 for i in range(config.num_layers)]))
        reference = reference or flat
        records.append(dict(way=way, trace_lower_s=traced - start, compile_s=done - traced,
                            kernels=kernels(compiled.as_text()), step_s=step_s,
                            grad_error=max(float(jnp.max(jnp.abs(a - b)))
                                           for a, b in zip(flat, reference))))
    return records


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="a model name: its shape, random weights")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--json", type=Path, help="also write the records here")
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_compilation_cache", False)  # every figure a real compile
    jax.jit(lambda x: x + 1)(jnp.zeros(2)).block_until_ready()  # XLA's start-up: not in a row
    records = measure(args.model, args.batch, args.seq)
    print(f"{args.model}'s shape, every layer global; the gradient of the mean logit on "
          f"{args.batch} x {args.seq} tokens, float32; persistent cache off; {common.machine()}\n")
    print("| layers as | trace + lower s | XLA compile s | kernels | step s | max grad difference"
          " |")
    print("|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['way']} | {r['trace_lower_s']:.2f} | {r['compile_s']:.2f} | {r['kernels']} "
              f"| {r['step_s']:.3f} | {r['grad_error']:.1e} |")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
