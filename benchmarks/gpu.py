"""Accelerator benchmark: tunix_lite beside torch + transformers (+ peft) on one GPU, in one call.

    python benchmarks/gpu.py --write-results  # on a GPU: every row (~10 min), RESULTS_GPU.md
    python benchmarks/gpu.py --smoke          # anywhere (CI runs it on CPU): tiny shapes, no file
    python benchmarks/gpu.py --only sft_full_270m,rollout --budget 300

The same work on both sides: random weights at the real shapes (Gemma 3 270M and 1B), float32
parameters and AdamW (no schedule, no clipping), bfloat16 compute; one fixed batch of random token
ids, every position trained. torch runs eagerly (autocast bfloat16, fused AdamW, SDPA attention), as
a learner's notebook would.

| row | work | tokens/s counts |
|---|---|---|
| sft_full_270m, sft_full_1b | full fine-tuning, 8 x 1024 tokens | trained tokens |
| sft_lora_270m, sft_lora_1b | LoRA r8 (alpha 16), q/k/v/o/gate/up/down; peft | trained tokens |
| rollout | 16 prompts x 8 samples, 128 + 256 new tokens, temperature 1 | new tokens |
| decode_1 | one prompt of 128 tokens, 256 greedy tokens, bfloat16 weights | new tokens |
| compile_cache | sft_full_270m's first step in two processes sharing XLA's cache | - |
| async_rollouts | GRPO, tiny shape, 16 prompts x 8 samples of 64 tokens | new tokens |

Each side runs in a child process of its own (`--side jax|torch --row NAME`), so one framework's
allocator never holds memory the other needs and each row's first step is its own compile. MFU
divides the model's matmul FLOPs (benchmarks/common.train_flops_per_step; LoRA rows count the full
step's FLOPs, as RESULTS.md does, in parentheses) by the bfloat16 matmul rate measured here; decode
is set against the bandwidth bound (weight bytes / measured copy bandwidth, per token).
async_rollouts (benchmarks/async_rollouts.py, on one device set) runs GRPO in turn, then sampling
1 and 2 updates ahead, and reports the share of each step the rollout side spends waiting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import common  # noqa: E402
from impl_tunix_lite import IdsOnly, random_batch, shape_of  # noqa: E402  (the CPU benchmark's, shared)

TRAIN = dict(batch=8, seq=1024, lr=1e-5, rank=8, alpha=16.0)
ROWS = {
    "sft_full_270m": dict(kind="train", model="gemma3-270m", lora=False),
    "sft_lora_270m": dict(kind="train", model="gemma3-270m", lora=True),
    "sft_full_1b": dict(kind="train", model="gemma3-1b", lora=False),
    "sft_lora_1b": dict(kind="train", model="gemma3-1b", lora=True),
    # a rollout call is seconds long on the torch side: 1 warm-up and 2 timed calls
    "rollout": dict(
        kind="rollout",
        model="gemma3-270m",
        prompts=16,
        group=8,
        prompt=128,
        new=256,
        steps=2,
        warmup=1,
    ),
    "decode_1": dict(
        kind="rollout",
        model="gemma3-270m",
        prompts=1,
        group=1,
        prompt=128,
        new=256,
        steps=2,
        warmup=1,
    ),
    # jax only: whole GRPO runs; the first `warmup` rollouts (the compiles) are not timed
    "async_rollouts": dict(kind="async", model="tiny", prompts=16, group=8, new=64, steps=10,
                           warmup=3),
}
# --smoke: the same rows on the shipped tiny model's shape (random weights), small enough for CI
SMOKE_TRAIN = dict(TRAIN, batch=2, seq=64)
SMOKE_ROLLOUT = dict(prompts=2, group=2, prompt=16, new=16)
SMOKE_ASYNC = dict(prompts=2, group=2, new=8, steps=5, warmup=2)
# each timed code path once. Not compile_cache: two more fresh processes of sft_full_270m; the
# persistent cache has its own test (tests/test_compile_cache.py), and the smoke test tabulates
# that row from records.
# Nor async_rollouts: three whole GRPO runs, minutes on 2 cores; `--smoke --only async_rollouts`
# checks it (benchmarks/async_rollouts.py runs the same code on fake devices).
SMOKE_ROWS = ["sft_full_270m", "sft_lora_270m", "rollout"]
# tokens per vocabulary-projection chunk on the jax side (262k vocabulary: never all logits at once)
LOGITS_CHUNK = 2048


# Every row in order of importance (a --budget cuts the tail). ROW+KEY=VALUE: a jax-only variant of
# ROW with one of tunix_lite's training options changed.
ORDER = [
    "sft_full_270m",
    "sft_lora_270m",
    "rollout",
    "decode_1",
    "async_rollouts",
    "sft_full_1b",
    "compile_cache",
    "sft_full_270m+attention=cudnn",
    "sft_lora_1b",
    "sft_full_1b+attention=cudnn",
    "sft_full_270m+logits_chunk=8192",
]


def row_spec(name: str, smoke: bool) -> dict:
    """A row's settings; NAME+KEY=VALUE overrides one (an integer value or a word)."""
    name, *options = name.split("+")
    spec = dict(ROWS[name])
    for option in options:
        key, value = option.split("=")
        spec[key] = int(value) if value.isdigit() else value
    if spec["kind"] == "train":
        spec |= SMOKE_TRAIN if smoke else TRAIN
    elif spec["kind"] == "async":
        spec |= SMOKE_ASYNC if smoke else {}
    elif smoke:
        spec |= {key: min(spec[key], value) for key, value in SMOKE_ROLLOUT.items()}
    return spec | (dict(model="tiny") if smoke else {})


# ------------------------------------------------------------------------ the jax side (tunix_lite)


def peak_jax(smoke: bool) -> dict:
    """bfloat16 matmul FLOP/s (an n^3 product) and copy bandwidth (bytes read + written)."""
    import jax
    import jax.numpy as jnp

    n, gib = (512, 1 / 64) if smoke else (8192, 4)
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    matmul = jax.jit(lambda x: x @ x)
    x = jnp.zeros(int(gib * 2**30) // 4, jnp.float32)
    copy = jax.jit(lambda y: y + 1)
    timings = {}
    for name, fn, arg in (("matmul", matmul, a), ("copy", copy, x)):
        _, times = common.time_steps(lambda: fn(arg).block_until_ready(), 10, 3)
        timings[name] = min(times)
    return dict(
        row="peak",
        time=time.time(),
        device=jax.devices()[0].device_kind,
        backend=jax.default_backend(),
        matmul_flops=2 * n**3 / timings["matmul"],
        copy_bytes_per_s=2 * x.nbytes / timings["copy"],
    )


def jax_model(name: str, seed: int = 0):
    from flax import nnx

    from tunix_lite.models import Transformer, get_config

    return Transformer(get_config(name), rngs=nnx.Rngs(seed))


def jax_train(spec: dict, steps: int, warmup: int) -> dict:
    import optax
    from flax import nnx

    from tunix_lite.lora import apply_lora
    from tunix_lite.models import set_training_options
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import Trainer

    model = jax_model(spec["model"])
    if spec["lora"]:
        apply_lora(
            model,
            rank=spec["rank"],
            alpha=spec["alpha"],
            targets=[rf"\.{t}$" for t in common.LORA_TARGETS],
            rngs=nnx.Rngs(1),
        )
    set_training_options(
        model,
        compute_dtype="bfloat16",
        attention=spec.get("attention", "einsum"),
        logits_chunk=min(spec.get("logits_chunk", LOGITS_CHUNK), spec["seq"]),
    )
    o = common.OPTIMIZER
    tx = optax.adamw(
        spec["lr"], b1=o["b1"], b2=o["b2"], eps=o["eps"], weight_decay=o["weight_decay"]
    )
    trainer = Trainer(model, tx, lm_loss, wrt=nnx.LoRAParam if spec["lora"] else nnx.Param)
    B, T = spec["batch"], spec["seq"]
    batch = random_batch(model.config.vocab_size, B, T)
    first, times = common.time_steps(lambda: float(trainer.step(batch)["loss"]), steps, warmup)
    options = ", ".join(
        f"{key}={spec[key]}" for key in ("attention", "logits_chunk") if key in spec
    )
    return common.result(
        f"tunix_lite ({options})" if options else "tunix_lite",
        spec["model"],
        step_times=times,
        tokens_per_step=B * T,
        first_step_s=first,
        flops_per_step=common.train_flops_per_step(shape_of(model.config), B, T),
        final_loss=trainer.history[-1]["loss"],
    )


def jax_rollout(spec: dict, steps: int, warmup: int, weights_dtype: str | None) -> dict:
    """Sampler.generate with stop_ids=[-1]: every row makes exactly `new` tokens."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from tunix_lite.sampler import Sampler

    model = jax_model(spec["model"])
    sampler = Sampler(
        model, IdsOnly(), stop_ids=[-1], bucket=spec["prompt"], weights_dtype=weights_dtype
    )
    ids = np.random.default_rng(0).integers(
        3, model.config.vocab_size, (spec["prompts"], spec["prompt"])
    )
    G, N = spec["group"], spec["new"]
    how = dict(num_samples=G, temperature=1.0) if G > 1 else {}
    outputs = []
    first, times = common.time_steps(
        lambda: outputs.append(sampler.generate(ids.tolist(), N, **how)), steps, warmup
    )
    assert (outputs[-1].lengths == N).all(), outputs[-1].lengths
    weights = jax.tree.leaves(sampler.weights()[1])
    weight_bytes = sum(x.nbytes for x in weights if jnp.issubdtype(x.dtype, jnp.floating))
    return common.result(
        "tunix_lite",
        spec["model"],
        step_times=times,
        tokens_per_step=spec["prompts"] * G * N,
        first_step_s=first,
        weights_dtype=weights_dtype or "float32",
        weight_bytes=weight_bytes,
    )


def jax_async(spec: dict) -> list[dict]:
    """GRPO in turn, then sampling 1 and 2 updates ahead, on this machine's devices (colocated):
    benchmarks/async_rollouts.py's measure, one record per schedule."""
    from async_rollouts import SETTINGS, measure, random_policy

    out = []
    with tempfile.TemporaryDirectory() as policy:
        random_policy(policy, spec["model"])
        for name, staleness in SETTINGS.items():
            r = measure(policy, staleness, prompts=spec["prompts"], group=spec["group"],
                        new=spec["new"], steps=spec["steps"], warmup=spec["warmup"], split=False)
            out.append(common.result(f"tunix_lite ({name})", spec["model"],
                                     step_times=r["step_times"],
                                     tokens_per_step=r["tokens_per_step"],
                                     rollout_wait=r["rollout_wait"], rollout_s=r["rollout_s"]))
    return out


def run_jax(row: str, smoke: bool, steps: int, warmup: int) -> list[dict]:
    import jax

    if row == "peak":
        return [peak_jax(smoke)]
    spec = row_spec(row, smoke)
    steps, warmup = spec.get("steps", steps), spec.get("warmup", warmup)
    if spec["kind"] == "train":
        out = [jax_train(spec, steps, warmup)]
    elif spec["kind"] == "async":
        out = jax_async(spec)
    elif row == "decode_1":
        out = [jax_rollout(spec, steps, warmup, "bfloat16")]
    else:
        out = [jax_rollout(spec, steps, warmup, dtype) for dtype in (None, "bfloat16")]
    return [
        r
        | dict(
            row=row,
            versions=versions("jax", "jaxlib", "flax", "optax"),
            device=jax.devices()[0].device_kind,
        )
        for r in out
    ]


# ----------------------------------------------------------------------------- the torch side


def torch_model(name: str, dtype):
    import torch
    import transformers

    from tunix_lite.models import get_config
    from tunix_lite.weights.hf import config_to_hf

    hf = config_to_hf(get_config(name))
    config = transformers.AutoConfig.for_model(**hf)
    config.use_cache = False
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=dtype, attn_implementation="sdpa"
        )
    return model, device


def torch_train(spec: dict, steps: int, warmup: int) -> dict:
    import numpy as np
    import torch

    model, device = torch_model(spec["model"], torch.float32)
    if spec["lora"]:
        import peft

        model = peft.get_peft_model(
            model,
            peft.LoraConfig(
                r=spec["rank"],
                lora_alpha=spec["alpha"],
                lora_dropout=0.0,
                bias="none",
                target_modules=list(common.LORA_TARGETS),
                task_type="CAUSAL_LM",
            ),
        )
    model.train()
    o = common.OPTIMIZER
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        params,
        lr=spec["lr"],
        betas=(o["b1"], o["b2"]),
        eps=o["eps"],
        weight_decay=o["weight_decay"],
        fused=device == "cuda",
    )
    B, T = spec["batch"], spec["seq"]
    batch = random_batch(model.config.vocab_size, B, T)
    inputs = torch.as_tensor(np.asarray(batch["inputs"]), device=device)
    targets = torch.as_tensor(np.asarray(batch["targets"]), device=device, dtype=torch.long)
    losses = []

    def step():
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(input_ids=inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss))  # waits for the step, as the jax side's float(loss) does

    first, times = common.time_steps(step, steps, warmup)
    shape = dict(
        vocab=model.config.vocab_size,
        d_model=model.config.hidden_size,
        layers=model.config.num_hidden_layers,
        heads=model.config.num_attention_heads,
        kv_heads=model.config.num_key_value_heads,
        head_dim=model.config.head_dim,
        ffn=model.config.intermediate_size,
    )
    return common.result(
        "torch" + ("+peft" if spec["lora"] else ""),
        spec["model"],
        step_times=times,
        tokens_per_step=B * T,
        first_step_s=first,
        flops_per_step=common.train_flops_per_step(shape, B, T),
        final_loss=losses[-1],
    )


def torch_rollout(spec: dict, steps: int, warmup: int) -> dict:
    """transformers' generate in bfloat16: sampling (G > 1, temperature 1, no top-k) or greedy."""
    import numpy as np
    import torch

    model, device = torch_model(spec["model"], torch.bfloat16)
    model.config.use_cache = True
    model.eval()
    ids = np.random.default_rng(0).integers(
        3, model.config.vocab_size, (spec["prompts"], spec["prompt"])
    )
    inputs = torch.as_tensor(ids, device=device)
    G, N = spec["group"], spec["new"]
    how = (
        dict(do_sample=True, temperature=1.0, top_k=None, top_p=None, num_return_sequences=G)
        if G > 1
        else dict(do_sample=False)
    )
    out = []

    @torch.no_grad()
    def call():
        result = model.generate(
            inputs,
            attention_mask=torch.ones_like(inputs),
            max_new_tokens=N,
            min_new_tokens=N,
            eos_token_id=None,
            pad_token_id=common.PAD,
            **how,
        )
        out.append(result.shape)

    first, times = common.time_steps(call, steps, warmup)
    assert out[-1] == (spec["prompts"] * G, spec["prompt"] + N), out[-1]
    return common.result(
        "transformers.generate",
        spec["model"],
        step_times=times,
        tokens_per_step=spec["prompts"] * G * N,
        first_step_s=first,
        weights_dtype="bfloat16",
    )


def run_torch(row: str, smoke: bool, steps: int, warmup: int) -> list[dict]:
    import torch

    spec = row_spec(row, smoke)
    if spec["kind"] == "async":
        return [dict(row=row, impl="torch", error="n/a: a tunix_lite schedule, no torch side")]
    if spec["kind"] == "train" and spec["lora"] and not versions("peft")["peft"]:
        return [dict(row=row, impl="torch+peft", error="n/a: peft is not installed")]
    steps, warmup = spec.get("steps", steps), spec.get("warmup", warmup)
    out = (
        torch_train(spec, steps, warmup)
        if spec["kind"] == "train"
        else torch_rollout(spec, steps, warmup)
    )
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return [out | dict(row=row, versions=versions("torch", "transformers", "peft"), device=device)]


def versions(*names: str) -> dict:
    from importlib import metadata

    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


# ------------------------------------------------------------------------ the parent: run, tabulate


def child(side: str, row: str, args, cache_dir: str | None = None) -> list[dict]:
    """One side of some rows (comma-separated) in a fresh process; its records, or one error record.
    Nothing starts once less than a minute of --budget is left: rows come in order of importance."""
    left = args.deadline - time.perf_counter()
    if left < 60:
        return [dict(row=row, impl=side, error="not run: --budget spent")]
    cmd = [
        sys.executable,
        __file__,
        "--side",
        side,
        "--row",
        row,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
    ] + (["--smoke"] if args.smoke else [])
    cmd += ["--cache-dir", cache_dir] if cache_dir else []
    # no persistent cache unless the row asks for one: each first step is a compile
    env = dict(os.environ, PYTHONUNBUFFERED="1", TUNIX_LITE_COMPILATION_CACHE="0")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    if side == "torch":
        env["JAX_PLATFORMS"] = (
            "cpu"  # the torch side reads tunix_lite's configs only: jax stays off the GPU
        )
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=min(args.timeout, left)
        )
    except subprocess.TimeoutExpired:
        return [dict(row=row, impl=side, error=f"timed out after {min(args.timeout, left):.0f} s")]
    wall = time.perf_counter() - start
    records = [
        json.loads(line[len("RESULT ") :])
        for line in proc.stdout.splitlines()
        if line.startswith("RESULT ")
    ]
    if proc.returncode or not records:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        records = [dict(row=row, impl=side, error=" | ".join(tail)[-400:])]
    print(
        f"{row:<15} {side:<6} {wall:6.1f} s  "
        + "; ".join(
            r.get("error") or f"{r.get('impl')} {r.get('tokens_per_s') or 0:,.0f} tok/s"
            for r in records
        ),
        flush=True,
    )
    return [r | dict(wall_s=wall) for r in records]


def fmt(x, spec=",.0f") -> str:
    return "–" if x is None else format(x, spec)


def table(records: list[dict], peak: dict) -> str:
    """Markdown: one line per (row, impl) with tokens/s, step, first step, MFU; then the ratios."""
    lines = [
        "| row | impl | weights | tokens/s | step ms (min–max) | first step s | MFU / bandwidth |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    best = {}
    for r in records:
        if r["row"] in ("peak", "compile_cache"):
            continue
        if "error" in r:
            lines.append(f"| {r['row']} | {r['impl']} | | error: {r['error'][:120]} | | | |")
            continue
        step = r["step_s"]
        if r.get("flops_per_s"):
            mfu = r["flops_per_s"] / peak["matmul_flops"]
            use = f"({mfu:.1%})" if "lora" in r["row"] else f"{mfu:.1%}"
        elif "rollout_wait" in r:
            use = f"rollout side waits {r['rollout_wait']:.0%}"
        elif r.get("weight_bytes") and r["row"] == "decode_1":
            bound = (
                peak["copy_bytes_per_s"] / 2 / r["weight_bytes"]
            )  # tokens/s if each token read every weight once
            use = f"{r['tokens_per_s'] / bound:.0%} of {bound:,.0f} tok/s"
        else:
            use = ""
        lines.append(
            f"| {r['row'].split('+')[0]} | {r['impl']} | {r.get('weights_dtype', 'float32')} | "
            f"{fmt(r['tokens_per_s'])} | {step['median'] * 1e3:.1f} ({step['min'] * 1e3:.1f}–"
            f"{step['max'] * 1e3:.1f}) | {fmt(r.get('first_step_s'), '.1f')} | {use} |"
        )
        if r["impl"] == "tunix_lite" or not r["impl"].startswith(
            "tunix_lite"
        ):  # variants: not in ratios
            key = (r["row"], "jax" if r["impl"] == "tunix_lite" else "torch")
            best[key] = max(best.get(key, 0.0), r["tokens_per_s"])
    ratios = [
        "",
        "| row | tunix_lite (default settings, faster weights dtype) / torch |",
        "|---|---:|",
    ]
    for row in dict.fromkeys(r["row"] for r in records):
        if (row, "jax") in best and (row, "torch") in best:
            ratios.append(f"| {row} | {best[row, 'jax'] / best[row, 'torch']:.2f}× |")
    return "\n".join(lines + ratios)


def compile_cache_text(records: list[dict]) -> str:
    runs = [r for r in records if r["row"] == "compile_cache"]
    failed = [r["error"] for r in runs if "error" in r]
    if len(runs) != 2 or failed:
        return f"Compile cache: not measured ({'; '.join(failed) or 'not run'})."
    cold, warm = runs
    return (
        f"First training step of sft_full_270m (model: {cold['workload']}) in a fresh process: "
        f"{cold['first_step_s']:.1f} s with an "
        f"empty persistent compilation cache, {warm['first_step_s']:.1f} s when a second process "
        "finds "
        f"the first one's programs in it (steady step {warm['step_s']['median'] * 1e3:.0f} ms)."
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shapes (CI, CPU): checks the script"
    )
    parser.add_argument("--only", default=None, help="comma-separated rows (default: all)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per row")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (the compile)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per child process")
    parser.add_argument(
        "--budget",
        type=float,
        default=float("inf"),
        help="seconds for the whole run: rows left when it is spent are listed as not run",
    )
    parser.add_argument(
        "--write-results", action="store_true", help="write benchmarks/RESULTS_GPU.md"
    )
    parser.add_argument("--json", default=None, help="also write every record to this file")
    parser.add_argument(
        "--from-json",
        default=None,
        help="tables from --json files of earlier runs (comma-separated: a run cut short by "
        "--budget, then --only the rows it did not reach, on the same machine)",
    )
    parser.add_argument("--side", choices=["jax", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:  # a child: one side of some rows
        if (
            args.cache_dir
        ):  # the compile_cache row: XLA's persistent cache in a directory of the parent's
            from tunix_lite import compile_cache

            compile_cache.enable(args.cache_dir)
        run = run_jax if args.side == "jax" else run_torch
        for row in args.row.split(","):
            for record in run(row, args.smoke, args.steps, args.warmup):
                common.emit(record)
        return 0

    if (
        args.from_json
    ):  # the tables again from saved records: one run, or a run cut short and its rest
        report(
            merge([json.loads(Path(f).read_text()) for f in args.from_json.split(",")]),
            args,
            seconds=None,
        )
        return 0
    rows = args.only.split(",") if args.only else (SMOKE_ROWS if args.smoke else ORDER)
    unknown = [row for row in rows if row.split("+")[0] not in [*ROWS, "compile_cache"]]
    if unknown:
        parser.error(f"--only: unknown rows {unknown}; choose from {', '.join(ORDER)}")
    start = time.perf_counter()
    args.deadline = start + args.budget
    records = []

    def keep(
        new: list[dict],
    ) -> None:  # saved after every child: a run cut short keeps what it measured
        records.extend(new)
        if args.json:
            Path(args.json).write_text(json.dumps(records, indent=1))

    if args.smoke:  # one process per side: the smoke checks the code paths, not the timings
        timed = [row for row in rows if row in ROWS]
        jax_rows = ["peak", *timed, *(row for row in rows if "+" in row)]
        keep(child("jax", ",".join(jax_rows), args) + child("torch", ",".join(timed), args))
    else:  # one process per side and row: each row's first step its own compile, memory its own
        keep(child("jax", "peak", args))
    records[0] |= dict(steps=args.steps, warmup=args.warmup)
    if "error" in records[0]:
        print(f"peak measurement failed: {records[0]['error']}", file=sys.stderr)
        return 1
    for row in rows:
        if row == "compile_cache":
            with tempfile.TemporaryDirectory() as cache:
                for _ in range(2):
                    keep(
                        [
                            r | dict(row="compile_cache")
                            for r in child("jax", "sft_full_270m", args, cache)
                        ]
                    )
        elif not args.smoke:
            keep(child("jax", row, args) + (child("torch", row, args) if row in ROWS else []))
    report(records, args, seconds=time.perf_counter() - start)
    failed = [r for r in records if "error" in r and not r["error"].startswith("n/a")]
    return 1 if failed and args.smoke else 0


def merge(runs: list[list[dict]]) -> list[dict]:
    """One table's records from several runs on one machine: the first run's peak (the MFU
    denominator for all) and, per row, the records of the last run that measured it (else its last
    "not run" records)."""
    by_row: dict[str, list[dict]] = {}
    for run in runs:
        for row in dict.fromkeys(r["row"] for r in run if r["row"] != "peak"):
            records = [r for r in run if r["row"] == row]
            if any("error" not in r for r in records) or not any(
                "error" not in r for r in by_row.get(row, [])
            ):
                by_row[row] = records
    return [runs[0][0]] + [r for records in by_row.values() for r in records]


def report(records: list[dict], args, seconds: float | None) -> None:
    """Print the tables; with --write-results, write them to RESULTS_GPU.md under a header."""
    peak = records[0]
    text = table(records, peak)
    if any(r["row"] == "compile_cache" for r in records):
        text += "\n\n" + compile_cache_text(records)
    print(text)
    if not args.write_results:
        return
    jax_versions = next((r["versions"] for r in records if r.get("impl") == "tunix_lite"), {})
    torch_versions = next(
        (r["versions"] for r in records if r.get("impl", "").startswith("torch")), {}
    )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(peak.get("time")))
    took = f" in {seconds:.0f} s" if seconds else ""
    header = [
        "# Accelerator benchmark results",
        "",
        f"Generated by `python benchmarks/gpu.py --write-results` on {when}{took}.",
        "",
        f"- device: {peak['device']} ({peak['backend']})",
        f"- measured here: bfloat16 matmul {peak['matmul_flops'] / 1e12:,.0f} TFLOP/s (the MFU "
        "denominator), "
        f"copy bandwidth {peak['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write; decode's bound)",
        f"- tunix_lite side: {json.dumps(jax_versions)}; torch side: {json.dumps(torch_versions)}",
        f"- settings: {peak.get('warmup', args.warmup)} warm-up + "
        f"{peak.get('steps', args.steps)} timed steps "
        "per row (rollouts: 1 + 2), each side of each row in a "
        "fresh process; random weights, float32 parameters and AdamW, bfloat16 compute (the "
        "script's docstring)",
        "",
    ]
    path = HERE / "RESULTS_GPU.md"
    notes = (
        path.read_text().partition("\n## Notes")[2] if path.exists() else ""
    )  # written by hand: kept
    path.write_text(
        "\n".join(header) + "\n" + text + "\n" + (f"\n## Notes{notes}" if notes else "")
    )


if __name__ == "__main__":
    sys.exit(main())
