"""google-tunix (PyPI `google-tunix`) on the shared benchmark workloads. Runs in benchmarks/.venvs/tunix:

    bash benchmarks/peers/setup.sh tunix
    benchmarks/.venvs/tunix/bin/python benchmarks/peers/impl_tunix.py --workload sft_full --steps 5 --warmup 2

Models come from tunix's own model code: the llama shape is tunix's Llama3 with a shrunk ModelConfig and
random weights (tunix.models.dummy_model_creator.create_dummy_model, normal * 0.02 on every parameter); the
Gemma shapes are tunix's Gemma3 loaded with tunix's own safetensors loader from the same HF-layout
checkpoints the torch peer loads (tunix_lite/assets/tiny, ~/.cache/tunix_lite/gemma3-270m). No downloads.

Training is tunix's PeftTrainer (one trainer for full and LoRA, its default next-token loss); LoRA is
applied as tunix does it, with qwix.LoraProvider + qwix.apply_lora_to_model. One timed step is one
`trainer.train([batch])` call, which ends with the trainer waiting for the step's loss (so the step's
work is done). Generation is tunix's KV-cache `Sampler` (greedy, no stop token).
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _shared  # noqa: E402
from _shared import common  # noqa: E402

IMPL = "tunix"
SUPPORTED = ("sft_full", "sft_lora", "gemma_lora", "generate_tiny", "generate_gemma")


def main():
    args = common.impl_args(__doc__.splitlines()[0])
    if args.workload not in SUPPORTED:
        _shared.unsupported(IMPL, args.workload, "not implemented for google-tunix")
    import jax  # imported late: the flags above must stay cheap

    work = common.WORKLOADS[args.workload]
    extra = dict(versions=_shared.versions("google-tunix", "jax", "jaxlib", "flax", "optax", "qwix", "numpy"),
                 backend=jax.default_backend(), devices=len(jax.devices()), dtype="float32")
    if args.workload.startswith("generate"):
        record = run_generate(args, work, extra)
    else:
        record = run_train(args, work, extra)
    common.emit(record)


# ----------------------------------------------------------------------------------------------- models


def llama_model(shape: dict):
    import jax.numpy as jnp
    from tunix.models import dummy_model_creator
    from tunix.models.llama3 import model as llama

    config = llama.ModelConfig(
        num_layers=shape["layers"], vocab_size=shape["vocab"], embed_dim=shape["d_model"], hidden_dim=shape["ffn"],
        num_heads=shape["heads"], head_dim=shape["head_dim"], num_kv_heads=shape["kv_heads"],
        rope_theta=int(shape["rope_theta"]), norm_eps=shape["norm_eps"], weight_tying=shape["tied"])
    # the plain constructor leaves the MLP weights at zero: use tunix's random-weight creator
    model = dummy_model_creator.create_dummy_model(llama.Llama3, config, dtype=jnp.float32, random_seed=0)
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
    import optax
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

    o = common.OPTIMIZER
    tx = optax.adamw(work["lr"], b1=o["b1"], b2=o["b2"], eps=o["eps"], weight_decay=o["weight_decay"])
    trainer = peft_trainer.PeftTrainer(model, tx, peft_trainer.TrainingConfig(eval_every_n_steps=10**9))
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
    from tunix.generate import sampler as sampler_lib

    directory = _shared.TINY_DIR if work["shape"] == "tiny" else _shared.GEMMA_DIR
    model, config, cache = gemma_model(directory)
    extra |= dict(shape=work["shape"], checkpoint=directory,
                  model="tunix.models.gemma3.Gemma3 (tunix safetensors loader)")
    batch, prompt, new = work["batch"], work["prompt"], work["new_tokens"]
    ids = _shared.prompt_ids(config.num_embed, prompt)
    text = " ".join(map(str, ids[1:]))  # the Sampler prepends bos itself
    sampler = sampler_lib.Sampler(model, IdTokenizer(),
                                  sampler_lib.CacheConfig(cache_size=prompt + new, **cache))

    def generate(n):
        # greedy (no temperature/top_p/beam), an eos id that never occurs: exactly n new tokens
        out = sampler([text] * batch, max_generation_steps=n, max_prompt_length=prompt, eos_tokens=[-1])
        assert all(len(t) == n for t in out.tokens), [len(t) for t in out.tokens]
        outputs.append(out)

    outputs = []
    assert len(sampler.tokenize(text)) == prompt
    prefill_first, prefill_times = common.time_steps(lambda: generate(1), args.steps, args.warmup)
    first, times = common.time_steps(lambda: generate(new), args.steps, args.warmup)
    import statistics
    extra |= _shared.generation_fields(batch, prompt, new, statistics.median(prefill_times), statistics.median(times))
    extra |= dict(generated_head=[int(t) for t in outputs[-1].tokens[0][:8]],
                  prefill_first_s=prefill_first, prefill_step_s=common.summary(prefill_times),
                  sampler="tunix.generate.sampler.Sampler, greedy, cache_size=prompt+new")
    return common.result(IMPL, args.workload, step_times=times, tokens_per_step=batch * new,
                         first_step_s=first, **extra)


if __name__ == "__main__":
    main()
