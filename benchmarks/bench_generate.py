"""Prefill and decode throughput: tunix_lite's KV-cache sampler vs transformers `generate`.

    python benchmarks/bench_generate.py                 # tiny + gemma3-270m, transformers if installed
    python benchmarks/bench_generate.py --models tiny --smoke

Same prompts, greedy, fixed number of new tokens (no early stop) on both sides. Compile time is
reported separately; throughput is the median of --repeats timed runs after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from tunix_lite.loading import load, resolve_checkpoint
from tunix_lite.sampler import Sampler


def timed(fn, repeats: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def bench_ours(name, prompts, new_tokens, repeats):
    model, tokenizer = load(name)
    # no stop ids: every row generates exactly new_tokens, like min_new_tokens on the other side
    sampler = Sampler(model, tokenizer, stop_ids=[-1])
    start = time.perf_counter()
    sampler.generate(prompts, 1)
    compile_prefill = time.perf_counter() - start
    start = time.perf_counter()
    sampler.generate(prompts, new_tokens)
    compile_total = time.perf_counter() - start
    prefill, _ = timed(lambda: sampler.generate(prompts, 1), repeats)
    total, _ = timed(lambda: sampler.generate(prompts, new_tokens), repeats)
    prompt_len = sampler.encode(prompts)
    return dict(prefill_s=prefill, total_s=total, compile_s=compile_prefill + compile_total,
                prompt_tokens=sum(map(len, prompt_len)))


def bench_transformers(name, prompts, new_tokens, repeats):
    import torch
    import transformers

    directory = resolve_checkpoint(name)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    tokenizer = load(name)[1]
    ids = [tokenizer.encode(p, add_bos=True) for p in prompts]
    width = max(map(len, ids))
    input_ids = torch.tensor([[0] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])

    def prefill():
        with torch.no_grad():
            model(input_ids=input_ids, attention_mask=mask)

    def generate():
        with torch.no_grad():
            model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)

    generate()  # warm-up
    p, _ = timed(prefill, repeats)
    t, _ = timed(generate, repeats)
    return dict(prefill_s=p, total_s=t, compile_s=0.0, prompt_tokens=sum(map(len, ids)))


def rows_for(name, batch, prompt_words, new_tokens, repeats, with_reference):
    text = " ".join(["The quick brown fox jumps over the lazy dog."] * prompt_words)
    prompts = [f"{i}: {text}" for i in range(batch)]
    results = {"tunix_lite": bench_ours(name, prompts, new_tokens, repeats)}
    if with_reference:
        results["transformers"] = bench_transformers(name, prompts, new_tokens, repeats)
    rows = []
    for impl, r in results.items():
        decode_s = max(r["total_s"] - r["prefill_s"], 1e-9)
        rows.append(dict(model=name, impl=impl, batch=batch, prompt_tokens=r["prompt_tokens"], new_tokens=new_tokens,
                         prefill_tok_s=r["prompt_tokens"] / r["prefill_s"],
                         decode_tok_s=batch * (new_tokens - 1) / decode_s, compile_s=r["compile_s"]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "gemma3-270m"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="1 repeat, few tokens, tunix_lite only")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        with_reference = not args.smoke
    except ImportError:
        with_reference = False

    rows = []
    for name in args.models:
        new_tokens = 8 if args.smoke else (64 if name == "tiny" else 32)
        rows += rows_for(name, args.batch, 2 if args.smoke else 6, new_tokens, 1 if args.smoke else args.repeats,
                         with_reference)

    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print("| model | impl | batch | prompt tok | new tok | prefill tok/s | decode tok/s | compile s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['impl']} | {r['batch']} | {r['prompt_tokens']} | {r['new_tokens']} | "
              f"{r['prefill_tok_s']:.0f} | {r['decode_tok_s']:.1f} | {r['compile_s']:.1f} |")
    for name in args.models:
        by_impl = {r["impl"]: r for r in rows if r["model"] == name}
        if "transformers" in by_impl:
            ratio = by_impl["tunix_lite"]["decode_tok_s"] / by_impl["transformers"]["decode_tok_s"]
            print(f"{name}: decode speed-up over transformers {ratio:.1f}x")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "generate.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
