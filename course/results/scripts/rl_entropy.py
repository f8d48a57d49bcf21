"""A policy's entropy measured two ways on the same samples.

    python course/results/scripts/rl_entropy.py NAME=MODEL [NAME=MODEL ...] [--prompts 64]
    # -> course/results/06_rl_reasoning_gym/entropy.json, and a table on stdout

For each model (anything `tunix-lite eval --model` reads), `--samples` completions of each of the
first `--prompts` held-out prompts (HELD_OUT, the headline set), sampled at temperature 1 as a GRPO
rollout samples them, then scored by one forward pass:

- exact: the entropy of each next-token distribution, H_t = -sum_v p(v) log p(v), averaged over
  the completions' tokens. TRL's GRPOTrainer logs this as `entropy`.
- sampled: -log p(x_t) of the token that was drawn, averaged the same way. tunix_lite's rollouts
  log this (it needs no pass over the vocabulary).

Both are token-weighted means over the same completions and have the same expectation
(E[-log p(x_t) | x_<t] = H_t at every step, and the lengths do not depend on the token drawn after
the stop), but -log p of a rare token is large, so the sampled estimate is far noisier. Intervals
are 95% percentile bootstraps over prompts (a prompt's completions resampled together).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from heldout import RESULTS, ratio_interval

HELD_OUT = ("reasoning_gym:products,chain_sum?size=1000&seed=31&products.max_digits=1"
            "&chain_sum.max_terms=2&chain_sum.max_digits=2")
MAX_NEW_TOKENS = 32  # the GRPO runs' budget
ROWS_PER_PASS = 8  # [8, T, 262k] float32 logits: about 1 GB for Gemma 3
OUT = RESULTS / "06_rl_reasoning_gym" / "entropy.json"


def per_token(model, tokenizer, records, samples: int, seed: int):
    """(exact H_t, sampled -log p(x_t), prompt index) of every completion token, and the largest
    gap between the sampler's log p(x_t) and the forward pass's (the KV cache against recompute)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from tunix_lite.chat import format_chat
    from tunix_lite.data.rollouts import rollout_rows
    from tunix_lite.sampler import Sampler
    from tunix_lite.tokenizer import padding_id

    prompts = [format_chat(tokenizer, [{"role": "user", "content": r["prompt"]}]) for r in records]
    out = Sampler(model, tokenizer).generate(prompts, MAX_NEW_TOKENS, num_samples=samples,
                                             temperature=1.0, seed=seed)
    seq_len = int((out.prompt_lengths + out.lengths).max())
    rows = rollout_rows(out, seq_len, padding_id(tokenizer),
                        sampler_logprobs=out.logprobs.astype(np.float32))

    @nnx.jit
    def both(model, inputs, positions, segment_ids, targets):
        logits = model.logits(model.features(inputs, positions, segment_ids=segment_ids))
        log_p = jax.nn.log_softmax(logits, axis=-1)
        exact = -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
        return exact, jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]

    exact, log_p = [], []
    for i in range(0, len(rows["inputs"]), ROWS_PER_PASS):
        part = {k: jnp.asarray(v[i:i + ROWS_PER_PASS]) for k, v in rows.items()}
        e, lp = both(model, part["inputs"], part["positions"], part["segment_ids"],
                     part["targets"])
        exact.append(np.asarray(e))
        log_p.append(np.asarray(lp))
    exact, log_p = np.concatenate(exact), np.concatenate(log_p)
    mask = rows["weights"] > 0
    prompt = np.broadcast_to(np.repeat(np.arange(len(records)), samples)[:, None], mask.shape)
    gap = float(np.abs(log_p - rows["sampler_logprobs"])[mask].max())
    return exact[mask], -log_p[mask], prompt[mask], gap


def measure(path: str, prompts: int, samples: int, seed: int) -> dict:
    from tunix_lite.model_eval import eval_records
    from tunix_lite.training.stopped_run import load_model_or_run

    model, tokenizer = load_model_or_run(path)
    records, _ = eval_records(HELD_OUT, n=prompts)
    exact, sampled, prompt, gap = per_token(model, tokenizer, records, samples, seed)
    values = {"exact": exact, "sampled": sampled, "sampled_minus_exact": sampled - exact}
    counts = np.bincount(prompt)  # a prompt's completions are resampled together
    ci = {k: ratio_interval(np.bincount(prompt, v), counts) for k, v in values.items()}
    return {"model": path, "prompts": len(records), "samples": samples, "tokens": int(exact.size),
            **{k: float(v.mean()) for k, v in values.items()},
            **{f"{k}_ci95": ci[k] for k in values},
            "max_abs_logprob_gap_cache_vs_recompute": gap}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", metavar="NAME=MODEL")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="the sampling seed, one for all")
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON kept (models are added)")
    args = parser.parse_args(argv)
    found = json.loads(args.out.read_text()) if args.out.is_file() else {}
    for item in args.models:
        name, _, path = item.partition("=")
        found[name] = measure(path, args.prompts, args.samples, args.seed)
        args.out.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    print(f"{'model':<14} {'tokens':>6}  {'exact H':<20} {'sampled -log p':<20} sampled - exact")
    for name, r in found.items():
        cells = [f"{r[k]:.3f} [{r[k + '_ci95'][0]:.3f}, {r[k + '_ci95'][1]:.3f}]"
                 for k in ("exact", "sampled", "sampled_minus_exact")]
        print(f"{name:<14} {r['tokens']:>6}  {cells[0]:<20} {cells[1]:<20} {cells[2]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
