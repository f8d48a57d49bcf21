"""GRPO's train step with the lm head on every position, against on each row's completion only
(`grpo_loss(completion_tokens=N)`, what rl/grpo.py runs): same model, rows, loss and optimizer, one
process, the two steps alternating.

    python benchmarks/completion_scoring.py                      # Gemma 3 270M, LoRA r8, 32 rows
    python benchmarks/completion_scoring.py --rows 128 --prompt 64 --completion 32 --reps 3

Each row is a prompt of random length (at most --prompt tokens) followed by its completion of
--completion tokens, as a rollout lays them out (`rollout_rows`), so the completions start at
different positions. The vocabulary projection is chunked as the library advises for a 262k
vocabulary (logits_chunk 256). Prints the median seconds of each step (after one compile each),
their ratio, and the two steps' losses, which must agree.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
import impl_tunix_lite  # noqa: E402


def rollout_like_rows(vocab: int, rows: int, prompt: int, completion: int, seed: int = 0) -> dict:
    """{inputs, targets, weights, positions, segment_ids, advantages}: prompts of random length,
    then the completion, left-aligned in rows of prompt + completion - 1 tokens."""
    import numpy as np

    rng = np.random.default_rng(seed)
    T = prompt + completion - 1
    batch = {"inputs": np.zeros((rows, T), np.int32), "targets": np.zeros((rows, T), np.int32),
             "weights": np.zeros((rows, T), np.float32),
             "positions": np.full((rows, T), -1, np.int32),
             "segment_ids": np.zeros((rows, T), np.int32)}
    for r in range(rows):
        p = int(rng.integers(prompt // 2, prompt + 1))
        tokens = rng.integers(3, vocab, p + completion)
        n = p + completion - 1
        batch["inputs"][r, :n], batch["targets"][r, :n] = tokens[:-1], tokens[1:]
        batch["positions"][r, :n], batch["segment_ids"][r, :n] = np.arange(n), 1
        batch["weights"][r, p - 1:n] = 1.0
    batch["advantages"] = rng.normal(size=rows).astype(np.float32)
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gemma3-270m", help="a workload shape or a preset")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    import optax
    from flax import nnx

    from tunix_lite.lora import apply_lora
    from tunix_lite.models import set_training_options
    from tunix_lite.rl.losses import grpo_loss
    from tunix_lite.training.trainer import Trainer

    model, _ = impl_tunix_lite.build_model(args.model)
    set_training_options(model, logits_chunk=256)
    apply_lora(model, rank=8, alpha=16, targets=[rf"\.{t}$" for t in common.LORA_TARGETS],
               rngs=nnx.Rngs(1))
    batch = rollout_like_rows(model.config.vocab_size, args.rows, args.prompt, args.completion)
    trainers = {}
    for name, tokens in (("every position", None), ("completions only", args.completion)):
        loss = functools.partial(grpo_loss, aggregation="sequence-mean-token-mean",
                                 completion_tokens=tokens)
        # lr 0: both sides keep the same weights, so their losses stay comparable
        trainers[name] = Trainer(nnx.clone(model), optax.sgd(0.0), loss, wrt=nnx.LoRAParam)
    times = {name: [] for name in trainers}
    losses = {name: float(t.step(batch)["loss"]) for name, t in trainers.items()}  # compile
    for _ in range(args.reps):
        for name, trainer in trainers.items():
            start = time.perf_counter()
            float(trainer.step(batch)["loss"])
            times[name].append(time.perf_counter() - start)
    T = args.prompt + args.completion - 1
    print(f"{args.model}, LoRA r8: {args.rows} rows of {T} tokens, completions of "
          f"{args.completion}; median of {args.reps} steps")
    for name, values in times.items():
        print(f"  {name:17s} {statistics.median(values):7.2f} s  (min {min(values):.2f}, "
              f"max {max(values):.2f})  loss {losses[name]:.6f}")
    before, after = (statistics.median(v) for v in times.values())
    print(f"  speed-up {before / after:.2f}x")


if __name__ == "__main__":
    main()
