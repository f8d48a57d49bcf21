"""google-tunix (PyPI `google-tunix`) on the shared benchmark workloads. Runs in benchmarks/.venvs/tunix:

    bash benchmarks/peers/setup.sh tunix
    benchmarks/.venvs/tunix/bin/python benchmarks/peers/impl_tunix.py --workload sft_full --steps 5 --warmup 2

Models come from tunix's own model code: the llama shapes are tunix's Llama3 with a shrunk ModelConfig and
random weights (tunix.models.dummy_model_creator.create_dummy_model, normal * 0.02 on every parameter); the
Gemma shapes are tunix's Gemma3 loaded with tunix's own safetensors loader from the same HF-layout
checkpoints the torch peer loads (tunix_lite/assets/tiny, ~/.cache/tunix_lite/gemma3-270m). No downloads.

- sft: PeftTrainer (one trainer for full and LoRA, its default next-token loss); LoRA as tunix does it,
  qwix.LoraProvider + qwix.apply_lora_to_model.
- dpo / orpo: tunix.sft.dpo.DPOTrainer (algorithm "dpo" with a frozen reference model, or "orpo" without one)
  on tokenized TrainingInput.
- grpo: tunix.rl.grpo.GRPOLearner on an RLCluster (actor, reference and rollout on one 1x1 CPU mesh, so the
  rollout shares the actor's weights) with the "vanilla" rollout engine (tunix's Sampler).
- distill_online: tunix.distillation.DistillationTrainer with its LogitStrategy (T^2-scaled KL + CE, alpha).
  distill_cached: not supported (the trainer runs the teacher in every training step).
- generate / rollout_group: tunix's KV-cache Sampler (greedy, or temperature 1 over the full vocabulary),
  an eos id that never occurs.

One timed step is one `trainer.train([batch])` call for the PeftTrainer family, which ends with the trainer
waiting for the step's loss (so the step's work is done); for GRPO it is one global step of
`GRPOLearner.train` (rollout, reference log-probs, rewards, advantages, the policy update).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _shared  # noqa: E402
from _shared import common  # noqa: E402

IMPL = "tunix"
NOT_SUPPORTED = {
    "gemma_qlora_int8": "tunix's QLoRA path (qwix quantization) is not set up here",
    "gemma_qlora_nf4": "tunix's QLoRA path (qwix quantization) is not set up here",
    "gemma_full": "not set up for google-tunix",
    "distill_cached": "tunix's DistillationTrainer runs the teacher inside every training step "
                      "(_prepare_inputs -> strategy.get_teacher_outputs); it has no cached-teacher input",
    "generate_gemma_bf16": "the bfloat16-weights variant measures tunix_lite's sampling option; see generate_gemma",
    "rollout_group_gemma_bf16": "the bfloat16-weights variant measures tunix_lite's sampling option; see "
                                "rollout_group_gemma",
}


def main():
    args = common.impl_args(__doc__.splitlines()[0])
    if args.workload in NOT_SUPPORTED:
        _shared.unsupported(IMPL, args.workload, NOT_SUPPORTED[args.workload])
    import jax  # imported late: the flags above must stay cheap

    work = common.WORKLOADS[args.workload]
    extra = dict(versions=_shared.versions("google-tunix", "jax", "jaxlib", "flax", "optax", "qwix", "numpy"),
                 backend=jax.default_backend(), devices=len(jax.devices()), dtype="float32")
    run = dict(sft=run_train, generate=run_generate, rollout=run_generate, dpo=run_preference,
               orpo=run_preference, grpo=run_grpo, distill=run_distill)[work["kind"]]
    common.emit(run(args, work, extra))


# ----------------------------------------------------------------------------------------------- models


def llama_model(shape: dict, seed: int = 0):
    import jax.numpy as jnp
    from tunix.models import dummy_model_creator
    from tunix.models.llama3 import model as llama

    config = llama.ModelConfig(
        num_layers=shape["layers"], vocab_size=shape["vocab"], embed_dim=shape["d_model"], hidden_dim=shape["ffn"],
        num_heads=shape["heads"], head_dim=shape["head_dim"], num_kv_heads=shape["kv_heads"],
        rope_theta=int(shape["rope_theta"]), norm_eps=shape["norm_eps"], weight_tying=shape["tied"])
    # the plain constructor leaves the MLP weights at zero: use tunix's random-weight creator
    model = dummy_model_creator.create_dummy_model(llama.Llama3, config, dtype=jnp.float32, random_seed=seed)
    return model, config, dict(num_layers=config.num_layers, num_kv_heads=config.num_kv_heads,
                               head_dim=config.head_dim)


def gemma_model(directory: str):
    """tunix's Gemma3 with the config of an HF-layout checkpoint, weights by tunix's safetensors loader."""
    import jax.numpy as jnp
    from tunix.models.gemma3 import model as gemma3
    from tunix.models.gemma3 import params_safetensors

    with open(os.path.join(directory, "config.json")) as f:
        hf = json.load(f)
    rope = hf.get("rope_parameters", {})
    config = gemma3.ModelConfig(
        num_layers=hf["num_hidden_layers"], num_embed=hf["vocab_size"], embed_dim=hf["hidden_size"],
        hidden_dim=hf["intermediate_size"], num_heads=hf["num_attention_heads"], head_dim=hf["head_dim"],
        num_kv_heads=hf["num_key_value_heads"], sliding_window_size=hf["sliding_window"],
        local_base_frequency=int(rope.get("sliding_attention", {}).get("rope_theta", 10_000)),
        global_base_frequency=int(rope.get("full_attention", {}).get("rope_theta", 1_000_000)),
        param_dtype=jnp.float32)
    if hf.get("query_pre_attn_scalar", hf["head_dim"]) != hf["head_dim"]:
        raise SystemExit("query_pre_attn_scalar != head_dim: not mapped here")
    model = params_safetensors.create_model_from_safe_tensors(directory, config, dtype=jnp.float32)
    return model, config, dict(num_layers=config.num_layers, num_kv_heads=config.num_kv_heads,
                               head_dim=config.head_dim)


# --------------------------------------------------------------------------------------------- training


def run_train(args, work, extra):
    import jax.numpy as jnp
    import numpy as np
    import qwix
    from flax import nnx
    from tunix.sft import peft_trainer, utils

    if work["shape"] == "llama":
        shape = common.SHAPES["llama"]
        model, _, _ = llama_model(shape)
        # tunix Llama3 module names match LORA_TARGETS exactly (q/k/v/o_proj Einsums, gate/up/down_proj Linears)
        lora_pattern = ".*(" + "|".join(common.LORA_TARGETS) + ")"
        vocab = shape["vocab"]
        flops = common.train_flops_per_step(shape, work["batch"], work["seq"])
        extra |= dict(shape="llama", model="tunix.models.llama3.Llama3 (random init: create_dummy_model)")
    else:
        model, config, _ = gemma_model(_shared.GEMMA_DIR)
        # tunix's Gemma3 fuses k and v into one `kv_einsum` (num_kv_heads != num_heads) and names o_proj
        # `attn_vec_einsum`: the same projections as LORA_TARGETS, with one LoRA A shared by k and v.
        lora_pattern = ".*(q_einsum|kv_einsum|attn_vec_einsum|gate_proj|up_proj|down_proj)"
        vocab = config.num_embed
        gshape = dict(vocab=config.num_embed, d_model=config.embed_dim, layers=config.num_layers,
                      heads=config.num_heads, kv_heads=config.num_kv_heads, head_dim=config.head_dim,
                      ffn=config.hidden_dim)
        flops = common.train_flops_per_step(gshape, work["batch"], work["seq"])
        extra |= dict(shape="gemma3-270m", model="tunix.models.gemma3.Gemma3 (tunix safetensors loader)")

    if work.get("lora_rank"):
        provider = qwix.LoraProvider(module_path=lora_pattern, rank=work["lora_rank"], alpha=work["lora_alpha"])
        model = qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(0), **model.get_model_input())
        extra |= dict(lora=dict(rank=work["lora_rank"], alpha=work["lora_alpha"], module_path=lora_pattern),
                      trainable_params=int(sum(x.size for x in jax_leaves(nnx.state(model, nnx.LoRAParam)))))
    else:
        extra |= dict(trainable_params=int(sum(x.size for x in jax_leaves(nnx.state(model, nnx.Param)))))

    trainer = peft_trainer.PeftTrainer(model, adamw(work["lr"]), peft_trainer.TrainingConfig(eval_every_n_steps=10**9))
    trainer.is_managed_externally = True  # one train() call per batch, without closing the trainer after it

    def gen_model_input_fn(x: peft_trainer.TrainingInput):
        return dict(input_tokens=x.input_tokens, input_mask=x.input_mask,
                    positions=utils.build_positions_from_mask(x.input_mask),
                    attention_mask=utils.make_causal_attn_mask(x.input_mask))

    trainer = trainer.with_gen_model_input_fn(gen_model_input_fn)
    tokens = np.asarray(_shared.train_tokens(vocab, work["batch"], work["seq"]), dtype=np.int32)
    batch = peft_trainer.TrainingInput(input_tokens=jnp.asarray(tokens), input_mask=jnp.ones(tokens.shape, bool))

    def step():
        trainer.train([batch])  # waits for the step's loss before returning (InflightThrottler.wait_for_all)

    first, times = common.time_steps(step, args.steps, args.warmup)
    extra |= dict(batch=work["batch"], seq=work["seq"], train_steps_done=trainer.train_steps,
                  loss="tunix default (next-token NLL over seq-1 targets, mean over tokens)")
    return common.result(IMPL, args.workload, step_times=times, tokens_per_step=work["batch"] * work["seq"],
                         first_step_s=first, flops_per_step=flops, **extra)


def jax_leaves(state):
    import jax
    return jax.tree.leaves(state)


def adamw(lr: float):
    import optax

    o = common.OPTIMIZER
    return optax.adamw(lr, b1=o["b1"], b2=o["b2"], eps=o["eps"], weight_decay=o["weight_decay"])


def param_count(model) -> int:
    from flax import nnx

    return int(sum(x.size for x in jax_leaves(nnx.state(model, nnx.Param))))


# ------------------------------------------------------------------------------------------ DPO / ORPO


def run_preference(args, work, extra):
    """DPOTrainer(algorithm="dpo", a frozen nnx.clone of the initial policy as ref_model) or ("orpo", no
    reference) on one tokenized TrainingInput: prompts [pairs, 128], chosen and rejected [pairs, 128], all
    masks 1. The trainer concatenates chosen and rejected rows into one [2 * pairs, 256] batch; the reference
    log-probs are computed in its _prepare_inputs, inside every train() call."""
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from tunix.sft.dpo import dpo_trainer

    shape = common.SHAPES[work["shape"]]
    model, _, _ = llama_model(shape)
    dpo = work["kind"] == "dpo"
    reference = nnx.clone(model) if dpo else None
    config = dpo_trainer.DPOTrainingConfig(algorithm=work["kind"], beta=work.get("beta", 0.1),
                                           lambda_orpo=work.get("lambda_orpo", 0.1), eval_every_n_steps=10**9)
    trainer = dpo_trainer.DPOTrainer(model, reference, adamw(work["lr"]), config)
    trainer.is_managed_externally = True  # one train() call per batch, without closing the trainer after it
    data = common.preference_batch(shape["vocab"], work["pairs"], work["prompt"], work["completion"])
    ids = {k: jnp.asarray(np.asarray(v, np.int32)) for k, v in data.items()}
    batch = dpo_trainer.TrainingInput(
        prompt_ids=ids["prompt"], prompt_mask=jnp.ones_like(ids["prompt"], bool),
        chosen_ids=ids["chosen"], chosen_mask=jnp.ones_like(ids["chosen"], bool),
        rejected_ids=ids["rejected"], rejected_mask=jnp.ones_like(ids["rejected"], bool))

    first, times = common.time_steps(lambda: trainer.train([batch]), args.steps, args.warmup)
    extra |= dict(shape=work["shape"], model="tunix.models.llama3.Llama3 (random init: create_dummy_model)",
                  trainable_params=param_count(model), pairs=work["pairs"], prompt=work["prompt"],
                  completion=work["completion"], train_steps_done=trainer.train_steps,
                  loss=(f"tunix DPO sigmoid, beta {config.beta}, reference log-probs in _prepare_inputs" if dpo else
                        f"tunix ORPO, lambda {config.lambda_orpo}: NLL of the chosen completion / its length + "
                        "lambda * odds-ratio loss of summed completion log-probs"))
    record = common.result(IMPL, args.workload, step_times=times, tokens_per_step=common.tokens_per_step(args.workload),
                           first_step_s=first, flops_per_step=common.workload_flops(args.workload)["step"], **extra)
    record["pairs_per_s"] = work["pairs"] / record["step_s"]["median"]
    return record


# ------------------------------------------------------------------------------------------------ GRPO


def run_grpo(args, work, extra):
    """GRPOLearner on an RLCluster: actor, a frozen nnx.clone as reference, and the vanilla rollout, all on one
    1x1 mesh (so the rollout shares the actor's weights and no weight sync runs). Per global step: 4 prompts
    x 4 completions from the Sampler (temperature 1, top_p 1.0 = the full vocabulary, eos_tokens [-1] so every
    completion is exactly 64 tokens), reference per-token log-probs, common.parity_reward on the decoded ids,
    group advantages, one policy update (num_iterations 1: no old-policy forward), k3 KL (kl_loss_mode
    "low_var_kl", as TRL), loss aggregation "sequence-mean-token-mean". `learner.train` runs every step in one
    call; each global step, each rollout, each reference pass and each actor update is timed by wrapping the
    learner's and cluster's own methods."""
    import jax
    import numpy as np
    from flax import nnx
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    shape = common.SHAPES[work["shape"]]
    model, _, _ = llama_model(shape)
    reference = nnx.clone(model)
    n = 1 + max(args.warmup - 1, 0) + args.steps
    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    Role = rl_cluster_lib.Role
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={role: mesh for role in (Role.ACTOR, Role.REFERENCE, Role.ROLLOUT)},
        rollout_engine="vanilla", offload_to_cpu=False,
        training_config=rl_cluster_lib.RLTrainingConfig(actor_optimizer=adamw(work["lr"]),
                                                        eval_every_n_steps=10**9, max_steps=n),
        rollout_config=base_rollout.RolloutConfig(
            max_tokens_to_generate=work["completion"], max_prompt_length=work["prompt"],
            kv_cache_size=work["prompt"] + work["completion"], temperature=work["temperature"], top_p=1.0,
            top_k=None, eos_tokens=[-1]))
    cluster = rl_cluster_lib.RLCluster(actor=model, reference=reference, tokenizer=IdTokenizer(),
                                       cluster_config=cluster_config)
    algo = grpo_learner.GRPOConfig(num_generations=work["group"], num_iterations=work["iterations"],
                                   beta=work["beta"], epsilon=work["epsilon"], kl_loss_mode="low_var_kl")
    lengths = []

    def parity_reward(prompts, completions, **kwargs):
        ids = [text.split() for text in completions]
        lengths.extend(map(len, ids))
        return [common.parity_reward(x) for x in ids]

    learner = grpo_learner.GRPOLearner(rl_cluster=cluster, algo_config=algo, reward_fns=parity_reward)
    prompts = common.grpo_prompts(shape["vocab"], work["prompts"], work["prompt"])
    texts = np.array([" ".join(map(str, p[1:])) for p in prompts])  # the Sampler prepends bos itself
    times = dict(step=[], rollout=[], reference=[], update=[])

    def timed(owner, method, key):
        inner = getattr(owner, method)

        def wrapper(*a, **k):
            start = time.perf_counter()
            out = jax.block_until_ready(inner(*a, **k))
            times[key].append(time.perf_counter() - start)
            return out

        setattr(owner, method, wrapper)

    timed(learner, "_run_global_step", "step")
    timed(cluster, "generate", "rollout")
    timed(cluster, "get_ref_per_token_logps", "reference")
    timed(cluster, "update_actor", "update")
    learner.train([{"prompts": texts} for _ in range(n)])
    rows = work["prompts"] * work["group"]
    assert all(len(v) == n for v in times.values()), {k: len(v) for k, v in times.items()}
    assert lengths == [work["completion"]] * (n * rows), lengths
    timed_part = {k: v[n - args.steps:] for k, v in times.items()}
    rollout_s = statistics.median(timed_part["rollout"])
    update_s = statistics.median(s - r for s, r in zip(timed_part["step"], timed_part["rollout"]))
    flops = common.workload_flops(args.workload)
    extra |= dict(shape=work["shape"], model="tunix.models.llama3.Llama3 (random init: create_dummy_model)",
                  trainable_params=param_count(model), prompts=work["prompts"], group=work["group"],
                  prompt=work["prompt"], completion=work["completion"],
                  train_steps_done=cluster.actor_trainer.train_steps,
                  rollout_s=rollout_s, rollout_tokens_per_s=rows * work["completion"] / rollout_s, update_s=update_s,
                  update_flops_per_s=flops["update"] / update_s,
                  reference_s=statistics.median(timed_part["reference"]),
                  actor_update_s=statistics.median(timed_part["update"]),
                  rollout="tunix vanilla rollout (Sampler, KV cache of prompt + completion), prompts repeated per "
                          "completion")
    return common.result(IMPL, args.workload, step_times=timed_part["step"],
                         tokens_per_step=common.tokens_per_step(args.workload), first_step_s=times["step"][0],
                         flops_per_step=flops["step"], **extra)


# -------------------------------------------------------------------------------------------- distillation


def run_distill(args, work, extra):
    """DistillationTrainer + LogitStrategy(temperature 2, alpha 0.5): alpha * T^2 * KL(teacher_T || student_T)
    + (1 - alpha) * CE, means over every position and the full vocabulary. The teacher (the llama shape, seed
    0) runs in the trainer's _prepare_inputs inside every train() call; the student is the llama_half shape
    (seed 1). Labels are one-hot next tokens of the same 256 inputs (tunix's labels_fn sees only the inputs,
    so the last position's target wraps around to the first token: every position trains, as on the other
    sides)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from tunix.distillation import distillation_trainer
    from tunix.distillation.strategies import logit
    from tunix.sft import utils

    teacher, _, _ = llama_model(common.SHAPES[work["shape"]], seed=0)
    student, _, _ = llama_model(common.SHAPES[work["student"]], seed=1)
    vocab = common.SHAPES[work["shape"]]["vocab"]

    def forward(model, input_tokens, input_mask, positions, attention_mask):
        logits, _ = model(input_tokens, positions, None, attention_mask)
        return logits

    def labels(input_tokens, **_):
        return jax.nn.one_hot(jnp.roll(input_tokens, -1, axis=1), vocab)

    strategy = logit.LogitStrategy(student_forward_fn=forward, teacher_forward_fn=forward, labels_fn=labels,
                                   temperature=work["temperature"], alpha=work["alpha"])
    trainer = distillation_trainer.DistillationTrainer(
        student, teacher, strategy, adamw(work["lr"]),
        distillation_trainer.TrainingConfig(eval_every_n_steps=10**9))
    trainer.is_managed_externally = True
    trainer = trainer.with_gen_model_input_fn(lambda x: dict(
        input_tokens=x.input_tokens, input_mask=x.input_mask,
        positions=utils.build_positions_from_mask(x.input_mask),
        attention_mask=utils.make_causal_attn_mask(x.input_mask)))
    tokens = np.asarray(_shared.train_tokens(vocab, work["batch"], work["seq"]), dtype=np.int32)
    batch = distillation_trainer.TrainingInput(input_tokens=jnp.asarray(tokens),
                                               input_mask=jnp.ones(tokens.shape, bool))

    first, times = common.time_steps(lambda: trainer.train([batch]), args.steps, args.warmup)
    extra |= dict(shape=work["shape"], student_shape=work["student"],
                  model="tunix.models.llama3.Llama3 teacher (seed 0) and student (seed 1), create_dummy_model",
                  trainable_params=param_count(student), batch=work["batch"], seq=work["seq"],
                  train_steps_done=trainer.train_steps, teacher="online (DistillationTrainer._prepare_inputs)",
                  loss=f"tunix LogitStrategy, T {strategy.temperature}, alpha {strategy.alpha}")
    return common.result(IMPL, args.workload, step_times=times, tokens_per_step=common.tokens_per_step(args.workload),
                         first_step_s=first, flops_per_step=common.workload_flops(args.workload)["step"], **extra)


# ------------------------------------------------------------------------------------------- generation


class IdTokenizer:
    """Token ids as text ("17 4 99"): lets the Sampler see exactly the prompt ids every peer uses."""

    def encode(self, text, **_):
        return [int(t) for t in text.split()]

    def decode(self, ids, **_):
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self):
        return _shared.BOS

    def eos_id(self):
        return 1

    def pad_id(self):
        return 0


def run_generate(args, work, extra):
    """generate_*: greedy, `batch` copies of the prompt. rollout_group_*: the prompt `group` times in one batch
    (tunix's Sampler has no shared-prefix grouping), sampled at temperature 1 with top_p 1.0 (the full
    vocabulary; tunix then draws with jax.random.categorical), seed 0. Both: an eos id that never occurs, so
    every row has exactly new_tokens tokens."""
    from tunix.generate import sampler as sampler_lib

    directory = _shared.TINY_DIR if work["shape"] == "tiny" else _shared.GEMMA_DIR
    model, config, cache = gemma_model(directory)
    extra |= dict(shape=work["shape"], checkpoint=directory,
                  model="tunix.models.gemma3.Gemma3 (tunix safetensors loader)")
    sampling = work["kind"] == "rollout"
    batch, prompt, new = (work["group"] if sampling else work["batch"]), work["prompt"], work["new_tokens"]
    ids = _shared.prompt_ids(config.num_embed, prompt)
    text = " ".join(map(str, ids[1:]))  # the Sampler prepends bos itself
    sampler = sampler_lib.Sampler(model, IdTokenizer(),
                                  sampler_lib.CacheConfig(cache_size=prompt + new, **cache))
    how = dict(temperature=work["temperature"], top_p=1.0, seed=0) if sampling else {}  # none: greedy

    def generate(n):
        # an eos id that never occurs: exactly n new tokens per row
        out = sampler([text] * batch, max_generation_steps=n, max_prompt_length=prompt, eos_tokens=[-1], **how)
        assert all(len(t) == n for t in out.tokens), [len(t) for t in out.tokens]
        outputs.append(out)

    outputs = []
    assert len(sampler.tokenize(text)) == prompt
    prefill_first, prefill_times = common.time_steps(lambda: generate(1), args.steps, args.warmup)
    first, times = common.time_steps(lambda: generate(new), args.steps, args.warmup)
    extra |= _shared.generation_fields(batch, prompt, new, statistics.median(prefill_times), statistics.median(times))
    extra |= dict(generated_head=[int(t) for t in outputs[-1].tokens[0][:8]],
                  prefill_first_s=prefill_first, prefill_step_s=common.summary(prefill_times),
                  sampler=("tunix.generate.sampler.Sampler, " +
                           (f"temperature {work['temperature']}, top_p 1.0, the prompt repeated {batch} times"
                            if sampling else "greedy") + ", cache_size=prompt+new"))
    if sampling:
        extra["distinct_rows"] = len({tuple(map(int, t)) for t in outputs[-1].tokens})
    return common.result(IMPL, args.workload, step_times=times, tokens_per_step=batch * new,
                         first_step_s=first, **extra)


if __name__ == "__main__":
    main()
