"""Preference tuning end to end: one config in, a trained policy, its history and before/after
scores out.

    config = DPOConfig.from_yaml("dpo_tiny")
                                          # loss_type: sigmoid, ipo, hinge, robust, dpop, orpo, ...
    result = run_dpo(config)
    result.before, result.after           # held-out pair metrics, greedy accuracy and answer flaws

`tunix-lite train --config FILE.yaml` with `algorithm: dpo` runs the same function. The policy
starts from `model`; the reference π_ref is that same starting model, frozen. `reference` says how
the loss gets π_ref's log-probs:
- "precomputed" (default): one pass of the reference over every pair before training; the [n, 2]
  log-probs ride in the batches as an extra (`ref_logps`), so a training step runs the policy only.
- "online": the reference runs inside every step on the same micro-batch, as the trainer's `frozen`
  argument. With LoRA it is the base with the adapters off (`lora.without_adapters`: no second copy
  of the weights); with full fine-tuning, a clone of the model taken before training (it shares the
  arrays until the first update).
ORPO and SimPO need no reference. The losses themselves are pure functions in
tunix_lite.preference.losses.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar, Literal

import jax
import jax.numpy as jnp

from tunix_lite.preference import losses
from tunix_lite.preference.data import (PairConfig, PreferenceBatches, PreferenceData,
                                        tokenize_preferences)
from tunix_lite.preference.evaluation import generation_eval, prompt_records
from tunix_lite.preference.on_policy import on_policy_pairs
from tunix_lite.preference.scoring import completion_sums, reference_log_probs, scoring
from tunix_lite.training.config import ConfigError, option
from tunix_lite.training.harness import Run, RunResult
from tunix_lite.training.inputs import build_model, load_data, reference_policy, synthetic_pairs
from tunix_lite.training.trainer import COUNT, evaluate

LossType = Literal["sigmoid", "ipo", "hinge", "robust", "dpop", "orpo", "simpo", "kto"]
SMOOTHED = ("sigmoid", "robust", "simpo")  # the losses that read label_smoothing


@dataclasses.dataclass
class DPOConfig(PairConfig):
    algorithm: ClassVar[str] = "dpo"
    loss_type: LossType = option("sigmoid", "sigmoid (DPO) | ipo | hinge | robust | dpop | orpo | "
                                            "simpo | kto; see tunix_lite/preference/losses.py")
    beta: float = option(0.1, "DPO's beta: the strength of the anchor to the reference (ipo: tau; "
                              "orpo: the odds-ratio weight lambda; simpo: the reward scale, ~2)",
                         gt=0)
    label_smoothing: float = option(0.0, "probability that a label is flipped (sigmoid: cDPO, "
                                         "robust: rDPO, simpo)", ge=0, lt=0.5)
    simpo_gamma: float = option(0.5, "SimPO's target reward margin gamma", ge=0)
    dpop_lambda: float = option(50.0, "DPOP's lambda: the weight of the chosen completion's fall "
                                      "below the reference", ge=0)
    normalize_length: bool | None = option(None, "score completions by their per-token mean "
                                                 "log-prob instead of the sum (null: the loss's "
                                                 "convention, on for ipo, orpo and simpo)")
    nll_weight: float = option(0.0, "add this times the chosen completion's per-token NLL (RPO; "
                                    "not for orpo, which has its own, or kto)", ge=0)
    desirable_weight: float = option(1.0, "KTO: weight of the desirable examples' loss", gt=0)
    undesirable_weight: float = option(1.0, "KTO: weight of the undesirable examples' loss", gt=0)
    on_policy_rejected: bool = option(False, "replace each training pair's rejected side by the "
                                             "starting model's own greedy answer where that answer "
                                             "is flawed (needs an answer column)")
    on_policy_samples: int = option(0, "sample this many replies per training prompt from the "
                                       "starting model (temperature 1); where the answer check "
                                       "accepts one and refuses another, the pair becomes those "
                                       "two, both the model's own (0: off)", ge=0)
    on_policy_domains: list[str] | None = option(
        None, "with on_policy_rejected or on_policy_samples: only pairs of these domains (a domain "
              "column) take the model's own replies; the rest keep theirs (null: every pair)")
    reference: Literal["precomputed", "online"] = option(
        "precomputed", "reference log-probs computed once before training (a batch extra) or in "
                       "every step")
    n_accuracy: int = option(64, "distinct validation prompts answered greedily for exact match "
                                 "and answer flaws (0: none; needs an answer column)", ge=0,
                             resume="free")
    max_new_tokens: int | None = option(None, "answer budget of that check (null: from the "
                                              "longest chosen completion)", ge=1, resume="free")

    def check(self) -> None:
        if self.label_smoothing and self.loss_type not in SMOOTHED:
            raise ConfigError(f"label_smoothing: {self.label_smoothing} has no effect with "
                              f"loss_type {self.loss_type!r}; it applies to {', '.join(SMOOTHED)}")
        if self.nll_weight and self.loss_type in ("orpo", "kto"):
            why = "has its own NLL term" if self.loss_type == "orpo" else "has no chosen completion"
            raise ConfigError(f"nll_weight: {self.nll_weight} is for the pairwise losses; "
                              f"{self.loss_type} {why}")
        if self.reference == "online" and self.loss_type in losses.REFERENCE_FREE:
            raise ConfigError(f"reference: 'online' has no effect with loss_type "
                              f"{self.loss_type!r}, which needs no reference model; remove the key")
        if (self.loss_type != "kto"
                and (self.desirable_weight, self.undesirable_weight) != (1.0, 1.0)):
            raise ConfigError(f"desirable_weight/undesirable_weight: KTO's class weights have no "
                              f"effect with loss_type {self.loss_type!r}; remove them or use "
                              "loss_type: kto")
        if self.loss_type != "dpop" and self.dpop_lambda != 50.0:
            raise ConfigError(f"dpop_lambda: {self.dpop_lambda} has no effect with loss_type "
                              f"{self.loss_type!r}; remove it or use loss_type: dpop")
        for key in ("on_policy_rejected", "on_policy_samples"):
            if getattr(self, key) and self.loss_type == "kto":
                raise ConfigError(f"{key}: builds pairs; KTO's unpaired examples have no "
                                  "rejected side")
        if self.on_policy_samples == 1:
            raise ConfigError("on_policy_samples: 1 reply cannot be both accepted and refused; "
                              "use 0 (off) or at least 2")
        on_policy = self.on_policy_rejected or self.on_policy_samples
        if self.on_policy_domains is not None and not (on_policy and self.on_policy_domains):
            raise ConfigError(f"on_policy_domains: {self.on_policy_domains} needs "
                              "on_policy_rejected: true or on_policy_samples, and at least one "
                              "domain")
        if self.loss_type == "robust" and not self.label_smoothing:
            raise ConfigError("label_smoothing: the robust loss needs the flip probability, e.g. "
                              "0.1 (0 is plain DPO)")


@dataclasses.dataclass(frozen=True)
class PreferenceLoss:
    """The trainer's loss_fn(model, batch, frozen) for every preference loss. A frozen dataclass:
    equal settings hash equal, so new trainers and evaluations with the same settings reuse the
    compiled step.

    batch: rows [B, 2, T] (PreferenceBatches) and, with a precomputed reference, "ref_logps" [B, 2]
    (summed completion log-probs); KTO's batches also carry "label" [B]. Without "ref_logps",
    `frozen` is the reference.
    """

    loss_type: str = "sigmoid"
    beta: float = 0.1
    label_smoothing: float = 0.0
    simpo_gamma: float = 0.5
    dpop_lambda: float = 50.0
    normalize_length: bool | None = None
    nll_weight: float = 0.0
    desirable_weight: float = 1.0
    undesirable_weight: float = 1.0
    completion_window: int | None = None  # see completion_sums: the longest completion of any row
    # see completion_sums: each pair's prompt runs once (PreferenceData.prompts_shared)
    shared_prompt: bool = False

    @classmethod
    def from_config(cls, config: DPOConfig, *data: PreferenceData) -> PreferenceLoss:
        """The loss `config` names, scoring the rows of every one of `data` (`scoring`)."""
        settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls)
                    if hasattr(config, f.name)}
        return cls(**settings, **scoring(*data))

    @property
    def scoring_settings(self) -> dict:
        """`scoring`'s settings this loss reads rows with:
        `reference_log_probs(..., **loss.scoring_settings)` scores the reference as the policy is
        scored."""
        return {"completion_window": self.completion_window, "shared_prompt": self.shared_prompt}

    @property
    def normalize(self) -> bool:
        return (self.loss_type in ("ipo", "orpo", "simpo") if self.normalize_length is None
                else self.normalize_length)

    @property
    def uses_reference(self) -> bool:
        return self.loss_type not in losses.REFERENCE_FREE

    def __call__(self, model, batch: dict, frozen=None) -> tuple[jax.Array, dict]:
        sums, counts = completion_sums(model, batch, self.completion_window,
                                       self.shared_prompt)  # [B, 2] each
        ref_sums = None
        if self.uses_reference:
            if "ref_logps" in batch:
                ref_sums = batch["ref_logps"]
            elif frozen is not None:
                ref_sums = jax.lax.stop_gradient(
                    completion_sums(frozen, batch, self.completion_window, self.shared_prompt)[0])
            else:
                raise ValueError(f"the {self.loss_type} loss needs the reference: a 'ref_logps' "
                                 "batch entry or `frozen`")
        return self.loss_from_sums(sums, counts, ref_sums, batch.get("label"))

    def loss_from_sums(self, sums, counts, ref_sums=None, label=None) -> tuple[jax.Array, dict]:
        """The loss and metrics from summed completion log-probs [B, 2] (chosen, rejected; KTO:
        completion, mismatched completion), their token counts [B, 2], the reference's sums [B, 2]
        and KTO's labels [B]."""
        valid = (counts.sum(-1) > 0).astype(jnp.float32)  # padded pairs have no completion tokens

        def per_token(s):
            return s / jnp.where(counts > 0, counts, 1.0)

        logps = per_token(sums) if self.normalize else sums
        chosen, rejected = logps[:, 0], logps[:, 1]
        if self.loss_type == "orpo":
            return losses.orpo(chosen, rejected, -per_token(sums)[:, 0], valid, lam=self.beta)
        if self.loss_type == "kto":
            ref = per_token(ref_sums) if self.normalize else ref_sums
            return losses.kto(chosen, ref[:, 0], rejected, ref[:, 1], label, valid, beta=self.beta,
                              desirable_weight=self.desirable_weight,
                              undesirable_weight=self.undesirable_weight)
        if self.loss_type == "simpo":
            loss, metrics = losses.simpo(chosen, rejected, valid, beta=self.beta,
                                         gamma=self.simpo_gamma,
                                         label_smoothing=self.label_smoothing)
        else:
            ref = per_token(ref_sums) if self.normalize else ref_sums
            options = ({"label_smoothing": self.label_smoothing} if self.loss_type in SMOOTHED else
                       {"lam": self.dpop_lambda} if self.loss_type == "dpop" else {})
            loss, metrics = losses.PAIRWISE[self.loss_type](chosen, rejected, ref[:, 0], ref[:, 1],
                                                            valid, beta=self.beta, **options)
            # log the summed log-probs and rewards whatever the loss reads, as TRL does
            if self.normalize:
                metrics |= losses.dpo_metrics(sums[:, 0], sums[:, 1], ref_sums[:, 0],
                                              ref_sums[:, 1], valid, self.beta)
        if self.nll_weight:
            return losses.with_nll(loss, metrics, -per_token(sums)[:, 0], valid,
                                   weight=self.nll_weight)
        return loss, metrics


# ----------------------------------------------------------------------------- data and the driver


def _check_model_path(config: DPOConfig) -> None:
    """A model given as a local path that does not exist is usually the SFT stage not run yet: say
    so before any work. (One slash is a hub id, as tunix_lite.load reads names.)"""
    name = config.model
    if ((name.startswith((".", "/", "~")) or name.count("/") > 1)
            and not Path(name).expanduser().is_dir()):
        raise ConfigError(f"model: {config.model} does not exist; train it first "
                          "(tunix_lite/configs/dpo_tiny.yaml starts from the output of "
                          "`tunix-lite train --config sft_tiny`) or choose another "
                          "model")


def run_dpo(config: DPOConfig, *, verbose: bool = True) -> RunResult:
    _check_model_path(config)
    run = Run(config, verbose=verbose)  # checks output_dir (and a resume) before any compute
    model, tokenizer = build_model(config)
    train, validation = load_data(config, synthetic_pairs)
    if config.on_policy_rejected or config.on_policy_samples:
        run.say(f"answering {len(train)} training prompts with the starting model "
                "(on-policy pairs)...")
        train, made = on_policy_pairs(model, tokenizer, train, greedy=config.on_policy_rejected,
                                      samples=config.on_policy_samples,
                                      domains=config.on_policy_domains, template=config.template,
                                      max_new_tokens=config.max_new_tokens, seed=config.seed)
        if config.on_policy_samples:
            run.say(f"{made['sampled']} of {len(train)} pairs are now two of the model's own "
                    f"replies (accepted, refused) from {config.on_policy_samples} samples")
        if config.on_policy_rejected:
            run.say(f"{made['rejected']} of {len(train)} pairs now reject the model's own flawed "
                    "greedy answer")
    synthetic = config.train_data == "synthetic"
    kto = config.loss_type == "kto"
    train_source = "synthetic train pairs" if synthetic else config.train_data
    val_source = "synthetic validation pairs" if synthetic else config.validation_data
    train_data = tokenize_preferences(train, tokenizer, config, train_source, unpaired=kto)
    val_data = tokenize_preferences(validation, tokenizer, config, val_source, unpaired=kto)
    loss_fn = PreferenceLoss.from_config(config, train_data, val_data)

    frozen, train_extras, val_extras = None, {}, {}
    if loss_fn.uses_reference:
        reference = reference_policy(model)
        if config.reference == "online":
            frozen = reference
        else:
            run.say(f"reference log-probs of {len(train_data)} + {len(val_data)} examples...")
            scores = loss_fn.scoring_settings
            train_extras = {"ref_logps": reference_log_probs(reference, train_data,
                                                             config.batch_size, **scores)}
            val_extras = {"ref_logps": reference_log_probs(reference, val_data, config.batch_size,
                                                           **scores)}
    batches = PreferenceBatches(train_data, config.batch_size, seed=config.seed,
                                extras=train_extras)
    val_batches = PreferenceBatches(val_data, config.batch_size, shuffle=False,
                                    extras=val_extras).epoch(0)
    stats = batches.stats()
    report = (f"train: {train_data.report}; {stats['pairs']} {'examples' if kto else 'pairs'}, "
              f"{stats['fill']:.0%} of row tokens real, {stats['completion']:.0%} completion")
    run.say(report)
    answers = generation_eval_fn(config, model, tokenizer, validation)

    def eval_fn(model):
        scores = {k: v for k, v in evaluate(model, loss_fn, val_batches, frozen=frozen).items()
                  if k != COUNT}
        return scores | (answers(model) if answers else {})

    return run.train(model, tokenizer, loss_fn, batches.stream, eval_fn, frozen=frozen,
                     report=report, desc=config.loss_type)


def generation_eval_fn(config: DPOConfig, model, tokenizer, validation):
    """Greedy answers to the first n_accuracy distinct validation prompts: exact match, format and
    answer flaws (None when the records have no answer column or plain-text prompts, or n_accuracy
    is 0)."""
    rows = list(validation)
    if (not config.n_accuracy or not rows or "answer" not in rows[0]
            or not isinstance(rows[0].get("prompt"), str)):
        return None
    records = prompt_records(rows, config.n_accuracy)
    return generation_eval(model, tokenizer, records, template=config.template,
                           max_new_tokens=config.max_new_tokens)
