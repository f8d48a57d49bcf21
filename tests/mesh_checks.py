"""The fake-device checks behind tests/test_sharding*.py, one process per test file (jax fixes the device count
when it starts):

    XLA_FLAGS="--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0" \
        JAX_PLATFORMS=cpu python tests/mesh_checks.py OUT.json [checks]

(the flags of tests/conftest.py: the last one only makes compiling faster).

Each check runs in turn and records its measurements (or its error) in OUT.json; the tests read them. A 1-layer
Gemma-like model (8 query heads, ONE kv head: the MQA layout) keeps every compile small; each strategy's step is
compiled once, ahead of time, so its HLO can be read, and the steps reuse that compile.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback

import jax
import numpy as np
import optax
from flax import nnx

from tunix_lite import planner, sharding
from tunix_lite.lora import apply_lora, lora_layers
from tunix_lite.models import Transformer, get_config
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import Trainer

CONFIG = get_config("tiny").replace(num_layers=1, vocab_size=256, embed_dim=128, num_heads=8, num_kv_heads=1,
                                    head_dim=32, mlp_dim=256)
LR = 0.5  # plain SGD (momentum starts at zero): step 1 moves every parameter by exactly -LR * grad
STRATEGIES = ("dp", "fsdp", "tp", "fsdp_tp")
RESULTS: dict = {}


def make_batch(rows: int, seed: int) -> dict:
    tokens = np.random.default_rng(seed).integers(0, CONFIG.vocab_size, (rows, 17)).astype(np.int32)
    weights = np.ones((rows, 16), np.float32)
    weights[:, :4] = 0.0  # a prompt that does not train
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": weights,
            "positions": np.tile(np.arange(16, dtype=np.int32), (rows, 1)),
            "segment_ids": np.ones((rows, 16), np.int32)}


BATCHES = [make_batch(16, 1), make_batch(16, 2), make_batch(10, 3)]  # the short one is padded: no second compile


def make_pairs(rows: int, seed: int) -> dict:
    """DPO rows [rows, 2, T]: a chosen and a rejected completion after the same 4-token prompt."""
    chosen, rejected = make_batch(rows, seed), make_batch(rows, seed + 100)
    for key in ("inputs", "targets"):
        rejected[key][:, :4] = chosen[key][:, :4]
    return {key: np.stack([chosen[key], rejected[key]], axis=1) for key in chosen}


PAIRS = [make_pairs(16, 1), make_pairs(16, 2), make_pairs(10, 3)]


def full_model():
    return Transformer(CONFIG, rngs=nnx.Rngs(0)), None, nnx.Param, lm_loss


def dpo_model():
    """Full fine-tuning on DPO's own loss (sigmoid, lm head on a completion window) against a frozen reference
    copy: the reference's forward runs inside the step, on the mesh, by the same rules."""
    from tunix_lite.preference.dpo import PreferenceLoss

    model = Transformer(CONFIG, rngs=nnx.Rngs(0))
    reference = nnx.clone(model)
    reference.eval()
    return model, reference, nnx.Param, PreferenceLoss(beta=0.1, completion_window=12)


def distill_model():
    """A 1-block student distilled from a 2-block teacher (the trainer's `frozen`): logit KD plus attention transfer
    from the teacher's second block, so the teacher's hidden states and attention maps are computed on the mesh."""
    from tunix_lite.distill.objective import DistillLoss

    teacher = Transformer(CONFIG.replace(num_layers=2), rngs=nnx.Rngs(5))
    teacher.eval()
    loss = DistillLoss(alpha=0.5, temperature=2.0, attention_weight=0.5, layer_map=((0, 1),))
    return Transformer(CONFIG, rngs=nnx.Rngs(0)), teacher, nnx.Param, loss


def make_rollout_rows(prompts: int, seed: int, group: int = 4) -> dict:
    """GRPO rows as the driver builds them from a rollout (`rollout_rows`, group advantages), from fixed tokens
    instead of sampled ones: `prompts` prompts of 3-6 tokens x `group` completions of 2-8 tokens, in rows of 16."""
    from tunix_lite.data.rollouts import rollout_rows
    from tunix_lite.rl.advantages import ESTIMATORS
    from tunix_lite.sampler import GenerateOutput

    rng = np.random.default_rng(seed)
    R, V = prompts * group, CONFIG.vocab_size
    prompt_lengths = np.repeat(rng.integers(3, 7, prompts), group)
    prompt_tokens = np.zeros((R, 8), np.int32)
    for r, n in enumerate(prompt_lengths):
        prompt_tokens[r, 8 - n:] = rng.integers(1, V, n)
    lengths = rng.integers(2, 9, R)
    tokens = np.where(np.arange(8) < lengths[:, None], rng.integers(1, V, (R, 8)), 0).astype(np.int32)
    out = GenerateOutput([""] * R, tokens, np.zeros((R, 8), np.float32), lengths, prompt_tokens, prompt_lengths,
                         group)
    rewards = rng.integers(0, 2, R).astype(np.float32)
    return rollout_rows(out, 16, 0) | {"advantages": np.asarray(ESTIMATORS["grpo"](rewards, group))}


def qlora_policy():
    """A QLoRA policy (nf4 base) with non-zero adapters."""
    model = Transformer(CONFIG, rngs=nnx.Rngs(0))
    apply_lora(model, rank=4, alpha=8.0, quantize="nf4", rngs=nnx.Rngs(1))
    for i, (_, layer) in enumerate(lora_layers(model)):
        layer.lora_b.set_value(0.05 * jax.random.normal(jax.random.key(i), layer.lora_b.shape))
    return model


def make_rollout_batches() -> list[dict]:
    """3 batches of rollout rows (16, 16 and a short 8) with old log-probs: the policy's own (what the driver
    computes when a rollout feeds several updates, `old_log_probs`) moved by up to +-0.4, as if sampled a few updates
    ago, so ratios fall on both sides of the clip range."""
    from tunix_lite.rl.rollouts import old_log_probs

    policy, batches = qlora_policy(), []
    for prompts, seed in ((4, 1), (4, 2), (2, 3)):
        rows = make_rollout_rows(prompts, seed)
        noise = np.random.default_rng(seed).uniform(-0.4, 0.4, rows["weights"].shape)
        batches.append(rows | {"old_logprobs": (old_log_probs(policy, rows) + noise) * rows["weights"]})
    return batches


def grpo_qlora_model():
    """GRPO's loss (DAPO's clip-higher, a k3 KL with beta > 0) on a QLoRA policy, its frozen reference the base view
    sharing every base array, as the driver builds it (`reference_policy`)."""
    from tunix_lite.rl.grpo import GRPOConfig, loss_from_config
    from tunix_lite.training.inputs import reference_policy

    model = qlora_policy()
    config = GRPOConfig(model="unused", beta=0.04, epsilon_high=0.28, max_new_tokens=8, group_size=4)
    return model, reference_policy(model), nnx.LoRAParam, loss_from_config(config)


def host(tree):
    return jax.tree.map(np.asarray, tree)


def run(build, mesh, checkpoint_dir=None, batches=BATCHES):
    """Three steps (the last on a short batch) on `mesh` (None: one device). Returns what the checks compare."""
    model, frozen, wrt, loss_fn = build()
    trainer = Trainer(model, optax.sgd(LR, momentum=0.9), loss_fn, wrt=wrt, frozen=frozen, micro_batches=2,
                      mesh=mesh)
    out = {}
    if mesh is not None:
        start = time.perf_counter()
        compiled = trainer.lower(batches[0]).compile()
        out["compile_s"] = time.perf_counter() - start
        out["collectives"] = planner.list_collectives(compiled.as_text())
    before = host(nnx.state(trainer.model, wrt))
    step1 = trainer.step(batches[0])
    after1 = host(nnx.state(trainer.model, wrt))
    out["loss"] = float(step1["loss"])
    out["metrics"] = {k: float(v) for k, v in step1.items()}
    out["grads"] = jax.tree.map(lambda b, a: (b - a) / LR, before, after1)
    if checkpoint_dir is not None:
        from tunix_lite.training.checkpoint import Checkpoints

        checkpoints = Checkpoints(checkpoint_dir, every=1, state_filter=nnx.Any(wrt, nnx.RngState))
        trainer.save(checkpoints, force=True)
        checkpoints.wait()
    out["loss2"] = float(trainer.step(batches[1])["loss"])
    out["params2"] = host(nnx.state(trainer.model, wrt))
    out["loss3"] = float(trainer.step(batches[2])["loss"])
    out["params3"] = host(nnx.state(trainer.model, wrt))
    out["trainer"] = trainer
    return out


def max_error(a, b) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def check_layout(trainer, mesh, owners=("model", "optimizer")) -> list[str]:
    """Every variable of the model and of the optimizer state (or of the other `owners`) is laid out as the rules
    say."""
    units = sharding.head_units(trainer.model)
    wrong = []
    for owner in (getattr(trainer, name) for name in owners):
        for path, var in nnx.to_flat_state(nnx.state(owner)):
            value = var.get_value()
            expected = jax.sharding.NamedSharding(mesh, sharding.variable_spec(var, mesh, units))
            if not value.sharding.is_equivalent_to(expected, value.ndim):
                wrong.append(f"{'.'.join(map(str, path))}: {value.sharding.spec} != {expected.spec}")
    return wrong


def spec_of(trainer, path: str) -> str:
    value = nnx.to_flat_state(nnx.state(trainer.model))
    return next(str(v.get_value().sharding.spec) for p, v in value if ".".join(map(str, p)) == path)


def check_strategies():
    ckpt = tempfile.mkdtemp()
    for name, build, batches in (("sft", full_model, BATCHES), ("grpo_qlora", grpo_qlora_model,
                                                                 make_rollout_batches())):
        ref = run(build, None, batches=batches)
        for strategy in STRATEGIES:
            mesh = sharding.resolve_mesh(strategy)
            got = run(build, mesh, checkpoint_dir=f"{ckpt}/{name}" if strategy == "fsdp" else None, batches=batches)
            trainer = got["trainer"]
            RESULTS[f"{name}/{strategy}"] = {
                "mesh": dict(mesh.shape), "compile_s": got["compile_s"],
                "loss_error": abs(got["loss"] - ref["loss"]), "loss2_error": abs(got["loss2"] - ref["loss2"]),
                "short_batch_loss_error": abs(got["loss3"] - ref["loss3"]),
                "grad_error": max_error(got["grads"], ref["grads"]),
                "grad_scale": max(float(np.max(np.abs(g))) for g in jax.tree.leaves(ref["grads"])),
                "param_error": max(max_error(got["params2"], ref["params2"]),
                                   max_error(got["params3"], ref["params3"])),
                "layout_errors": check_layout(trainer, mesh),
                "frozen_layout_errors": check_layout(trainer, mesh, owners=("frozen",)) if trainer.frozen else [],
                "metrics": got["metrics"],
                "collectives": got["collectives"],
                "k_proj": spec_of(trainer, "layers.0.attn.k_proj.kernel" if name == "sft"
                                  else "layers.0.attn.k_proj.codes"),
                "q_proj": spec_of(trainer, "layers.0.attn.q_proj.kernel" if name == "sft"
                                  else "layers.0.attn.q_proj.codes"),
            }
            if name == "grpo_qlora":  # the reference view still shares the sharded base (no second copy)
                base = trainer.model.layers[0].mlp.up_proj.codes.get_value()
                RESULTS[f"{name}/{strategy}"]["frozen_shares_base"] = \
                    trainer.frozen.layers[0].mlp.up_proj.codes.get_value() is base
            del trainer, got
        # resume the FSDP run's step-1 checkpoint on another mesh shape; its step 2 must equal the uninterrupted one
        from tunix_lite.training.checkpoint import Checkpoints

        mesh = sharding.resolve_mesh("fsdp_tp")  # a new Trainer on an already compiled layout: no new compile
        model, frozen, wrt, loss_fn = build()
        trainer = Trainer(model, optax.sgd(LR, momentum=0.9), loss_fn, wrt=wrt, frozen=frozen, micro_batches=2,
                          mesh=mesh)
        meta = trainer.restore(Checkpoints(f"{ckpt}/{name}", every=1, state_filter=nnx.Any(wrt, nnx.RngState)))
        loss2 = float(trainer.step(batches[1])["loss"])
        RESULTS[f"{name}/resume"] = {"from": "fsdp=8", "to": dict(mesh.shape), "step": meta["step"],
                                     "loss2_error": abs(loss2 - ref["loss2"]),
                                     "param_error": max_error(host(nnx.state(trainer.model, wrt)), ref["params2"]),
                                     "layout_errors": check_layout(trainer, mesh)}


def check_frozen_losses():
    """DPO (pairs [B, 2, T], a frozen reference copy) and distillation (a bigger frozen teacher) with their own
    losses under every strategy, against one device (GRPO with its frozen reference: check_strategies)."""
    for name, build, batches in (("dpo", dpo_model, PAIRS), ("distill", distill_model, BATCHES)):
        ref = run(build, None, batches=batches)
        for strategy in STRATEGIES:
            mesh = sharding.resolve_mesh(strategy)
            got = run(build, mesh, batches=batches)
            RESULTS[f"{name}/{strategy}"] = {
                "loss": got["loss"], "metrics": got["metrics"], "loss_error": abs(got["loss"] - ref["loss"]),
                "loss2_error": abs(got["loss2"] - ref["loss2"]),
                "short_batch_loss_error": abs(got["loss3"] - ref["loss3"]),
                "grad_error": max_error(got["grads"], ref["grads"]),
                "grad_scale": max(float(np.max(np.abs(g))) for g in jax.tree.leaves(ref["grads"])),
                "param_error": max(max_error(got["params2"], ref["params2"]),
                                   max_error(got["params3"], ref["params3"])),
                "layout_errors": check_layout(got["trainer"], mesh),
                "frozen_layout_errors": check_layout(got["trainer"], mesh, owners=("frozen",)),
            }
            del got


def check_planner():
    """The planner's memory per device against XLA's own plan for the tiny model's full step under each strategy,
    at 8 rows per device (with fewer XLA:CPU keeps less than the planner counts, on one device too)."""
    for strategy in STRATEGIES:
        mesh = sharding.resolve_mesh(strategy)
        rows = 8 * mesh.shape["data"] * mesh.shape["fsdp"]
        RESULTS[f"planner/{strategy}"] = planner.against_xla(get_config("tiny"), batch=rows, seq=128, mesh=mesh)


def check_rollouts():
    """A LoRA policy trained on 4 devices, its rollout copy on the other 4 synced after a step (adapters only), and
    the trainer's own weights sampled where they are (colocated): all sample what one device samples."""
    from tunix_lite.loading import ASSETS
    from tunix_lite.rl.engine import WeightSync
    from tunix_lite.sampler import Sampler
    from tunix_lite.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_file(ASSETS / "tiny" / "tokenizer.model")
    devices = jax.devices()
    train_mesh = sharding.make_mesh(fsdp=4, devices=devices[:4])
    rollout_mesh = sharding.make_mesh(data=2, tensor=2, devices=devices[4:])
    model = Transformer(CONFIG, rngs=nnx.Rngs(0))
    apply_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(1))
    trainer = Trainer(model, optax.sgd(LR), lm_loss, wrt=nnx.LoRAParam, mesh=train_mesh)
    sync = WeightSync(trainer.model, rollout_mesh, wrt=nnx.LoRAParam, max_bytes=64 * 2**10)
    first_copy = dict(sync.last)
    trainer.step(BATCHES[0])
    sent = sync()
    adapter_bytes = sum(x.nbytes for x in jax.tree.leaves(nnx.state(trainer.model, nnx.LoRAParam)))
    reference = nnx.merge(nnx.graphdef(trainer.model), host(nnx.state(trainer.model)))  # one device, host copy
    prompts = [[2, 10, 11, 12], [2, 20, 21, 22, 23, 24], [2, 30]]  # 3 rows: padded to the shards of each mesh
    outputs = {}
    for where, sampler in (("one_device", Sampler(reference, tokenizer, stop_ids=(), bucket=8)),
                           ("colocated", Sampler(trainer.model, tokenizer, stop_ids=(), bucket=8)),
                           ("split", Sampler(sync.model, tokenizer, stop_ids=(), bucket=8, mesh=rollout_mesh))):
        sampled = sampler.generate(prompts, 6, num_samples=2, temperature=1.0, seed=3)
        outputs[where] = (sampled.tokens, sampled.logprobs)
    cache_spec = None
    with sharding.use_mesh(rollout_mesh):  # the KV cache layout the sampler pins on the rollout mesh
        from tunix_lite.models.transformer import KVCache

        cache = jax.jit(lambda: jax.tree.map(lambda x: sharding.constrain(x, sharding.CACHE_BKSH),
                                             KVCache.init(CONFIG, 4, 8).k))()
        cache_spec = str(cache[0].sharding.spec)
    ref = outputs["one_device"]
    RESULTS["rollouts"] = {
        "first_copy": first_copy, "sync": sent, "adapter_bytes": adapter_bytes,
        "rollout_devices": sorted(d.id for d in sync.model.layers[0].mlp.up_proj.kernel.get_value().devices()),
        "trainer_devices": sorted(d.id for d in trainer.model.layers[0].mlp.up_proj.kernel.get_value().devices()),
        "equal": {where: bool(np.array_equal(o[0], ref[0])) for where, o in outputs.items()},
        "logprob_error": {where: float(np.max(np.abs(o[1] - ref[1]))) for where, o in outputs.items()},
        "cache_spec": cache_spec,
    }


def first_token_parity(prompts, completions, completion_ids):
    """A reward that varies inside most groups of a random policy's samples."""
    return [float(ids[0] % 2) for ids in completion_ids]


def check_grpo_split():
    """run_grpo twice with one seed on a random 2-block model: colocated (mesh: null, the sampler reading the
    trainer's own weights on one device) and split (`rollout_mesh`: training on fsdp 4 = devices 0-3, sampling on
    data 2 x tensor 2 = devices 4-7 from a copy that every parameter is sent to before each rollout). The sampler's
    draws do not depend on the layout, so both runs sample the same tokens: rewards and lengths are equal exactly,
    losses, KL and the trained weights to float32 noise (the split trainer sums in another order).

    Full fine-tuning, not LoRA: with AdamW, a direction whose gradient is exactly 0 in exact arithmetic (the LoRA A
    matrices while B = 0) gets float noise divided by its own size, a step of ~lr in a layout-dependent direction."""
    import contextlib
    import io
    import shutil

    from tunix_lite.loading import ASSETS
    from tunix_lite.rl import grpo, setup
    from tunix_lite.rl.engine import SamplerEngine
    from tunix_lite.rl.rewards import Rewards
    from tunix_lite.weights.hf import save_hf_model

    syncs = {"colocated": [], "split": []}

    class WatchedEngine(SamplerEngine):  # records what each sync moved, and whether the copy then equals the trainer
        def sync_weights(self, model):
            super().sync_weights(model)
            copy = self.weights.model
            syncs[where].append({
                "bytes": self.weights.last["bytes"],
                "error": max_error(host(nnx.state(model, nnx.Param)), host(nnx.state(copy, nnx.Param))),
                "devices": sorted(d.id for d in copy.layers[0].mlp.up_proj.kernel.get_value().devices())})

    policy = tempfile.mkdtemp()
    config = get_config("tiny").replace(num_layers=2, embed_dim=128, mlp_dim=256, num_heads=4, head_dim=32)
    save_hf_model(Transformer(config, rngs=nnx.Rngs(0)), policy)
    shutil.copy(ASSETS / "tiny" / "tokenizer.model", policy)
    base = dict(model=policy, n_train=16, n_validation=8, seq_len=80, max_new_tokens=8, batch_size=4, group_size=4,
                steps=3, warmup_steps=0, learning_rate=0.01, beta=0.04, n_accuracy=0, n_test=0, eval_every=0,
                log_every=1, seed=3)
    runs, printed = {}, {}
    setup.SamplerEngine = WatchedEngine  # where rl_setup builds the engine
    try:
        for where, meshes in (("colocated", {}), ("split", {"mesh": "fsdp", "rollout_mesh": {"data": 2, "tensor": 2}})):
            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                runs[where] = grpo.run_grpo(grpo.GRPOConfig(**base, **meshes),
                                            rewards=Rewards({"parity": first_token_parity}))
            printed[where] = [line for line in text.getvalue().splitlines() if line.startswith("rollouts on")]
    finally:
        setup.SamplerEngine = SamplerEngine
    colocated, split = (runs[w].history for w in ("colocated", "split"))
    params = [host(nnx.state(runs[w].model, nnx.Param)) for w in ("colocated", "split")]
    RESULTS["grpo/split"] = {
        "steps": [h["step"] for h in split],
        "same_rollouts": all(a[k] == b[k] for a, b in zip(colocated, split) for k in ("reward", "length")),
        "zero_signal_groups": [h["zero_signal_groups"] for h in split],
        "loss": [h["loss"] for h in split], "kl": [h["kl"] for h in split],
        "loss_error": max(abs(a["loss"] - b["loss"]) for a, b in zip(colocated, split)),
        "kl_error": max(abs(a["kl"] - b["kl"]) for a, b in zip(colocated, split)),
        "param_error": max_error(*params),
        "param_change": max_error(params[1], host(nnx.state(Transformer(config, rngs=nnx.Rngs(0)), nnx.Param))),
        "param_bytes": sum(x.nbytes for x in jax.tree.leaves(params[1])),
        "printed": printed, "syncs": syncs,
        "trainer_devices": sorted(d.id for d in runs["split"].model.layers[0].mlp.up_proj.kernel.get_value().devices()),
    }


def check_grpo_async():
    """run_grpo on the split mesh of check_grpo_split with `max_staleness: 1`: rollout k is sampled on devices 4-7
    from the weights after max(0, k - 1) updates, on the producer's thread, while the trainer (devices 0-3) steps.
    Records each step's policy version and staleness, and each weight sync: what it moved, where to, and whether
    the rollout copy then equals the snapshot it was sent (the weights of that version, not the live ones)."""
    import shutil

    from tunix_lite.loading import ASSETS
    from tunix_lite.rewards.functions import Rewards
    from tunix_lite.rl import grpo, setup
    from tunix_lite.rl.engine import SamplerEngine
    from tunix_lite.weights.hf import save_hf_model

    syncs = []

    class WatchedEngine(SamplerEngine):
        def sync_weights(self, model):
            super().sync_weights(model)
            copy = self.weights.model
            syncs.append({
                "bytes": self.weights.last["bytes"],
                "error": max_error(host(nnx.state(model, nnx.Param)), host(nnx.state(copy, nnx.Param))),
                "devices": sorted(d.id for d in copy.layers[0].mlp.up_proj.kernel.get_value().devices())})

    policy = tempfile.mkdtemp()
    config = get_config("tiny").replace(num_layers=1, embed_dim=64, mlp_dim=128, num_heads=2, head_dim=32)
    save_hf_model(Transformer(config, rngs=nnx.Rngs(0)), policy)
    shutil.copy(ASSETS / "tiny" / "tokenizer.model", policy)
    run_config = grpo.GRPOConfig(
        model=policy, n_train=16, n_validation=8, seq_len=80, max_new_tokens=8, batch_size=4, group_size=4,
        steps=4, warmup_steps=0, learning_rate=0.01, beta=0.0, n_accuracy=0, n_test=0, eval_every=0, log_every=1,
        seed=3, mesh="fsdp", rollout_mesh={"data": 2, "tensor": 2}, max_staleness=1,
        rollout_correction="token_truncate")
    setup.SamplerEngine = WatchedEngine  # where rl_setup builds the engine
    try:
        run = grpo.run_grpo(run_config, rewards=Rewards({"parity": first_token_parity}), verbose=False)
    finally:
        setup.SamplerEngine = SamplerEngine
    RESULTS["grpo/async"] = {
        "policy_version": [h["policy_version"] for h in run.history],
        "staleness": [h["staleness"] for h in run.history],
        "kl_k3": [h["mismatch/kl_k3"] for h in run.history],
        "loss": [h["loss"] for h in run.history], "syncs": syncs,
        "param_bytes": sum(x.nbytes for x in jax.tree.leaves(host(nnx.state(run.model, nnx.Param)))),
    }


def main(path: str, only: list[str]) -> None:
    assert jax.device_count() == 8, jax.devices()
    tempfile.tempdir = os.path.dirname(os.path.abspath(path))  # the checks' folders: the test's tmp_path
    start = time.perf_counter()
    for check in (check_strategies, check_frozen_losses, check_rollouts, check_grpo_split, check_grpo_async,
                  check_planner):
        if only and check.__name__ not in only:
            continue
        t = time.perf_counter()
        try:
            check()
        except Exception:  # recorded, so the other checks still run and report
            RESULTS[f"error/{check.__name__}"] = traceback.format_exc()
        RESULTS[f"seconds/{check.__name__}"] = time.perf_counter() - t
    RESULTS["seconds/total"] = time.perf_counter() - start
    with open(path, "w") as f:
        json.dump(RESULTS, f, indent=1, default=lambda x: x.tolist() if hasattr(x, "tolist") else str(x))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
