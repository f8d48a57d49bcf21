"""Knowledge distillation, end to end: a frozen teacher, a smaller student, one config.

    config = DistillConfig.from_yaml("distill_tiny")
                                          # or DistillConfig(teacher=..., ...)
    result = run_distill(config)
    result.before, result.after           # the student's validation loss and accuracy

`tunix-lite train --config distill_tiny` runs the same function. The student is `model`
(optionally cut to `student_layers` of it, with LoRA if `lora_rank`); the teacher is `teacher`,
loaded once, in eval mode, and passed to every step as the trainer's `frozen` argument (online), or
run once over the training set before training into a top-k cache that rides in the batches (`top_k`
> 0), after which its weights are freed. Teacher and student must share a vocabulary: the check runs
on the tokenizers before any weights are read.

The loss (objective.DistillLoss, equations in losses): alpha * T^2 * D(p_t^T, p_s^T) + (1 - alpha) *
CE, plus optional attention transfer and feature matching on mapped layers, plus on-policy steps
(GKD) where the student learns on its own samples. alpha = 0 with no transfer is plain fine-tuning
of the student: the CE-only baseline, with no teacher loaded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar, Literal

from flax import nnx

from tunix_lite.data.batches import Batches
from tunix_lite.data.sft import SFTBatches, padded_rows, tokenize_sft
from tunix_lite.distill.cache import TeacherCache, build_cache, cache_key, vocabulary_fingerprint
from tunix_lite.distill.objective import DistillLoss
from tunix_lite.distill.student import (WithProjection, check_layer_map, keep_layers,
                                        uniform_layer_map)
from tunix_lite.training.config import ConfigError, TrainConfig, option
from tunix_lite.training.evals import task_eval_fn, validation_loss_fn
from tunix_lite.training.harness import Run, RunResult
from tunix_lite.training.inputs import build_model, load_data, synthetic_tasks, trained_variables


@dataclasses.dataclass
class DistillConfig(TrainConfig):
    algorithm: ClassVar[str] = "distill"
    teacher: str | None = option(None, "the teacher: a model name or checkpoint directory with the "
                                       "student's tokenizer (null only for a CE-only run: alpha 0, "
                                       "no transfer)")
    student_layers: list[int] | None = option(None, "cut the student to these blocks of `model` "
                                                    "(e.g. [0, 5]: a 2-layer student from a "
                                                    "6-layer model); null: all")
    alpha: float = option(0.5, "weight of the teacher term; 1 - alpha weighs the CE on the data "
                               "(0: CE only)", ge=0, le=1)
    temperature: float = option(2.0, "softens both distributions (the teacher term is scaled by "
                                     "T^2)", gt=0)
    divergence: Literal["forward", "reverse", "jsd"] = option(
        "forward", "forward KL(teacher || student), reverse KL(student || teacher), or generalized "
                   "JSD")
    jsd_beta: float = option(0.5, "the generalized JSD's mixture weight of the teacher", gt=0, lt=1)
    top_k: int = option(0, "0: the teacher runs in every step; k > 0: its top-k distribution is "
                           "cached once before training and the teacher's weights are freed", ge=0)
    teacher_cache: str | None = option(None, "the cache file (computed there when missing, checked "
                                             "when present); null: output_dir/teacher_cache.npz, "
                                             "or memory only", resume="free")
    attention_weight: float = option(0.0, "weight of attention transfer on the layer_map pairs",
                                     ge=0)
    feature_weight: float = option(0.0, "weight of feature matching (through a learned "
                                        "projection)", ge=0)
    feature_distance: Literal["mse", "cosine"] = option("mse", "feature matching distance")
    layer_map: dict[int, int] | None = option(None, "student block -> teacher block for the "
                                                    "transfers (null: evenly spaced, the last "
                                                    "facing the last)")
    on_policy_ratio: float = option(0.0, "share of steps trained on the student's own samples "
                                         "(GKD's lambda)", ge=0, le=1)
    rollout_tokens: int = option(48, "tokens sampled per prompt on on-policy steps", ge=1)
    packing: bool = option(False, "several examples per row (online teacher only: a cache is per "
                                  "example)")
    n_accuracy: int = option(64, "validation prompts answered greedily for exact-match accuracy "
                                 "(0: none)", ge=0, resume="free")
    max_new_tokens: int | None = option(None, "answer budget of the accuracy check (null: from the "
                                              "longest reference completion)", ge=1, resume="free")

    @property
    def transfer(self) -> bool:
        return self.attention_weight > 0 or self.feature_weight > 0

    def check(self) -> None:
        if self.teacher is None and (self.alpha > 0 or self.transfer):
            raise ConfigError(f"teacher: needed for alpha={self.alpha}"
                              f"{' and transfer' if self.transfer else ''}; name the teacher "
                              "model, or set alpha: 0 for the CE-only baseline")
        if self.top_k and (self.transfer or self.on_policy_ratio):
            raise ConfigError("top_k: a cache holds the teacher's logits over the dataset only; "
                              "attention/feature transfer and on-policy steps need the teacher "
                              "online (top_k: 0)")
        if self.top_k and self.packing:
            raise ConfigError("packing: a teacher cache is per example; use packing: false with "
                              "top_k > 0")
        if self.on_policy_ratio and self.alpha == 0:
            raise ConfigError("on_policy_ratio: on-policy steps learn from the teacher only; "
                              "needs alpha > 0")


def check_vocabularies(config: DistillConfig) -> None:
    """Teacher and student must give every id the same meaning: compared on their tokenizers and
    configs before any weights are read; a mismatch is one ConfigError naming both."""
    from tunix_lite.loading import model_config, resolve_checkpoint
    from tunix_lite.tokenizer import load_tokenizer

    student_tok = load_tokenizer(resolve_checkpoint(config.model))
    teacher_tok = load_tokenizer(resolve_checkpoint(config.teacher))
    student_cfg, teacher_cfg = model_config(config.model), model_config(config.teacher)
    if vocabulary_fingerprint(student_tok) != vocabulary_fingerprint(teacher_tok):
        raise ConfigError(
            f"teacher: {config.teacher} and the student {config.model} have different "
            f"tokenizers ({teacher_tok.vocab_size:,} vs {student_tok.vocab_size:,} pieces, "
            f"fingerprints {vocabulary_fingerprint(teacher_tok)} vs "
            f"{vocabulary_fingerprint(student_tok)}); logit distillation compares distributions "
            "over the same ids, so pick a teacher with the student's tokenizer")
    if student_cfg and teacher_cfg and student_cfg.vocab_size != teacher_cfg.vocab_size:
        raise ConfigError(f"teacher: {config.teacher} has {teacher_cfg.vocab_size:,} output "
                          f"logits, the student {config.model} {student_cfg.vocab_size:,}; they "
                          "must match")


def check_layers(config: DistillConfig) -> None:
    """student_layers and layer_map against the two models' depths, read from their configs before
    any weights load; a bad index is one ConfigError naming the key."""
    from tunix_lite.loading import model_config

    student_cfg = model_config(config.model)
    # a hub id: its depth is known after the download (keep_layers checks it then)
    if student_cfg is None:
        return
    total = student_cfg.num_layers
    layers = config.student_layers
    if layers and (any(not 0 <= i < total for i in layers) or len(set(layers)) != len(layers)):
        raise ConfigError(f"student_layers: {layers} must be distinct block indices of "
                          f"{config.model}, which has blocks 0..{total - 1}")
    teacher_cfg = model_config(config.teacher) if config.teacher is not None else None
    if config.transfer and config.layer_map is not None and teacher_cfg is not None:
        try:
            check_layer_map(config.layer_map, len(layers) if layers else total,
                            teacher_cfg.num_layers)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _layer_map(config: DistillConfig, student, teacher) -> tuple[tuple[int, int], ...]:
    if not config.transfer:
        return ()
    L_s, L_t = student.config.num_layers, teacher.config.num_layers
    layer_map = config.layer_map if config.layer_map is not None else uniform_layer_map(L_s, L_t)
    try:
        check_layer_map(layer_map, L_s, L_t)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return tuple(sorted(layer_map.items()))


def _teacher_cache(config: DistillConfig, run: Run, teacher, tokenizer, rows: dict) -> TeacherCache:
    """Load the cache if its file exists (checked against this run), else compute it (and save it if
    it has a place). A file that does not fit stops the run with a CacheError."""
    path = (Path(config.teacher_cache) if config.teacher_cache
            else (run.out / "teacher_cache.npz" if run.out else None))
    expect = cache_key(tokenizer, rows, k=config.top_k, temperature=config.temperature)
    expect["vocab_size"] = teacher.config.vocab_size
    if path is not None and path.exists():
        cache = TeacherCache.load(path, expect=expect)
        run.say(f"loaded {path}")
    else:
        cache = build_cache(teacher, rows, k=config.top_k, temperature=config.temperature,
                            tokenizer=tokenizer,
                            batch_size=config.batch_size, chunk=config.logits_chunk or None,
                            teacher_name=config.teacher)
        if path is not None:
            cache.save(path)
            run.say(f"wrote {path}")
    run.say(cache.memory_report())
    return cache


def run_distill(config: DistillConfig, *, verbose: bool = True) -> RunResult:
    run = Run(config, verbose=verbose)  # checks output_dir (and a resume) before any compute
    if config.teacher is not None:
        check_vocabularies(config)
    check_layers(config)
    model, tokenizer = build_model(config)
    if config.student_layers:
        keep_layers(model, config.student_layers)
    teacher = None
    if config.teacher is not None:
        from tunix_lite.loading import load
        from tunix_lite.models import set_training_options

        teacher, _ = load(config.teacher)
        teacher.eval()
        set_training_options(teacher, compute_dtype=config.compute_dtype,
                             logits_chunk=config.logits_chunk)
    layer_map = _layer_map(config, model, teacher) if teacher is not None else ()
    loss_fn = DistillLoss(alpha=config.alpha, temperature=config.temperature,
                          divergence=config.divergence, beta=config.jsd_beta,
                          attention_weight=config.attention_weight,
                          feature_weight=config.feature_weight,
                          feature_distance=config.feature_distance, layer_map=layer_map)

    train, validation = load_data(config, synthetic_tasks)
    tokenize = dict(tokenizer=tokenizer, seq_len=config.seq_len, template=config.template,
                    truncation=config.truncation)
    train_data, val_data = tokenize_sft(train, **tokenize), tokenize_sft(validation, **tokenize)
    report = f"train: {train_data.report}"
    if config.top_k:
        rows = padded_rows(train_data, range(len(train_data)))
        cache = _teacher_cache(config, run, teacher, tokenizer, rows)
        report += f"; {cache.memory_report()}"
        teacher = None  # the cache replaces it: its weights are freed before training starts
        batches = Batches(len(train_data), lambda order: padded_rows(train_data, order),
                          config.batch_size,
                          seed=config.seed, extras=cache.extras())
    else:
        batches = SFTBatches(train_data, config.batch_size, seed=config.seed,
                             packing=config.packing)
    stream = batches.stream
    if config.on_policy_ratio:
        stream = _on_policy_stream(config, model, tokenizer, train, batches).stream
    run.say(report)

    trained = model
    wrt = trained_variables(config)
    if config.feature_weight:
        trained = WithProjection(model, teacher_dim=teacher.config.embed_dim, pairs=len(layer_map),
                                 rngs=nnx.Rngs(config.seed))
        if config.lora_rank:
            wrt = nnx.Any(wrt, nnx.PathContains("projection"))
    loss_eval = validation_loss_fn(val_data, config.batch_size)
    task_eval = task_eval_fn(config, model, tokenizer, validation,
                             max_new_tokens=config.max_new_tokens)

    def eval_fn(_):
        return loss_eval(model) | (task_eval(model) if task_eval else {})

    result = run.train(trained, tokenizer, loss_fn, stream, eval_fn, frozen=teacher, wrt=wrt,
                       report=report, export=trained is model, desc="distill")
    if trained is not model and run.out is not None:
        # the student alone: the projection is dropped
        run.export(model, tokenizer, result.before, result.after)
    return dataclasses.replace(result, model=model)


def _on_policy_stream(config: DistillConfig, model, tokenizer, train, batches):
    from tunix_lite.chat import format_chat
    from tunix_lite.data.sft import record_messages
    from tunix_lite.distill.on_policy import OnPolicyBatches
    from tunix_lite.sampler import Sampler

    prompts = []
    # each conversation up to its first reply, ending with the reply's header
    for i, record in enumerate(train):
        messages = record_messages(record, i)
        first_reply = next((j for j, m in enumerate(messages) if m["role"] == "assistant"),
                           len(messages))
        prompts.append(format_chat(tokenizer, messages[:first_reply], template=config.template))
    longest = max(len(p) for p in prompts)
    if longest + config.rollout_tokens - 1 > config.seq_len:
        raise ConfigError(f"rollout_tokens: a prompt of {longest} tokens plus "
                          f"{config.rollout_tokens} sampled tokens needs seq_len >= "
                          f"{longest + config.rollout_tokens - 1} (seq_len is "
                          f"{config.seq_len}); lower rollout_tokens to "
                          f"{config.seq_len + 1 - longest} or raise seq_len")
    return OnPolicyBatches(batches, Sampler(model, tokenizer), prompts,
                           ratio=config.on_policy_ratio, max_new_tokens=config.rollout_tokens,
                           seq_len=config.seq_len, seed=config.seed)
