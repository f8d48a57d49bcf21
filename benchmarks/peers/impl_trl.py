"""TRL's SFTTrainer on the shared benchmark workloads. Runs in benchmarks/.venvs/trl:

    bash benchmarks/peers/setup.sh trl
    benchmarks/.venvs/trl/bin/python benchmarks/peers/impl_trl.py --workload sft_full --steps 5 --warmup 2

sft_* train transformers' LlamaForCausalLM with SHAPES['llama'] (random init, seed 0); gemma_lora loads
~/.cache/tunix_lite/gemma3-270m. LoRA is passed the TRL way (`peft_config=LoraConfig(...)`). fp32: TRL's
defaults bf16=True and gradient_checkpointing=True are turned off; AdamW per common.OPTIMIZER with a
constant learning rate and no gradient clipping (max_grad_norm=0). Everything else is TRL's default,
including its fused/chunked lm-head loss and its per-step entropy and token-accuracy metrics.

The Trainer drives its own loop, so steps are timed by a TrainerCallback (perf_counter at on_step_begin and
on_step_end: forward, backward, grad norm, optimizer step, zero_grad; batch collation happens before
on_step_begin and logging after on_step_end, both outside). The run is 1 + (warmup - 1) + steps optimizer
steps: the first is reported as first_step_s, the next warmup - 1 are dropped, the rest are timed, as in
common.time_steps.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _torch_common as tc  # noqa: E402  (sets OMP_WAIT_POLICY before torch is imported)
import _shared  # noqa: E402
from _shared import common  # noqa: E402

import torch  # noqa: E402

IMPL = "trl"
SUPPORTED = ("sft_full", "sft_lora", "gemma_lora")


def main():
    args = common.impl_args(__doc__.splitlines()[0])
    if args.workload not in SUPPORTED:
        _shared.unsupported(IMPL, args.workload, "TRL has no generation benchmark here (it calls transformers "
                                                 "generate: see impl_torch.py)")
    import datasets
    import transformers
    import trl

    work = common.WORKLOADS[args.workload]
    model, shape, extra = tc.training_model(work)
    peft_config = tc.lora_config(work) if work.get("lora_rank") else None

    batch, seq = work["batch"], work["seq"]
    total_steps = 1 + max(args.warmup - 1, 0) + args.steps
    rows = _shared.train_tokens(shape["vocab"], batch, seq)
    dataset = datasets.Dataset.from_dict({"input_ids": rows * total_steps})

    class StepTimer(transformers.TrainerCallback):
        def __init__(self):
            self.times, self.start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.start)

    o = common.OPTIMIZER
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out_dir:
        config = trl.SFTConfig(
            output_dir=out_dir, max_steps=total_steps, per_device_train_batch_size=batch,
            gradient_accumulation_steps=1, max_length=seq, packing=False,
            bf16=False, fp16=False,  # TRL defaults to bf16 and to (gradient = activation) checkpointing
            activation_checkpointing=False, gradient_checkpointing=False,
            learning_rate=work["lr"], lr_scheduler_type="constant", warmup_steps=0,
            adam_beta1=o["b1"], adam_beta2=o["b2"], adam_epsilon=o["eps"], weight_decay=o["weight_decay"],
            max_grad_norm=0.0,  # no clipping (the Trainer still computes the grad norm, as tunix's does)
            use_cpu=True, seed=0, data_seed=0, dataloader_num_workers=0, report_to="none",
            save_strategy="no", eval_strategy="no", logging_steps=total_steps + 1, disable_tqdm=True)
        trainer = trl.SFTTrainer(model=model, args=config, train_dataset=dataset,
                                 processing_class=tc.id_tokenizer(shape["vocab"]), peft_config=peft_config,
                                 callbacks=[timer])
        sample = trainer.train_dataset[0]
        assert len(sample["input_ids"]) == seq, len(sample["input_ids"])  # no eos appended, no truncation
        trainer.train()

    assert len(timer.times) == total_steps, (len(timer.times), total_steps)
    times = timer.times[total_steps - args.steps:]
    extra |= tc.torch_fields(trainer.model) | dict(
        trainable_params=tc.trainable_params(trainer.model), batch=batch, seq=seq,
        optim=getattr(config.optim, "value", str(config.optim)), bf16=config.bf16, loss_type=config.loss_type,
        activation_checkpointing=config.activation_checkpointing,
        model_checkpointing=bool(getattr(trainer.model, "is_activation_checkpointing", False)),
        timing="TrainerCallback on_step_begin -> on_step_end (perf_counter)")
    common.emit(common.result(IMPL, args.workload, step_times=times, tokens_per_step=batch * seq,
                              first_step_s=timer.times[0],
                              flops_per_step=common.train_flops_per_step(shape, batch, seq), **extra))


if __name__ == "__main__":
    main()
