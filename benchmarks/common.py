"""What every benchmark implementation shares: the workloads, the machine, timing, and the result format.

Standard library only: the peer implementations (google-tunix, TRL, hand-written torch) import this file
from their own virtual environments, where tunix_lite is not installed.

An implementation is a script `impl_<name>.py` that runs one workload per call:

    python benchmarks/impl_tunix_lite.py --workload sft_full --steps 5 --warmup 2

and prints exactly one line `RESULT {json}` (see `result`) on stdout; anything else it prints is ignored.
`benchmarks/run.py` calls them alternately (A/B/C, repetition after repetition) and writes the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from typing import Callable

# Identical work on every side. "llama" is the llama-like shape of issue 5 (rope theta 1e6, as
# google-tunix's Llama 3 uses whatever its config says, so every side uses it).
SHAPES = {
    "llama": dict(vocab=8192, d_model=256, layers=4, heads=4, kv_heads=4, head_dim=64, ffn=1024,
                  rope_theta=1e6, norm_eps=1e-5, tied=False),
}
WORKLOADS = {
    # name: what is measured. tokens = batch * seq (inputs) per optimizer step; every token trains.
    "sft_full": dict(shape="llama", batch=8, seq=256, lora_rank=None, lr=1e-4),
    "sft_lora": dict(shape="llama", batch=8, seq=256, lora_rank=8, lora_alpha=16, lr=1e-4),
    "gemma_lora": dict(shape="gemma3-270m", batch=4, seq=128, lora_rank=8, lora_alpha=16, lr=1e-4),
    # Issue 4's LoRA vs QLoRA vs full fine-tuning on Gemma 3 270M (QLoRA: the frozen base stored quantized).
    "gemma_qlora_int8": dict(shape="gemma3-270m", batch=4, seq=128, lora_rank=8, lora_alpha=16, quantize="int8",
                             lr=1e-4),
    "gemma_qlora_nf4": dict(shape="gemma3-270m", batch=4, seq=128, lora_rank=8, lora_alpha=16, quantize="nf4",
                            lr=1e-4),
    "gemma_full": dict(shape="gemma3-270m", batch=4, seq=128, lora_rank=None, lr=1e-4),
    "generate_tiny": dict(shape="tiny", batch=1, prompt=64, new_tokens=64),
    "generate_gemma": dict(shape="gemma3-270m", batch=1, prompt=64, new_tokens=32),
}
# Timed steps and warm-up calls per measurement. A Gemma 3 270M training step takes seconds and every
# implementation compiles or warms up in its first call, so three timed steps after one warm-up suffice.
DEFAULT_TIMING = (5, 2)
TIMING = {w: (3, 1) for w, spec in WORKLOADS.items() if spec["shape"].startswith("gemma") and "lr" in spec}


def timing(workload: str, steps: int | None = None, warmup: int | None = None) -> tuple[int, int]:
    """(timed steps, warm-up calls) for a workload; explicit values win."""
    default_steps, default_warmup = TIMING.get(workload, DEFAULT_TIMING)
    return (default_steps if steps is None else steps), (default_warmup if warmup is None else warmup)


# LoRA targets on every side: the attention and MLP projections (not embeddings or the lm head).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OPTIMIZER = dict(name="adamw", b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0)  # no schedule, no clipping


def train_flops_per_step(shape: dict, batch: int, seq: int) -> float:
    """Model FLOPs of one full training step (forward + backward = 3x forward), counting matmuls only:
    6 * params_in_matmuls * tokens + 12 * layers * d_attn * seq * tokens (the attention scores and
    values, causal mask not discounted: the usual MFU convention). LoRA steps are reported against the
    same count, as the work a full step would do, so that their tokens/s compare."""
    d, h, kv, hd, f, v, n = (shape[k] for k in ("d_model", "heads", "kv_heads", "head_dim", "ffn", "vocab", "layers"))
    per_layer = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f
    matmul_params = n * per_layer + d * v  # the lm head is a matmul; the embedding lookup is not
    tokens = batch * seq
    return 6 * matmul_params * tokens + 12 * n * h * hd * seq * tokens


def machine() -> dict:
    """Cores, CPU model, Python and load: printed with every table (these machines are shared)."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return dict(cpu=model, cores=os.cpu_count(), python=platform.python_version(),
                load_1min=round(os.getloadavg()[0], 2), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_steps(step: Callable[[], None], steps: int, warmup: int) -> tuple[float, list[float]]:
    """(first call's seconds, per-step seconds of `steps` timed calls after `warmup` more untimed ones).
    `step` must block until its work is done (jax: block_until_ready)."""
    start = time.perf_counter()
    step()
    first = time.perf_counter() - start
    for _ in range(max(warmup - 1, 0)):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return first, times


def summary(values: list[float]) -> dict:
    """Median and spread (min, max) of repeated measurements."""
    return dict(median=statistics.median(values), min=min(values), max=max(values), n=len(values))


def result(impl: str, workload: str, *, step_times: list[float] | None = None, tokens_per_step: int | None = None,
           first_step_s: float | None = None, peak_mb: float | None = None, flops_per_step: float | None = None,
           **extra) -> dict:
    """The one record an implementation reports. tokens/s = tokens_per_step / median step time."""
    out = dict(impl=impl, workload=workload, first_step_s=first_step_s, peak_mb=peak_mb or peak_rss_mb())
    if step_times:
        med = statistics.median(step_times)
        out |= dict(step_s=summary(step_times), tokens_per_s=tokens_per_step / med if tokens_per_step else None,
                    flops_per_s=flops_per_step / med if flops_per_step else None)
    return out | extra


def emit(record: dict) -> None:
    print("RESULT " + json.dumps(record), flush=True)


def parse_result(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if len(lines) != 1:
        raise ValueError(f"expected one RESULT line, got {len(lines)}:\n{stdout[-2000:]}")
    return json.loads(lines[0][len("RESULT "):])


def impl_args(description: str, workloads=tuple(WORKLOADS)) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workload", required=True, choices=workloads)
    parser.add_argument("--steps", type=int, help="timed steps (decode: timed generate calls); default: timing()")
    parser.add_argument("--warmup", type=int, help="untimed calls first (compile, caches); default: timing()")
    args = parser.parse_args()
    args.steps, args.warmup = timing(args.workload, args.steps, args.warmup)
    return args


if __name__ == "__main__":
    json.dump(machine(), sys.stdout, indent=1)
