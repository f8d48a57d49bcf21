"""What every benchmark implementation shares: the workloads, the machine, timing, and the result format.

Standard library only: the peer implementations (google-tunix, TRL, hand-written torch) import this file
from their own virtual environments, where tunix_lite is not installed.

An implementation is a script `impl_<name>.py` that runs one workload per call:

    python benchmarks/impl_tunix_lite.py --workload sft_full --steps 5 --warmup 2

and prints exactly one line `RESULT {json}` (see `result`) on stdout; anything else it prints is ignored. An
implementation without such a workload exits with NOT_APPLICABLE (3) instead.
`benchmarks/run.py` calls them alternately (A/B/C, repetition after repetition) and writes the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import time
from typing import Callable

# Identical work on every side. "llama" is the llama-like shape of issue 5 (rope theta 1e6, as
# google-tunix's Llama 3 uses whatever its config says, so every side uses it). "llama_half" is the
# distillation student: the same width, heads and vocabulary at half the depth.
SHAPES = {
    "llama": dict(vocab=8192, d_model=256, layers=4, heads=4, kv_heads=4, head_dim=64, ffn=1024,
                  rope_theta=1e6, norm_eps=1e-5, tied=False),
}
SHAPES["llama_half"] = SHAPES["llama"] | dict(layers=2)

NOT_APPLICABLE = 3  # an implementation's exit code for "no such workload" (run.py shows n/a)
BOS, EOS, PAD = 2, 1, 0  # Gemma's ids; the llama-shaped random models use the same ones

# name: what is measured. `kind` says which runner does it; "tokens" is what tokens/s counts (per kind below).
# Every llama-shaped model is randomly initialised (each side its own init), float32, full fine-tuning unless
# lora_rank is set, AdamW per OPTIMIZER with a constant learning rate `lr`, no gradient checkpointing, no clipping.
WORKLOADS = {
    # sft: next-token cross-entropy on one fixed batch of random ids; every token trains.
    # tokens = batch * seq (inputs) per optimizer step.
    "sft_full": dict(kind="sft", shape="llama", batch=8, seq=256, lora_rank=None, lr=1e-4),
    "sft_lora": dict(kind="sft", shape="llama", batch=8, seq=256, lora_rank=8, lora_alpha=16, lr=1e-4),
    "gemma_lora": dict(kind="sft", shape="gemma3-270m", batch=4, seq=128, lora_rank=8, lora_alpha=16, lr=1e-4),
    # Issue 4's LoRA vs QLoRA vs full fine-tuning on Gemma 3 270M (QLoRA: the frozen base stored quantized).
    "gemma_qlora_int8": dict(kind="sft", shape="gemma3-270m", batch=4, seq=128, lora_rank=8, lora_alpha=16,
                             quantize="int8", lr=1e-4),
    "gemma_qlora_nf4": dict(kind="sft", shape="gemma3-270m", batch=4, seq=128, lora_rank=8, lora_alpha=16,
                            quantize="nf4", lr=1e-4),
    "gemma_full": dict(kind="sft", shape="gemma3-270m", batch=4, seq=128, lora_rank=None, lr=1e-4),
    # generate: greedy decoding, no early stop; tokens = batch * new_tokens generated per call.
    "generate_tiny": dict(kind="generate", shape="tiny", batch=1, prompt=64, new_tokens=64),
    "generate_gemma": dict(kind="generate", shape="gemma3-270m", batch=1, prompt=64, new_tokens=32),
    # dpo (issue 12): one optimizer step on one fixed batch of `pairs` preference pairs (data: preference_batch).
    # Each pair is a 128-token prompt with a 128-token chosen and a 128-token rejected completion, run as 2 * pairs
    # sequences of 256 tokens (chosen rows, then rejected rows, the prompt repeated). Log-probs are summed over the
    # completion tokens only. Sigmoid DPO: -log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), mean over pairs,
    # no label smoothing. The reference is a frozen copy of the initial policy, run inside every step on the same
    # 2 * pairs sequences (no precomputed reference log-probs). tokens = 2 * pairs * (prompt + completion) = 4,096;
    # pairs/s is reported beside tokens/s.
    "dpo": dict(kind="dpo", shape="llama", pairs=8, prompt=128, completion=128, beta=0.1, lr=1e-4),
    # orpo: the same data and step without a reference model: NLL on the chosen completion + lambda * odds-ratio
    # loss (Hong et al. 2024, lambda 0.1). The peers differ in details that do not change the work (see
    # peers/README.md): tunix sums completion log-probs, TRL averages them per token and takes the NLL over
    # prompt + chosen. tokens as for dpo.
    "orpo": dict(kind="orpo", shape="llama", pairs=8, prompt=128, completion=128, lambda_orpo=0.1, lr=1e-4),
    # grpo (issue 13): one step = rollout + update. Rollout: `prompts` fixed prompts (grpo_prompts) x `group`
    # completions each, sampled from the current policy at temperature 1.0 (full vocabulary: no top-k, top-p 1),
    # exactly `completion` tokens each (no stop token can end a completion early). Reward: parity_reward (below),
    # group-normalised advantages (r - mean_g) / (std_g + eps). Update: `iterations` = 1 optimizer step on all
    # prompts * group rows (one mini-batch), clipped surrogate (epsilon 0.2) + beta * k3 KL to a frozen reference
    # (exp(ref - pi) - (ref - pi) - 1), per-sequence token mean, then mean over sequences. With one iteration the
    # ratio is exp(pi - stop_gradient(pi)): no old-policy forward pass. The reference forward runs inside every
    # step. tokens = prompts * group * (prompt + completion) = 2,048 per step; rollout tokens/s =
    # prompts * group * completion / rollout seconds; update seconds = step - rollout (reference forward,
    # rewards, advantages, policy forward + backward, optimizer).
    "grpo": dict(kind="grpo", shape="llama", prompts=4, group=4, prompt=64, completion=64, temperature=1.0,
                 iterations=1, beta=0.04, epsilon=0.2, lr=1e-4),
    # distill (issue 14): logit knowledge distillation of the "llama" teacher (random init, frozen) into a
    # "llama_half" student (random init, trained) on one fixed batch of random ids (as sft_full):
    # alpha * T^2 * KL(softmax(z_t / T) || softmax(z_s / T)) + (1 - alpha) * CE(next token, z_s), mean over
    # tokens, full vocabulary. online: the teacher's forward runs inside every step. cached: the teacher's logits
    # for the batch were computed once before timing and are read by every step (full vocabulary, float32:
    # batch * seq * vocab * 4 bytes = 64 MiB; a top-k cache is a different workload). tokens = batch * seq.
    "distill_online": dict(kind="distill", shape="llama", student="llama_half", batch=8, seq=256, alpha=0.5,
                           temperature=2.0, teacher="online", lr=1e-4),
    "distill_cached": dict(kind="distill", shape="llama", student="llama_half", batch=8, seq=256, alpha=0.5,
                           temperature=2.0, teacher="cached", lr=1e-4),
    # rollout_group (issue 13): a GRPO rollout group: one `prompt`-token prompt, `group` completions of exactly
    # `new_tokens` tokens sampled at temperature 1.0 (full vocabulary, no stop). A side may share the prompt's
    # prefill and KV prefix across the group (tunix_lite) or run the prompt `group` times as a batch (tunix,
    # transformers). tokens = group * new_tokens generated per call.
    "rollout_group_tiny": dict(kind="rollout", shape="tiny", group=8, prompt=64, new_tokens=64, temperature=1.0),
    "rollout_group_gemma": dict(kind="rollout", shape="gemma3-270m", group=8, prompt=64, new_tokens=32,
                                temperature=1.0),
    # *_bf16 (issue 13): the same work sampled from a bfloat16 copy of the weights (tunix_lite's
    # Sampler(weights_dtype="bfloat16"), matmuls in bfloat16, logits and sampling in float32), to set beside the
    # float32 rows; tunix_lite only.
    "generate_gemma_bf16": dict(kind="generate", shape="gemma3-270m", batch=1, prompt=64, new_tokens=32,
                                weights_dtype="bfloat16"),
    "rollout_group_gemma_bf16": dict(kind="rollout", shape="gemma3-270m", group=8, prompt=64, new_tokens=32,
                                     temperature=1.0, weights_dtype="bfloat16"),
}
TRAINING_KINDS = ("sft", "dpo", "orpo", "grpo", "distill")
# Timed steps and warm-up calls per measurement. A Gemma 3 270M training step or group rollout takes seconds
# and every implementation compiles or warms up in its first call, so three timed calls after one warm-up suffice.
DEFAULT_TIMING = (5, 2)
TIMING = {w: (3, 1) for w, spec in WORKLOADS.items()
          if spec["shape"].startswith("gemma") and spec["kind"] in TRAINING_KINDS + ("rollout",)}


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


def forward_flops(shape: dict, batch: int, seq: int) -> float:
    """Model FLOPs of one forward pass over batch x seq tokens (a third of train_flops_per_step)."""
    return train_flops_per_step(shape, batch, seq) / 3


def workload_flops(name: str) -> dict:
    """Matmul FLOPs of one step of a post-training workload, by part, with "step" their sum (the MFU numerator).

    dpo: policy forward + backward and reference forward on 2 * pairs sequences; orpo: policy only.
    grpo: "update" = policy forward + backward + reference forward on prompts * group sequences of
    prompt + completion tokens (one iteration: no old-policy forward); "rollout" = one forward over the same
    sequences (prefill plus one decode step per generated token, the KV cache's attention counted as a full
    forward's, as in training). distill: student forward + backward, + the teacher's forward when online.
    """
    w = WORKLOADS[name]
    shape = SHAPES[w["shape"]]
    if w["kind"] in ("dpo", "orpo"):
        rows, seq = 2 * w["pairs"], w["prompt"] + w["completion"]
        parts = dict(policy=train_flops_per_step(shape, rows, seq))
        if w["kind"] == "dpo":
            parts["reference"] = forward_flops(shape, rows, seq)
    elif w["kind"] == "grpo":
        rows, seq = w["prompts"] * w["group"], w["prompt"] + w["completion"]
        parts = dict(update=train_flops_per_step(shape, rows, seq) + forward_flops(shape, rows, seq),
                     rollout=forward_flops(shape, rows, seq))
    elif w["kind"] == "distill":
        parts = dict(student=train_flops_per_step(SHAPES[w["student"]], w["batch"], w["seq"]))
        if w["teacher"] == "online":
            parts["teacher"] = forward_flops(shape, w["batch"], w["seq"])
    else:
        raise ValueError(f"workload_flops covers the post-training workloads, not {name} ({w['kind']})")
    return parts | dict(step=sum(parts.values()))


def tokens_per_step(name: str) -> int:
    """What tokens/s counts for a workload (see WORKLOADS)."""
    w = WORKLOADS[name]
    kind = w["kind"]
    if kind in ("sft", "distill"):
        return w["batch"] * w["seq"]
    if kind == "generate":
        return w["batch"] * w["new_tokens"]
    if kind in ("dpo", "orpo"):
        return 2 * w["pairs"] * (w["prompt"] + w["completion"])
    if kind == "grpo":
        return w["prompts"] * w["group"] * (w["prompt"] + w["completion"])
    if kind == "rollout":
        return w["group"] * w["new_tokens"]
    raise ValueError(f"unknown workload kind {kind!r}")


# ----------------------------------------------------------------------------- shared data (stdlib only)
# Every peer draws its ids from these functions, so all peers see the same ids. tunix_lite may draw its own
# random ids (numpy); that changes loss values, not the work done.

def random_ids(rng, n: int, vocab: int) -> list[int]:
    """n ids in [3, vocab): never pad (0), eos (1) or bos (2)."""
    return [rng.randrange(3, vocab) for _ in range(n)]


def preference_batch(vocab: int, pairs: int, prompt: int, completion: int, seed: int = 0) -> dict:
    """The dpo/orpo batch: per pair a prompt of bos + prompt-1 random ids, and chosen and rejected completions
    of completion-1 random ids + eos each (so a trainer that appends eos to a completion finds one already)."""
    rng = random.Random(seed)
    out = dict(prompt=[], chosen=[], rejected=[])
    for _ in range(pairs):
        out["prompt"].append([BOS] + random_ids(rng, prompt - 1, vocab))
        out["chosen"].append(random_ids(rng, completion - 1, vocab) + [EOS])
        out["rejected"].append(random_ids(rng, completion - 1, vocab) + [EOS])
    return out


def grpo_prompts(vocab: int, prompts: int, length: int, seed: int = 0) -> list[list[int]]:
    """The grpo prompts: each bos + length-1 random ids."""
    rng = random.Random(seed)
    return [[BOS] + random_ids(rng, length - 1, vocab) for _ in range(prompts)]


def parity_reward(completion_ids) -> float:
    """The grpo reward of one completion: the fraction of its token ids that are even. Cheap, deterministic,
    and it varies within a group of random samples (so advantages are not all zero)."""
    ids = list(completion_ids)
    return sum(1 for t in ids if int(t) % 2 == 0) / max(len(ids), 1)


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
