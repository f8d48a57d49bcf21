"""A Bradley-Terry reward model: a scalar head on the model's features, trained on the same
preference pairs.

    p(y_w ≻ y_l | x) = σ(r(x, y_w) - r(x, y_l)),    L = -log σ(r(x, y_w) - r(x, y_l))
                                                                        (Ouyang et al. 2022, eq. 1)

r(x, y) is `ScalarHead`'s value at the last input token of prompt + completion, in the row layout of
tunix_lite.preference.data (the reply's end-of-turn token is only a target there, so the score has
read the whole reply). Only differences of rewards are learned: a constant shift of r changes
nothing.

    config = RewardModelConfig(model="tiny", steps=100, output_dir="runs/rm")
    result = run_reward_model(config)                     # held-out pairwise accuracy before/after
    reward = reward_model_reward("runs/rm/reward_model")  # or reward_model_reward(result.model,
                                                          #   result.tokenizer,
    reward(prompts, completions)                          #   seq_len=128); TRL-style: one float
                                                          #   per completion

A GRPO or PPO config uses it beside the programmatic rewards:
`rewards: [exact_match, reward_model:runs/rm/reward_model]`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.data.sft import padded_rows
from tunix_lite.models.heads import ScalarHead
from tunix_lite.preference.data import (PairConfig, PreferenceBatches, tokenize_preferences,
                                        tokenize_unpaired)
from tunix_lite.preference.scoring import scoring, shared_prompt_rows
from tunix_lite.training.harness import Run, RunResult
from tunix_lite.training.inputs import build_model, load_data, synthetic_pairs
from tunix_lite.training.losses import masked_mean
from tunix_lite.training.trainer import COUNT, evaluate, pad_batch, score_batch


def last_token_scores(model: ScalarHead, inputs, positions, segment_ids) -> jax.Array:
    """The head's value at each row's last real input token (the largest position): [N, T] ->
    [N]."""
    values = model(inputs, positions, segment_ids=segment_ids)
    last = jnp.argmax(positions, axis=-1)
    return jnp.take_along_axis(values, last[:, None], axis=-1)[:, 0]


def pair_scores(model: ScalarHead, batch: dict, shared_window: int | None = None) -> jax.Array:
    """[B, 2] (r(x, chosen), r(x, rejected)) of rows [B, 2, T], each the head's value at its row's
    last real input.

    shared_window: the data's longest completion (`PreferenceData.longest_completion`), for data
    whose `prompts_shared` holds: each pair's prompt then runs once for both completions
    (`scoring.shared_prompt_rows`), with the same scores (to float32 rounding) from B rows of
    T + W - 1 tokens instead of 2B rows of T."""
    B, _, T = batch["inputs"].shape
    if shared_window is None:
        return last_token_scores(model, *(batch[k].reshape(2 * B, T)
                                          for k in ("inputs", "positions", "segment_ids"))
                                 ).reshape(B, 2)
    inputs, positions, segments, first = shared_prompt_rows(batch, shared_window)
    values = model(inputs, positions, segment_ids=segments)  # [B, T + W - 1]
    index = jnp.arange(inputs.shape[1])
    chosen = jnp.argmax(jnp.where(index < T, positions, -1), axis=-1)  # row 0 as it was
    rejected = jnp.argmax(jnp.where((index <= first) | (index >= T), positions, -1),
                          axis=-1)  # prompt + tail
    return jnp.take_along_axis(values, jnp.stack([chosen, rejected], axis=-1), axis=-1)


@dataclasses.dataclass(frozen=True)
class BradleyTerryLoss:
    """The trainer's loss_fn(model, batch, frozen): -log σ(r_w - r_l), the mean over real pairs of
    rows [B, 2, T] (padded pairs count 0). Metrics: accuracy (the chosen completion scores higher),
    margin, and the mean rewards of each side (TRL's reward-trainer names). A frozen dataclass, as
    `PreferenceLoss`: equal settings hash equal, so the compiled step is reused. shared_window: see
    `pair_scores`."""

    shared_window: int | None = None

    def __call__(self, model: ScalarHead, batch: dict, frozen=None) -> tuple[jax.Array, dict]:
        scores = pair_scores(model, batch, self.shared_window)
        chosen, rejected = scores[:, 0], scores[:, 1]
        valid = (batch["weights"].sum((1, 2)) > 0).astype(jnp.float32)
        margin = chosen - rejected
        loss, count = masked_mean(-jax.nn.log_sigmoid(margin), valid)

        def mean(x):
            return masked_mean(x, valid)[0]

        return loss, {"loss": loss, "accuracy": mean(margin > 0), "margin": mean(margin),
                      "rewards/chosen": mean(chosen), "rewards/rejected": mean(rejected),
                      COUNT: count}


bradley_terry_loss = BradleyTerryLoss()  # on separate rows: any pair data


@dataclasses.dataclass
class RewardModelConfig(PairConfig):
    """A reward model's run: the shared parts and DPO's pair data (with lora_rank, the adapters and
    the head train). With an output_dir, the trained reward model is exported to
    output_dir/reward_model (`save_reward_model`)."""

    algorithm: ClassVar[str] = "reward_model"


def reward_head(backbone, seed: int) -> tuple[ScalarHead, object]:
    """(ScalarHead on `backbone`, the variables that train): the head, plus the backbone's weights
    or adapters."""
    from tunix_lite.lora import lora_layers

    model = ScalarHead(backbone, rngs=nnx.Rngs(seed))
    head = nnx.PathContains("head")
    return model, (nnx.Any(nnx.LoRAParam, head) if lora_layers(backbone) else nnx.Param)


def run_reward_model(config: RewardModelConfig, *, verbose: bool = True) -> RunResult:
    """Train a Bradley-Terry reward model on the config's pairs; before/after: held-out pairwise
    accuracy and margin. With an output_dir, a finished run writes output_dir/reward_model, which
    `reward_model_reward` loads."""
    run = Run(config, verbose=verbose)
    backbone, tokenizer = build_model(config)
    model, wrt = reward_head(backbone, config.seed)
    train, validation = load_data(config, synthetic_pairs)
    train_data = tokenize_preferences(train, tokenizer, config, "train pairs")
    val_data = tokenize_preferences(validation, tokenizer, config, "validation pairs")
    val_batches = PreferenceBatches(val_data, config.batch_size, shuffle=False).epoch(0)
    batches = PreferenceBatches(train_data, config.batch_size, seed=config.seed)
    report = f"train: {train_data.report}"
    run.say(report)
    scores = scoring(train_data, val_data)  # each pair's prompt runs once where the data allows
    loss_fn = BradleyTerryLoss(scores["completion_window"] if scores["shared_prompt"] else None)

    def eval_fn(model):
        return {k: v for k, v in evaluate(model, loss_fn, val_batches).items() if k != COUNT}

    result = run.train(model, tokenizer, loss_fn, batches.stream, eval_fn, wrt=wrt, report=report,
                       export=False, desc="reward")
    if run.out is not None and result.finished:
        save_reward_model(result.model, tokenizer, run.out / REWARD_MODEL_DIR,
                          seq_len=config.seq_len, template=config.template)
        run.say(f"wrote {run.out / REWARD_MODEL_DIR}")
    return result


# ----------------------------------------------------------------------------- saved reward models

REWARD_MODEL_DIR = "reward_model"  # run_reward_model's export, under output_dir
HEAD_FILE = "reward_head.safetensors"  # what makes a checkpoint directory a reward model


def save_reward_model(model: ScalarHead, tokenizer, directory: str | Path, *, seq_len: int,
                      template: str | None = None) -> Path:
    """directory/: the backbone as a Hugging Face-layout checkpoint with its tokenizer (LoRA
    adapters merged in), and HEAD_FILE: the head's kernel [D, 1] and bias [1], with the seq_len and
    chat template the scores were learned at. Written under a temporary name and renamed, so an
    interrupted save never looks complete."""
    from safetensors.numpy import save_file

    from tunix_lite.export import write_model
    from tunix_lite.training.harness import write_atomically

    def write(tmp: Path):
        write_model(model.backbone, tokenizer, tmp)
        save_file({"kernel": np.asarray(model.head.kernel[...], np.float32),
                   "bias": np.asarray(model.head.bias[...], np.float32)}, tmp / HEAD_FILE,
                  metadata={"seq_len": str(seq_len), "template": template or ""})

    directory = Path(directory)
    write_atomically(directory, write)
    return directory


def check_reward_model(path: str | Path) -> Path:
    """`path` if it holds a saved reward model, else a one-line ValueError saying how to make
    one."""
    path = Path(path).expanduser()
    if not (path / HEAD_FILE).is_file() or not (path / "config.json").is_file():
        what = ("does not exist" if not path.exists()
                else f"holds no reward model (no {HEAD_FILE} and config.json)")
        raise ValueError(f"{path} {what}; train one with "
                         "`tunix-lite train --config reward_model_tiny`, "
                         f"which writes output_dir/{REWARD_MODEL_DIR}")
    return path


def load_reward_model(path: str | Path) -> tuple[ScalarHead, object, dict]:
    """(the reward model, its tokenizer, {"seq_len", "template"}) from a directory
    `save_reward_model` wrote."""
    from safetensors import safe_open

    from tunix_lite.loading import load

    path = check_reward_model(path)
    backbone, tokenizer = load(path)
    model = ScalarHead(backbone, rngs=nnx.Rngs(0))
    with safe_open(path / HEAD_FILE, framework="numpy") as f:
        model.head.kernel[...], model.head.bias[...] = f.get_tensor("kernel"), f.get_tensor("bias")
        metadata = f.metadata()
    model.eval()
    return model, tokenizer, {"seq_len": int(metadata["seq_len"]),
                              "template": metadata["template"] or None}


def reward_model_reward(path_or_model: str | Path | ScalarHead, tokenizer=None, *,
                        seq_len: int | None = None, template: str | None = None,
                        batch_size: int = 16) -> RewardFunction:
    """A reward model as a TRL-style reward function for the RL trainer
    (`tunix_lite.rewards.functions`).

    path_or_model: a directory `save_reward_model` wrote (`run_reward_model` writes
    output_dir/reward_model): checked now, loaded at the first call, so a config naming it fails
    before any compute and validating it costs nothing; its seq_len and template are the saved ones
    unless given. Or a ScalarHead, with its tokenizer and seq_len."""
    if isinstance(path_or_model, ScalarHead):
        if tokenizer is None or seq_len is None:
            raise ValueError("reward_model_reward: a model needs its tokenizer and seq_len")
        return RewardFunction(path_or_model, tokenizer, seq_len=seq_len, template=template,
                              batch_size=batch_size)
    path = check_reward_model(path_or_model)
    return RewardFunction(None, None, seq_len=seq_len, template=template, batch_size=batch_size,
                          path=path)


class RewardFunction:
    """A trained reward model as a TRL-style reward function: reward(prompts, completions,
    **columns) -> one float per completion, so the RL trainer can use it beside the programmatic
    rewards. Prompts are user text (or message lists), completions the sampled replies. Long
    examples keep their end (the reply); batches have a fixed shape [batch_size, seq_len] (the last
    one padded), so scoring compiles once. Build it with `reward_model_reward`."""

    __name__ = "reward_model"  # TRL logs reward functions by their __name__

    def __init__(self, model: ScalarHead | None, tokenizer, *, seq_len: int | None,
                 template: str | None = None, batch_size: int = 16, path: Path | None = None):
        self.model, self.tokenizer, self.seq_len, self.template, self.batch_size = (
            model, tokenizer, seq_len, template, batch_size)
        self.path = path  # a saved reward model, loaded at the first call (model None until then)

    def load(self) -> RewardFunction:
        """Load the saved reward model now (the first call does it otherwise)."""
        if self.model is None:
            self.model, self.tokenizer, saved = load_reward_model(self.path)
            self.seq_len = self.seq_len or saved["seq_len"]
            self.template = self.template or saved["template"]
        return self

    def __call__(self, prompts: Sequence, completions: Sequence[str], **columns) -> list[float]:
        self.load()
        records = [{"prompt": p, "completion": c, "label": True}
                   for p, c in zip(prompts, completions, strict=True)]
        data = tokenize_unpaired(records, self.tokenizer, seq_len=self.seq_len,
                                 template=self.template, truncation="truncate",
                                 truncation_mode="keep_end")
        if len(data) != len(records):
            raise ValueError(f"{len(records) - len(data)} completions could not be scored "
                             f"(too long for seq_len={self.seq_len} even with the prompt cut, "
                             "or empty)")
        self.model.eval()
        scores = []
        for start in range(0, len(records), self.batch_size):
            # not the mismatched rows
            order = [2 * i for i in range(start, min(start + self.batch_size, len(records)))]
            rows = pad_batch(padded_rows(data.sequences, order), self.batch_size)
            out = score_batch(last_token_scores, self.model, rows["inputs"], rows["positions"],
                              rows["segment_ids"])
            scores += np.asarray(out)[:len(order)].tolist()
        return scores
