"""TRL's trainers on the shared benchmark workloads. Runs in benchmarks/.venvs/trl:

    bash benchmarks/peers/setup.sh trl
    benchmarks/.venvs/trl/bin/python benchmarks/peers/impl_trl.py --workload sft_full --steps 5 --warmup 2

sft_*: `SFTTrainer`; dpo: `DPOTrainer` (sigmoid loss, an explicit frozen copy of the initial policy as
`ref_model`, reference log-probs computed in every step); orpo: `trl.experimental.orpo.ORPOTrainer`; grpo:
`GRPOTrainer` with transformers `generate` for the rollout (no vLLM) and a reference model TRL loads from
a saved copy of the initial policy. The llama shape is transformers' LlamaForCausalLM with SHAPES['llama']
(random init, seed 0); gemma_lora loads ~/.cache/tunix_lite/gemma3-270m. LoRA is passed the TRL way
(`peft_config=LoraConfig(...)`). fp32: TRL's defaults bf16=True and gradient_checkpointing=True are turned
off; AdamW per common.OPTIMIZER with a constant learning rate and no gradient clipping (max_grad_norm=0).
Everything else is TRL's default, including its fused/chunked lm-head loss and per-step metrics.

The Trainer drives its own loop, so steps are timed by a TrainerCallback (perf_counter at on_step_begin and
on_step_end: everything in the optimizer step, including GRPO's generation and scoring; batch collation
happens before on_step_begin and logging after on_step_end, both outside). The run is 1 + (warmup - 1) +
steps optimizer steps: the first is reported as first_step_s, the next warmup - 1 are dropped, the rest are
timed, as in common.time_steps.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _torch_common as tc  # noqa: E402  (sets OMP_WAIT_POLICY before torch is imported)
import _shared  # noqa: E402
from _shared import common  # noqa: E402

IMPL = "trl"
SUPPORTED_KINDS = ("sft", "dpo", "orpo", "grpo")


def main():
    args = common.impl_args(__doc__.splitlines()[0])
    work = common.WORKLOADS[args.workload]
    if work["kind"] not in SUPPORTED_KINDS:
        why = {"generate": "TRL generates with transformers generate: see impl_torch.py",
               "rollout": "TRL generates with transformers generate: see impl_torch.py",
               "distill": "TRL's distillation trainers (DistillationTrainer, experimental GKDTrainer) are "
                          "on-policy (the student generates); not the offline logit KD of this workload"}
        _shared.unsupported(IMPL, args.workload, why.get(work["kind"], "not implemented for TRL"))
    run = dict(sft=run_sft, dpo=run_preference, orpo=run_preference, grpo=run_grpo)[work["kind"]]
    common.emit(run(args, work))


# ----------------------------------------------------------------------------------------------- shared


class StepTimer:
    """perf_counter from on_step_begin to on_step_end of every optimizer step (a TrainerCallback, built lazily
    because transformers is imported late)."""

    def __new__(cls):
        import transformers

        class _StepTimer(transformers.TrainerCallback):
            def __init__(self):
                self.times, self.start = [], None

            def on_step_begin(self, args, state, control, **kwargs):
                self.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                self.times.append(time.perf_counter() - self.start)

        return _StepTimer()


def trainer_args(config_cls, out_dir: str, total_steps: int, batch: int, lr: float, **extra):
    """A TRL config with the settings every TRL row shares: fp32, no checkpointing, constant LR, AdamW per
    common.OPTIMIZER, no clipping, no logging, saving or evaluation inside the timed steps."""
    o = common.OPTIMIZER
    fields = {f.name for f in dataclasses.fields(config_cls)}
    if "activation_checkpointing" in fields:  # SFTConfig's own (selective) checkpointing switch
        extra.setdefault("activation_checkpointing", False)
    return config_cls(
        output_dir=out_dir, max_steps=total_steps, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        bf16=False, fp16=False,  # TRL defaults to bf16 and to (gradient = activation) checkpointing
        gradient_checkpointing=False,
        learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=o["b1"], adam_beta2=o["b2"], adam_epsilon=o["eps"], weight_decay=o["weight_decay"],
        max_grad_norm=0.0,  # no clipping (the Trainer still computes the grad norm, as tunix's does)
        use_cpu=True, seed=0, data_seed=0, dataloader_num_workers=0, report_to="none",
        save_strategy="no", eval_strategy="no", logging_steps=total_steps + 1, disable_tqdm=True, **extra)


def total_steps(args) -> int:
    return 1 + max(args.warmup - 1, 0) + args.steps


def finish(args, trainer, config, timer, extra, *, tokens: int, flops: float, **more) -> dict:
    """The RESULT record of a Trainer run timed by `timer`."""
    n = total_steps(args)
    assert len(timer.times) == n, (len(timer.times), n)
    times = timer.times[n - args.steps:]
    extra |= tc.torch_fields(trainer.model) | dict(
        trainable_params=tc.trainable_params(trainer.model),
        optim=getattr(config.optim, "value", str(config.optim)), bf16=config.bf16,
        gradient_checkpointing=config.gradient_checkpointing,
        model_checkpointing=bool(getattr(trainer.model, "is_activation_checkpointing", False)),
        timing="TrainerCallback on_step_begin -> on_step_end (perf_counter)") | more
    return common.result(IMPL, args.workload, step_times=times, tokens_per_step=tokens, first_step_s=timer.times[0],
                         flops_per_step=flops, **extra)


# ------------------------------------------------------------------------------------------------- SFT


def run_sft(args, work):
    import datasets
    import trl

    model, shape, extra = tc.training_model(work)
    peft_config = tc.lora_config(work) if work.get("lora_rank") else None
    batch, seq = work["batch"], work["seq"]
    rows = _shared.train_tokens(shape["vocab"], batch, seq)
    dataset = datasets.Dataset.from_dict({"input_ids": rows * total_steps(args)})
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out_dir:
        config = trainer_args(trl.SFTConfig, out_dir, total_steps(args), batch, work["lr"], max_length=seq,
                              packing=False)
        trainer = trl.SFTTrainer(model=model, args=config, train_dataset=dataset,
                                 processing_class=tc.id_tokenizer(shape["vocab"]), peft_config=peft_config,
                                 callbacks=[timer])
        sample = trainer.train_dataset[0]
        assert len(sample["input_ids"]) == seq, len(sample["input_ids"])  # no eos appended, no truncation
        trainer.train()
    return finish(args, trainer, config, timer, extra | dict(batch=batch, seq=seq), tokens=batch * seq,
                  flops=common.train_flops_per_step(shape, batch, seq), loss_type=config.loss_type,
                  activation_checkpointing=config.activation_checkpointing)


# ---------------------------------------------------------------------------------------------- DPO / ORPO


def run_preference(args, work):
    """dpo: trl.DPOTrainer; orpo: trl.experimental.orpo.ORPOTrainer. Both see the texts of
    common.preference_batch through the id tokenizer: every pair is 128 prompt + 128 completion ids, the
    completions ending in eos already (so neither trainer appends one)."""
    import datasets
    import trl

    model, shape, extra = tc.training_model(work)
    pairs, prompt, completion = work["pairs"], work["prompt"], work["completion"]
    data = common.preference_batch(shape["vocab"], pairs, prompt, completion)
    rows = {"prompt": [tc.id_text(p) for p in data["prompt"]],
            # a leading space: TRL tokenizes prompt + completion as one text
            "chosen": [" " + tc.id_text(c) for c in data["chosen"]],
            "rejected": [" " + tc.id_text(r) for r in data["rejected"]]}
    dataset = datasets.Dataset.from_dict({k: v * total_steps(args) for k, v in rows.items()})
    tokenizer = tc.id_tokenizer(shape["vocab"])
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out_dir:
        if work["kind"] == "dpo":
            config = trainer_args(trl.DPOConfig, out_dir, total_steps(args), pairs, work["lr"], beta=work["beta"],
                                  loss_type=["sigmoid"], max_length=prompt + completion,
                                  precompute_ref_log_probs=False, dataset_num_proc=None)
            trainer = trl.DPOTrainer(model=model, ref_model=copy.deepcopy(model).eval(), args=config,
                                     train_dataset=dataset, processing_class=tokenizer, callbacks=[timer])
            sample = trainer.train_dataset[0]
            lengths = [len(sample[k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")]
            more = dict(beta=config.beta, loss_type=config.loss_type, reference="explicit ref_model (deepcopy of "
                        "the initial policy), log-probs computed in every step")
        else:
            from trl.experimental.orpo import ORPOConfig, ORPOTrainer

            config = trainer_args(ORPOConfig, out_dir, total_steps(args), pairs, work["lr"],
                                  beta=work["lambda_orpo"], max_length=prompt + completion,
                                  max_completion_length=completion)
            trainer = ORPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                                  callbacks=[timer])
            sample = trainer.train_dataset[0]
            lengths = [len(sample["prompt_input_ids"]), len(sample["chosen_input_ids"]) - prompt,
                       len(sample["rejected_input_ids"]) - prompt]
            more = dict(lambda_orpo=config.beta, loss="TRL ORPO: NLL over prompt + chosen, odds ratio of per-token "
                        "mean log-probs")
        assert lengths == [prompt, completion, completion], lengths  # no bos/eos added, no truncation
        trainer.train()
    flops = common.workload_flops(args.workload)
    record = finish(args, trainer, config, timer, extra | dict(pairs=pairs, prompt=prompt, completion=completion),
                    tokens=common.tokens_per_step(args.workload), flops=flops["step"], **more)
    record["pairs_per_s"] = pairs / record["step_s"]["median"]
    return record


# ------------------------------------------------------------------------------------------------- GRPO


def run_grpo(args, work):
    """GRPOTrainer: per step, 4 prompts x 4 completions generated by transformers `generate` (sampling,
    temperature 1, top-k off, top-p 1, min_new_tokens = max_completion_length so eos cannot end a completion),
    common.parity_reward on the completion ids, group-normalised advantages, one optimizer step (one
    generation per step, num_iterations 1: no old-policy forward), loss_type "grpo" (per-sequence token mean),
    beta 0.04 with TRL's k3 KL. TRL builds the reference from the policy's `_name_or_path`, so the random
    policy is saved to a temporary directory first and the reference loaded from there (the same weights).
    The rollout time is the time inside `model.generate`."""
    import datasets
    import trl

    model, shape, extra = tc.training_model(work)
    # training_model turns the KV cache off (training never uses it), and generate inherits that from the
    # model's generation_config: without this line every decode step re-runs the whole sequence (~10x slower)
    model.generation_config.use_cache = True
    prompts, group, prompt_len, completion = work["prompts"], work["group"], work["prompt"], work["completion"]
    texts = [tc.id_text(p) for p in common.grpo_prompts(shape["vocab"], prompts, prompt_len)]
    dataset = datasets.Dataset.from_dict({"prompt": texts * total_steps(args)})
    lengths = []

    def parity_reward(prompts, completions, completion_ids, **kwargs):
        lengths.extend(len(ids) for ids in completion_ids)
        return [common.parity_reward(ids) for ids in completion_ids]

    rollout_times = []
    generate = model.generate

    def timed_generate(*a, **k):
        start = time.perf_counter()
        out = generate(*a, **k)
        rollout_times.append(time.perf_counter() - start)
        return out

    model.generate = timed_generate
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out_dir:
        saved = os.path.join(out_dir, "initial_policy")
        model.save_pretrained(saved)
        model.config._name_or_path = saved  # where GRPOTrainer loads the reference from
        config = trainer_args(
            trl.GRPOConfig, out_dir, total_steps(args), prompts * group, work["lr"],
            num_generations=group, max_completion_length=completion, temperature=work["temperature"], top_p=1.0,
            top_k=0, generation_kwargs=dict(min_new_tokens=completion), beta=work["beta"],
            num_iterations=work["iterations"], epsilon=work["epsilon"], loss_type="grpo", scale_rewards="group",
            shuffle_dataset=False, log_completions=False)
        trainer = trl.GRPOTrainer(model=model, reward_funcs=[parity_reward], args=config, train_dataset=dataset,
                                  processing_class=tc.id_tokenizer(shape["vocab"]), callbacks=[timer])
        assert trainer.ref_model is not None
        trainer.train()
    n = total_steps(args)
    assert len(rollout_times) == n and lengths == [completion] * (n * prompts * group), (len(rollout_times), lengths)
    rollout_s = statistics.median(rollout_times[n - args.steps:])
    step_times = timer.times[n - args.steps:]
    update_s = statistics.median(s - r for s, r in zip(step_times, rollout_times[n - args.steps:]))
    flops = common.workload_flops(args.workload)
    return finish(args, trainer, config, timer, extra | dict(prompts=prompts, group=group, prompt=prompt_len,
                                                             completion=completion),
                  tokens=common.tokens_per_step(args.workload), flops=flops["step"], rollout_s=rollout_s,
                  rollout_tokens_per_s=prompts * group * completion / rollout_s, update_s=update_s,
                  update_flops_per_s=flops["update"] / update_s, loss_type=config.loss_type, beta=config.beta,
                  rollout="transformers generate (sampling, dynamic cache), prompts repeated per completion")


if __name__ == "__main__":
    main()
