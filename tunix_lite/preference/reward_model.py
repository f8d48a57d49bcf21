"""A Bradley-Terry reward model: a scalar head on the model's features, trained on the same preference pairs.

    p(y_w ≻ y_l | x) = σ(r(x, y_w) - r(x, y_l)),    L = -log σ(r(x, y_w) - r(x, y_l))    (Ouyang et al. 2022, eq. 1)

r(x, y) is `ScalarHead`'s value at the last input token of prompt + completion, in the row layout of
tunix_lite.preference.data (the reply's end-of-turn token is only a target there, so the score has read the whole
reply). Only differences of rewards are learned: a constant shift of r changes nothing.

    config = RewardModelConfig(model="tiny", steps=100)
    result = run_reward_model(config)                       # held-out pairwise accuracy before/after
    reward = RewardFunction(result.model, result.tokenizer, seq_len=128)
    reward(prompts, completions)                            # TRL-style: one float per completion, for the RL trainer
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.data.sft import padded_rows
from tunix_lite.models.heads import ScalarHead
from tunix_lite.preference.data import PreferenceBatches, tokenize_unpaired
from tunix_lite.preference.dpo import PairOptions, load_preferences, tokenize
from tunix_lite.training.config import ConfigBase, DataOptions, ModelOptions, OptimOptions, RunOptions
from tunix_lite.training.harness import Run, RunResult, build_model
from tunix_lite.training.losses import masked_mean
from tunix_lite.training.trainer import COUNT, evaluate, pad_batch


def last_token_scores(model: ScalarHead, inputs, positions, segment_ids) -> jax.Array:
    """The head's value at each row's last real input token (the largest position): [N, T] -> [N]."""
    values = model(inputs, positions, segment_ids=segment_ids)
    last = jnp.argmax(positions, axis=-1)
    return jnp.take_along_axis(values, last[:, None], axis=-1)[:, 0]


def bradley_terry_loss(model: ScalarHead, batch: dict, frozen=None) -> tuple[jax.Array, dict]:
    """-log σ(r_w - r_l), the mean over real pairs of rows [B, 2, T] (padded pairs count 0). Metrics: accuracy (the
    chosen completion scores higher), margin, and the mean rewards of each side (TRL's reward-trainer names)."""
    B, _, T = batch["inputs"].shape
    scores = last_token_scores(model, *(batch[k].reshape(2 * B, T) for k in ("inputs", "positions", "segment_ids")))
    chosen, rejected = scores.reshape(B, 2)[:, 0], scores.reshape(B, 2)[:, 1]
    valid = (batch["weights"].sum((1, 2)) > 0).astype(jnp.float32)
    margin = chosen - rejected
    loss, count = masked_mean(-jax.nn.log_sigmoid(margin), valid)

    def mean(x):
        return masked_mean(x, valid)[0]

    return loss, {"loss": loss, "accuracy": mean(margin > 0), "margin": mean(margin),
                  "rewards/chosen": mean(chosen), "rewards/rejected": mean(rejected), COUNT: count}


@dataclasses.dataclass
class RewardModelConfig(ConfigBase, RunOptions, PairOptions, DataOptions, OptimOptions, ModelOptions):
    """A reward model's run: the shared parts and DPO's pair data (with lora_rank, the adapters and the head train)."""

    algorithm: ClassVar[str] = "reward_model"


def reward_head(backbone, seed: int) -> tuple[ScalarHead, object]:
    """(ScalarHead on `backbone`, the variables that train): the head, plus the backbone's weights or adapters."""
    from tunix_lite.lora import lora_layers

    model = ScalarHead(backbone, rngs=nnx.Rngs(seed))
    head = nnx.PathContains("head")
    return model, (nnx.Any(nnx.LoRAParam, head) if lora_layers(backbone) else nnx.Param)


def run_reward_model(config: RewardModelConfig, *, verbose: bool = True) -> RunResult:
    """Train a Bradley-Terry reward model on the config's pairs; before/after: held-out pairwise accuracy and margin.
    Nothing is exported yet (the run keeps metrics and checkpoints); use result.model with RewardFunction."""
    run = Run(config, verbose=verbose)
    backbone, tokenizer = build_model(config)
    model, wrt = reward_head(backbone, config.seed)
    train, validation = load_preferences(config)
    train_data = tokenize(train, tokenizer, config, "train pairs")
    val_batches = PreferenceBatches(tokenize(validation, tokenizer, config, "validation pairs"), config.batch_size,
                                    shuffle=False).epoch(0)
    batches = PreferenceBatches(train_data, config.batch_size, seed=config.seed)
    report = f"train: {train_data.report}"
    run.say(report)

    def eval_fn(model):
        return {k: v for k, v in evaluate(model, bradley_terry_loss, val_batches).items() if k != COUNT}

    return run.train(model, tokenizer, bradley_terry_loss, batches.stream, eval_fn, wrt=wrt, report=report,
                     export=False, desc="reward")


@nnx.jit
def _score_rows(model, inputs, positions, segment_ids):
    return last_token_scores(model, inputs, positions, segment_ids)


class RewardFunction:
    """A trained reward model as a TRL-style reward function: reward(prompts, completions, **columns) -> one float
    per completion, so the RL trainer can use it beside the programmatic rewards. Prompts are user text (or message
    lists), completions the sampled replies. Long examples keep their end (the reply); batches have a fixed shape,
    so scoring compiles once."""

    __name__ = "reward_model"  # TRL logs reward functions by their __name__

    def __init__(self, model: ScalarHead, tokenizer, *, seq_len: int, template: str | None = None,
                 batch_size: int = 16):
        self.model, self.tokenizer, self.seq_len, self.template, self.batch_size = (model, tokenizer, seq_len,
                                                                                    template, batch_size)

    def __call__(self, prompts: Sequence, completions: Sequence[str], **columns) -> list[float]:
        records = [{"prompt": p, "completion": c, "label": True} for p, c in zip(prompts, completions, strict=True)]
        data = tokenize_unpaired(records, self.tokenizer, seq_len=self.seq_len, template=self.template,
                                 truncation="truncate", truncation_mode="keep_end")
        if len(data) != len(records):
            raise ValueError(f"{len(records) - len(data)} completions could not be scored (too long for seq_len="
                             f"{self.seq_len} even with the prompt cut, or empty)")
        self.model.eval()
        scores = []
        for start in range(0, len(records), self.batch_size):
            order = [2 * i for i in range(start, min(start + self.batch_size, len(records)))]  # not the mismatched rows
            rows = pad_batch(padded_rows(data.sequences, order), self.batch_size)
            out = _score_rows(self.model, rows["inputs"], rows["positions"], rows["segment_ids"])
            scores += np.asarray(out)[:len(order)].tolist()
        return scores
