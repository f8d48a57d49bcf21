"""A hand-written PyTorch loop on transformers models, on the shared benchmark workloads. Runs in the TRL venv
(same torch and transformers):

    bash benchmarks/peers/setup.sh torch
    benchmarks/.venvs/trl/bin/python benchmarks/peers/impl_torch.py --workload sft_full --steps 5 --warmup 2

Training: zero_grad, `model(input_ids=x, labels=x).loss` (transformers' shifted mean cross-entropy),
backward, torch.optim.AdamW step; LoRA through peft. sft_* use LlamaForCausalLM with SHAPES['llama']
(random init, seed 0); gemma_lora and generate_gemma load ~/.cache/tunix_lite/gemma3-270m, generate_tiny
loads tunix_lite/assets/tiny (both Gemma3ForCausalLM). Generation: transformers `generate`, greedy
(generate_*) or sampling at temperature 1 (rollout_group_*), min_new_tokens = max_new_tokens. Threads: see
_torch_common (OMP_WAIT_POLICY=PASSIVE, os.cpu_count()).
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _torch_common as tc  # noqa: E402  (sets OMP_WAIT_POLICY before torch is imported)
import _shared  # noqa: E402
from _shared import common  # noqa: E402

import torch  # noqa: E402

IMPL = "torch"
SUPPORTED = ("sft_full", "sft_lora", "gemma_lora", "generate_tiny", "generate_gemma", "rollout_group_tiny",
             "rollout_group_gemma")


def main():
    args = common.impl_args(__doc__.splitlines()[0])
    if args.workload not in SUPPORTED:
        _shared.unsupported(IMPL, args.workload, "not implemented for the torch loop")
    work = common.WORKLOADS[args.workload]
    record = (run_train if work["kind"] == "sft" else run_generate)(args, work)
    common.emit(record)


def run_train(args, work):
    model, shape, extra = tc.training_model(work)
    if work.get("lora_rank"):
        import peft

        model = peft.get_peft_model(model, tc.lora_config(work))
    model.train()
    extra |= tc.torch_fields(model) | dict(trainable_params=tc.trainable_params(model))

    o = common.OPTIMIZER
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=work["lr"],
                                  betas=(o["b1"], o["b2"]), eps=o["eps"], weight_decay=o["weight_decay"])
    ids = torch.tensor(_shared.train_tokens(shape["vocab"], work["batch"], work["seq"]), dtype=torch.long)
    losses = []

    def step():  # CPU torch is synchronous: the step's work is done when this returns
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    first, times = common.time_steps(step, args.steps, args.warmup)
    extra |= dict(batch=work["batch"], seq=work["seq"], loss_first=losses[0], loss_last=losses[-1],
                  optimizer=f"torch.optim.AdamW (default implementation), {o}")
    return common.result(IMPL, args.workload, step_times=times, tokens_per_step=work["batch"] * work["seq"],
                         first_step_s=first,
                         flops_per_step=common.train_flops_per_step(shape, work["batch"], work["seq"]), **extra)


def run_generate(args, work):
    """generate_*: greedy, `batch` copies of the prompt. rollout_group_*: the prompt `group` times in one batch,
    sampled at temperature 1 over the full vocabulary (top_k 0, top_p 1.0), as TRL's GRPOTrainer calls generate."""
    directory = _shared.TINY_DIR if work["shape"] == "tiny" else _shared.GEMMA_DIR
    model = tc.pretrained(directory).eval()
    sampling = work["kind"] == "rollout"
    batch, prompt, new = (work["group"] if sampling else work["batch"]), work["prompt"], work["new_tokens"]
    ids = torch.tensor([_shared.prompt_ids(model.config.vocab_size, prompt)] * batch, dtype=torch.long)
    mask = torch.ones_like(ids)
    how = dict(do_sample=True, temperature=work["temperature"], top_k=0, top_p=1.0) if sampling else dict(
        do_sample=False)
    torch.manual_seed(0)
    outputs = []

    def generate(n):
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                 pad_token_id=0, **how)
        assert out.shape == (batch, prompt + n), out.shape
        outputs.append(out)

    prefill_first, prefill_times = common.time_steps(lambda: generate(1), args.steps, args.warmup)
    first, times = common.time_steps(lambda: generate(new), args.steps, args.warmup)
    extra = dict(shape=work["shape"], checkpoint=directory, model=f"transformers.{type(model).__name__}",
                 generated_head=outputs[-1][0, prompt:prompt + 8].tolist(),
                 prefill_first_s=prefill_first, prefill_step_s=common.summary(prefill_times),
                 sampler="transformers generate, " + (f"sampling at temperature {work['temperature']}, top_k 0, "
                                                      f"top_p 1.0, the prompt repeated {batch} times"
                                                      if sampling else "greedy") +
                         ", min_new_tokens=max_new_tokens, default (dynamic) cache")
    if sampling:
        extra["distinct_rows"] = len({tuple(row.tolist()) for row in outputs[-1][:, prompt:]})
    extra |= tc.torch_fields(model)
    extra |= _shared.generation_fields(batch, prompt, new, statistics.median(prefill_times), statistics.median(times))
    return common.result(IMPL, args.workload, step_times=times, tokens_per_step=batch * new, first_step_s=first,
                         **extra)


if __name__ == "__main__":
    main()
