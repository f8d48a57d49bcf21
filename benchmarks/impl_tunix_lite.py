"""tunix_lite's side of the benchmarks: one workload of `common.WORKLOADS` per call, one `RESULT` line.

    python benchmarks/impl_tunix_lite.py --workload sft_full --steps 5 --warmup 2

Training workloads (sft_*, gemma_*): `Trainer.step` on one fixed batch of random tokens (seed 0, every
weight 1), plain `optax.adamw` per `common.OPTIMIZER`. The llama shape is a tunix_lite `ModelConfig`
built from `common.SHAPES["llama"]` (SwiGLU, untied lm head, no sandwich norm, random init seed 0);
the gemma workloads load the real Gemma 3 270M weights. `step` returns floats, so each call blocks.

Distillation workloads (distill_online, distill_cached): logit KD of the llama teacher (random init, seed 0,
frozen) into the llama_half student (seed 1) on one fixed batch (as sft_full), plain AdamW. online: the library's
`DistillLoss` with the teacher as the step's `frozen` argument (its forward runs inside every step). cached: the
teacher's full-vocabulary float32 logits computed once before timing and carried in the batch, as the workload
defines it, read by `losses.kd_loss` (the library's own cache keeps only the top k: `tunix_lite.distill.cache`).

Generation workloads (generate_*): `Sampler.generate` greedy with stop_ids=[-1] (no early stop, every
row makes exactly `new_tokens`) on random prompt ids (seed 0, `prompt` tokens, no BOS added). tokens/s
counts generated tokens per second of a whole generate call (prefill included); the extra fields
`prefill_tokens_per_s` (prompt tokens / a 1-token generate call) and `decode_tokens_per_s`
(batch * (new_tokens - 1) / (full call - 1-token call)) split it, the convention every side follows.
Rollout-group workloads (rollout_group_*): the same runner with one prompt and `num_samples=group` at temperature
1.0, so the group shares one prefill and its KV prefix (rows = group). A workload's `weights_dtype` goes to the
Sampler (the *_bf16 workloads: a bfloat16 copy of the weights, computing in bfloat16).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

IMPL = "tunix_lite"
# Gemma's 262k vocabulary: the [B*T, V] float32 logits (537 MB at 4 x 128) are never formed; see
# tunix_lite.training.losses.chunked_token_log_probs. The llama shape (8k vocabulary) keeps the plain path.
LARGE_VOCAB, LOGITS_CHUNK = 65536, int(os.environ.get("BENCH_LOGITS_CHUNK", 256))


class RssSampler:
    """Peak resident memory while the steps run, sampled every 10 ms from /proc. The process's overall
    peak (common.peak_rss_mb) also holds the load: reading Gemma's checkpoint briefly needs ~2x its size."""

    def __init__(self):
        self.peak, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
        while not self._stop.wait(0.01):
            with open("/proc/self/statm") as f:
                self.peak = max(self.peak, int(f.read().split()[1]) * page_mb)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def llama_config(shape: dict):
    from tunix_lite.models.config import ModelConfig

    return ModelConfig(
        family="llama3", vocab_size=shape["vocab"], embed_dim=shape["d_model"], num_layers=shape["layers"],
        num_heads=shape["heads"], num_kv_heads=shape["kv_heads"], head_dim=shape["head_dim"],
        mlp_dim=shape["ffn"], activation="silu", norm_eps=shape["norm_eps"], rope_base=shape["rope_theta"],
        tie_embeddings=shape["tied"], max_seq_len=4096)


def shape_of(config) -> dict:
    """A tunix_lite config in common.SHAPES's terms (for the FLOP count)."""
    return dict(vocab=config.vocab_size, d_model=config.embed_dim, layers=config.num_layers,
                heads=config.num_heads, kv_heads=config.num_kv_heads, head_dim=config.head_dim,
                ffn=config.mlp_dim)


def build_model(name: str, seed: int = 0):
    """(model, tokenizer or None) for a workload's shape: random llama-like, or a tunix_lite checkpoint."""
    if name in common.SHAPES:
        from flax import nnx

        from tunix_lite.models.transformer import Transformer

        return Transformer(llama_config(common.SHAPES[name]), rngs=nnx.Rngs(seed)), None
    from tunix_lite.loading import load

    return load(name)


def train_setup(w: dict):
    """(Trainer, batch) for a training workload: the model, LoRA/QLoRA, AdamW and one fixed batch."""
    import optax
    from flax import nnx

    from tunix_lite.lora import apply_lora
    from tunix_lite.models import set_training_options
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import Trainer

    model, _ = build_model(w["shape"])
    config = model.config
    if config.vocab_size >= LARGE_VOCAB:  # the library's advice for large vocabularies: score tokens in chunks
        set_training_options(model, logits_chunk=LOGITS_CHUNK)
    if w.get("lora_rank"):
        # common.LORA_TARGETS are the HF names; tunix_lite's modules carry the same names under attn./mlp.
        targets = [rf"\.{t}$" for t in common.LORA_TARGETS]
        apply_lora(model, rank=w["lora_rank"], alpha=w["lora_alpha"], targets=targets,
                   quantize=w.get("quantize"), rngs=nnx.Rngs(1))
    o = common.OPTIMIZER
    tx = optax.adamw(w["lr"], b1=o["b1"], b2=o["b2"], eps=o["eps"], weight_decay=o["weight_decay"])
    trainer = Trainer(model, tx, lm_loss, wrt=nnx.LoRAParam if w.get("lora_rank") else nnx.Param)

    return trainer, random_batch(config.vocab_size, w["batch"], w["seq"])


def random_batch(vocab: int, B: int, T: int) -> dict:
    """One fixed batch of random tokens (seed 0), every position trained."""
    import jax.numpy as jnp
    import numpy as np

    tokens = np.random.default_rng(0).integers(0, vocab, (B, T + 1), dtype=np.int32)
    return dict(inputs=jnp.asarray(tokens[:, :-1]), targets=jnp.asarray(tokens[:, 1:]),
                weights=jnp.ones((B, T), jnp.float32),
                positions=jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)))


def run_train(name: str, w: dict, steps: int, warmup: int) -> dict:
    import jax
    from flax import nnx

    trainer, batch = train_setup(w)
    model, (B, T) = trainer.model, batch["inputs"].shape
    with RssSampler() as rss:
        # step() returns without waiting for the device; reading the loss waits, as the peers' steps do
        first, times = common.time_steps(lambda: float(trainer.step(batch)["loss"]), steps, warmup)
    trained = sum(x.size for x in jax.tree.leaves(nnx.state(model, trainer.wrt)))
    return common.result(IMPL, name, step_times=times, tokens_per_step=B * T, first_step_s=first,
                         flops_per_step=common.train_flops_per_step(shape_of(model.config), B, T),
                         steps_peak_mb=rss.peak, trained_params=trained, final_loss=trainer.history[-1]["loss"])


def run_preference(name: str, w: dict, steps: int, warmup: int) -> dict:
    """dpo / orpo: `Trainer.step` with `PreferenceLoss` on one fixed batch of common.preference_batch's pairs, as the
    library's [pairs, 2, T] rows (prompt + chosen, prompt + rejected; T = prompt + completion). dpo: sigmoid loss with
    the reference (a clone of the initial policy, in eval mode) run inside every step as the trainer's `frozen`;
    orpo: no reference. The lm head scores only the completion window (`completion_window`): prompt positions need
    no logits, as in every library's DPO. Each pair's prompt runs once for both completions (`shared_prompt`,
    scoring.shared_prompt_features): 8 rows of 128 + 128 + 127 tokens instead of 16 rows of 256, for the policy and the
    reference alike; the MFU column still counts the 16 rows' model FLOPs, the work every side does."""
    import jax
    import numpy as np
    import optax
    from flax import nnx

    from tunix_lite.data.sft import SFTData, TruncationReport
    from tunix_lite.preference.data import PreferenceData, pair_rows
    from tunix_lite.preference.dpo import PreferenceLoss
    from tunix_lite.preference.scoring import scoring
    from tunix_lite.training.trainer import Trainer

    model, _ = build_model(w["shape"])
    dpo = w["kind"] == "dpo"
    reference = nnx.clone(model) if dpo else None
    if reference is not None:
        reference.eval()
    o = common.OPTIMIZER
    tx = optax.adamw(w["lr"], b1=o["b1"], b2=o["b2"], eps=o["eps"], weight_decay=o["weight_decay"])

    data = common.preference_batch(model.config.vocab_size, w["pairs"], w["prompt"], w["completion"])
    ids, masks = [], []
    for i in range(w["pairs"]):
        for key in ("chosen", "rejected"):
            ids.append(np.asarray(data["prompt"][i] + data[key][i], np.int32))
            masks.append(np.r_[np.zeros(w["prompt"]), np.ones(w["completion"])].astype(np.float32))
    T = w["prompt"] + w["completion"]  # T inputs hold T + 1 ids: the last slot of each row is padding
    pairs = PreferenceData(SFTData(ids, masks, T, common.PAD, TruncationReport("error", T + 1)))
    loss = PreferenceLoss("sigmoid" if dpo else "orpo", beta=w["beta"] if dpo else w["lambda_orpo"], **scoring(pairs))
    assert loss.completion_window == w["completion"] and loss.shared_prompt
    trainer = Trainer(model, tx, loss, frozen=reference)
    batch = {k: jax.numpy.asarray(v) for k, v in pair_rows(pairs, range(w["pairs"])).items()}
    with RssSampler() as rss:
        first, times = common.time_steps(lambda: jax.block_until_ready(trainer.step(batch)), steps, warmup)
    record = common.result(IMPL, name, step_times=times, tokens_per_step=common.tokens_per_step(name),
                           first_step_s=first, flops_per_step=common.workload_flops(name)["step"],
                           steps_peak_mb=rss.peak, final_loss=trainer.history[-1]["loss"],
                           loss=f"PreferenceLoss({loss.loss_type!r}, beta={loss.beta})",
                           reference="nnx.clone of the initial policy, in every step" if dpo else "none")
    record["pairs_per_s"] = w["pairs"] / record["step_s"]["median"]
    return record


class FullLogitsKD:
    """The distill_cached loss: KD against teacher logits [B, T, V] that ride in the batch."""

    def __init__(self, alpha: float, temperature: float):
        self.alpha, self.temperature = alpha, temperature

    def __call__(self, model, batch, frozen=None):
        from tunix_lite.distill.losses import kd_loss

        logits = model(batch["inputs"], batch["positions"])
        return kd_loss(logits, batch["teacher_logits"], batch["targets"], batch["weights"], alpha=self.alpha,
                       temperature=self.temperature)


def run_distill(name: str, w: dict, steps: int, warmup: int) -> dict:
    import jax
    import numpy as np
    import optax
    from flax import nnx

    from tunix_lite.distill.objective import DistillLoss
    from tunix_lite.training.trainer import Trainer

    teacher, _ = build_model(w["shape"])
    teacher.eval()
    student = build_model(w["student"], seed=1)[0]
    o = common.OPTIMIZER
    tx = optax.adamw(w["lr"], b1=o["b1"], b2=o["b2"], eps=o["eps"], weight_decay=o["weight_decay"])
    B, T = w["batch"], w["seq"]
    batch = random_batch(student.config.vocab_size, B, T)
    if w["teacher"] == "online":
        trainer = Trainer(student, tx, DistillLoss(alpha=w["alpha"], temperature=w["temperature"]), frozen=teacher)
    else:
        batch["teacher_logits"] = np.asarray(nnx.jit(teacher)(batch["inputs"], batch["positions"]))
        trainer = Trainer(student, tx, FullLogitsKD(w["alpha"], w["temperature"]))
        del teacher
    with RssSampler() as rss:
        first, times = common.time_steps(lambda: float(trainer.step(batch)["loss"]), steps, warmup)
    trained = sum(x.size for x in jax.tree.leaves(nnx.state(student, nnx.Param)))
    return common.result(IMPL, name, step_times=times, tokens_per_step=B * T, first_step_s=first,
                         flops_per_step=common.workload_flops(name)["step"], steps_peak_mb=rss.peak,
                         trained_params=trained, final_loss=trainer.history[-1]["loss"],
                         teacher=w["teacher"], teacher_logits_mb=batch.get("teacher_logits", np.zeros(0)).nbytes / 2**20)


def run_generate(name: str, w: dict, steps: int, warmup: int) -> dict:
    """generate_*: `batch` prompts, greedy. rollout_group_*: one prompt, `group` samples at `temperature` from one
    shared prefill (`num_samples`), seed 0. Both: stop_ids=[-1], so every row makes exactly `new_tokens`; the
    workload's `weights_dtype` (if any) is the Sampler's."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from tunix_lite.sampler import Sampler

    model, tokenizer = build_model(w["shape"])
    sampler = Sampler(model, tokenizer, stop_ids=[-1], weights_dtype=w.get("weights_dtype"))
    grouped = w["kind"] == "rollout"
    prompts, B = (1, w["group"]) if grouped else (w["batch"], w["batch"])  # prompts prefilled, rows decoded
    P, N = w["prompt"], w["new_tokens"]
    how = dict(num_samples=B, temperature=w["temperature"]) if grouped else {}
    ids = np.random.default_rng(0).integers(3, model.config.vocab_size, (prompts, P)).tolist()
    outputs = []
    with RssSampler() as rss:
        first, times = common.time_steps(lambda: outputs.append(sampler.generate(ids, N, **how)), steps, warmup)
        _, prefill_times = common.time_steps(lambda: sampler.generate(ids, 1, **how), steps, warmup)
    total, prefill = np.median(times), np.median(prefill_times)
    assert (outputs[-1].lengths == N).all(), outputs[-1].lengths
    weights = jax.tree.leaves(sampler.weights()[1])  # what a decode step reads: the float32 or bfloat16 copy
    weight_bytes = sum(x.nbytes for x in weights if jnp.issubdtype(x.dtype, jnp.floating))
    extra = dict(distinct_rows=len({tuple(row) for row in outputs[-1].tokens.tolist()}), prefilled_prompts=prompts,
                 temperature=w["temperature"], num_samples=B) if grouped else {}
    # prefill tokens/s counts every row's prompt (B * P), as the peers' rows do, although a group prefills once
    return common.result(IMPL, name, step_times=times, tokens_per_step=B * N, first_step_s=first,
                         steps_peak_mb=rss.peak, prefill_tokens_per_s=B * P / prefill,
                         decode_tokens_per_s=B * (N - 1) / max(total - prefill, 1e-9), weight_bytes=weight_bytes,
                         weights_dtype=w.get("weights_dtype", "float32"), **extra)


class IdsOnly:
    """The tokenizer a Sampler needs for prompts given as ids on a random model: padding ids, no text."""

    pad_id, eos_id = common.PAD, common.EOS

    def decode(self, ids, **kwargs) -> str:
        return ""


def run_grpo(name: str, w: dict, steps: int, warmup: int) -> dict:
    """grpo: one step = a rollout and one update, through the library's RL pieces. Rollout: the KV-cache `Sampler`
    on the live policy (what `tunix_lite.rl.engine.SamplerEngine` wraps), `group` samples of each prompt from one
    prefill, temperature 1.0, stop_ids=[-1] (every completion makes exactly `completion` tokens). Then
    common.parity_reward, `grpo_advantages`, `rollout_rows` and one `Trainer.step` of `grpo_loss` (clip epsilon,
    beta * k3 to a frozen clone of the initial policy run inside the step as the trainer's `frozen`,
    sequence-mean-token-mean). `rollout_tokens_per_s` = generated tokens / median rollout seconds."""
    import functools
    import time

    import numpy as np
    import optax
    from flax import nnx

    from tunix_lite.data.rollouts import rollout_rows
    from tunix_lite.rl.advantages import grpo_advantages
    from tunix_lite.rl.losses import grpo_loss
    from tunix_lite.sampler import Sampler
    from tunix_lite.training.trainer import Trainer

    model, _ = build_model(w["shape"])
    reference = nnx.clone(model)
    reference.eval()
    o = common.OPTIMIZER
    tx = optax.adamw(w["lr"], b1=o["b1"], b2=o["b2"], eps=o["eps"], weight_decay=o["weight_decay"])
    loss = functools.partial(grpo_loss, epsilon_low=w["epsilon"], epsilon_high=w["epsilon"], beta=w["beta"],
                             kl_estimator="k3", aggregation="sequence-mean-token-mean",
                             completion_tokens=w["completion"])  # as rl/grpo.py: head on completions
    trainer = Trainer(model, tx, loss, frozen=reference)
    P, N, G = w["prompt"], w["completion"], w["group"]
    prompts = common.grpo_prompts(model.config.vocab_size, w["prompts"], P)
    sampler = Sampler(model, IdsOnly(), stop_ids=[-1], bucket=P)
    rollout_s, seed = [], iter(range(10**6))

    def step():
        start = time.perf_counter()
        out = sampler.generate(prompts, N, num_samples=G, temperature=w["temperature"], seed=next(seed))
        rollout_s.append(time.perf_counter() - start)
        rewards = np.asarray([common.parity_reward(row[:n]) for row, n in zip(out.tokens, out.lengths)], np.float32)
        rows = rollout_rows(out, P + N - 1, common.PAD) | {"advantages": np.asarray(grpo_advantages(rewards, G))}
        return float(trainer.step(rows)["loss"])

    with RssSampler() as rss:
        first, times = common.time_steps(step, steps, warmup)
    rollout = float(np.median(rollout_s[-len(times):]))
    record = common.result(IMPL, name, step_times=times, tokens_per_step=common.tokens_per_step(name),
                           first_step_s=first, flops_per_step=common.workload_flops(name)["step"],
                           steps_peak_mb=rss.peak, final_loss=trainer.history[-1]["loss"],
                           rollout_tokens_per_s=w["prompts"] * G * N / rollout, rollout_s=rollout)
    record["update_s"] = record["step_s"]["median"] - rollout
    return record


def main():
    args = common.impl_args(__doc__)
    w = common.WORKLOADS[args.workload]
    runners = dict(sft=run_train, generate=run_generate, rollout=run_generate, dpo=run_preference,
                   orpo=run_preference, distill=run_distill, grpo=run_grpo)
    if w["kind"] not in runners:
        print(f"tunix_lite: workload {args.workload} ({w['kind']}) not implemented yet", file=sys.stderr)
        sys.exit(common.NOT_APPLICABLE)
    common.emit(runners[w["kind"]](args.workload, w, args.steps, args.warmup))


if __name__ == "__main__":
    main()
