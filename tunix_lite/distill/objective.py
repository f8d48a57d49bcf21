"""DistillLoss: the distillation loss a Trainer runs,
`loss_fn(model, batch, frozen) -> (loss, metrics)`.

    loss_fn = DistillLoss(alpha=0.5, temperature=2.0)
    Trainer(student, tx, loss_fn, frozen=teacher)  # online: the teacher runs inside every step
    Trainer(student, tx, loss_fn)  # cached: batches carry teacher_ids/log_probs/rest

    loss = alpha * T^2 * D(p_t^T, p_s^T) + (1 - alpha) * CE
           + attention_weight * AT + feature_weight * FD

every term a mean over the trained tokens (batch["weights"]), so metrics["count"] is the number of
trained tokens and gradient accumulation stays exact. The equations are in `losses`; this module
only feeds them: both models' final features go through the vocabulary projections a chunk of tokens
at a time when the student has `logits_chunk` set (`losses.map_token_chunks`), attention maps are
computed from the hidden states with each model's own attention (`Block.attention_weights`), and
hidden states of mapped layers are compared through the student's learned projection
(`student.WithProjection`). A row with batch["labelled"] = 0 (a sequence the student sampled itself,
in on-policy distillation) gets no CE term: its tokens are not ground truth.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from tunix_lite.distill import losses
from tunix_lite.distill.cache import CACHE_KEYS
from tunix_lite.distill.student import WithProjection
from tunix_lite.training.losses import masked_mean, token_log_probs


# frozen: hashable by value, so equal losses share one compiled step
@dataclasses.dataclass(frozen=True)
class DistillLoss:
    alpha: float = 0.5  # weight of the soft (teacher) term; 1 - alpha goes to the hard CE term
    temperature: float = 2.0
    divergence: losses.Divergence = "forward"
    beta: float = 0.5  # the generalized JSD's mixture weight
    attention_weight: float = 0.0
    feature_weight: float = 0.0
    feature_distance: str = "mse"
    # (student block, teacher block) pairs for the two transfers
    layer_map: tuple[tuple[int, int], ...] = ()

    def __call__(self, model, batch: dict, frozen=None):
        student = model.student if isinstance(model, WithProjection) else model
        teacher, cached = frozen, CACHE_KEYS[0] in batch
        transfer = bool(self.layer_map) and (self.attention_weight > 0 or self.feature_weight > 0)
        teacher_forward = (self.alpha > 0 and not cached) or transfer
        if teacher is None and teacher_forward:
            raise ValueError("DistillLoss needs a teacher: pass it as the trainer's `frozen`, or "
                             f"batches carrying {', '.join(CACHE_KEYS)} from a TeacherCache "
                             "(logit KD only)")
        inputs, positions, segments = batch["inputs"], batch["positions"], batch.get("segment_ids")
        features, hidden = student.features(inputs, positions, segment_ids=segments,
                                            return_hidden=True)
        teacher_features = teacher_hidden = None
        if teacher_forward:
            teacher_features, teacher_hidden = teacher.features(inputs, positions,
                                                                segment_ids=segments,
                                                                return_hidden=True)
        kd, ce = self._per_token(student, teacher, batch, features, teacher_features)
        if "labelled" in batch:
            ce = ce * batch["labelled"][:, None]
        weights = batch["weights"]
        loss, metrics = losses.combine(kd, ce, weights, alpha=self.alpha)

        if self.attention_weight > 0 and self.layer_map:
            maps = [losses.attention_transfer(
                teacher.layers[t].attention_weights(teacher_hidden[t], positions,
                                                    segment_ids=segments),
                student.layers[s].attention_weights(hidden[s], positions, segment_ids=segments))
                for s, t in self.layer_map]
            metrics["attention"], _ = masked_mean(sum(maps) / len(maps), weights)
            loss = loss + self.attention_weight * metrics["attention"]
        if self.feature_weight > 0 and self.layer_map:
            if not isinstance(model, WithProjection):
                raise ValueError("feature transfer trains a projection beside the student: wrap it "
                                 "in WithProjection")
            distances = [losses.feature_distance(model.project(j, hidden[s + 1]),
                                                 teacher_hidden[t + 1], self.feature_distance)
                         for j, (s, t) in enumerate(self.layer_map)]
            metrics["feature"], _ = masked_mean(sum(distances) / len(distances), weights)
            loss = loss + self.feature_weight * metrics["feature"]
        return loss, metrics | {"loss": loss}

    def _per_token(self, student, teacher, batch, features, teacher_features):
        """(soft term, CE) [B, T]: the student's logits made once per chunk of tokens and used by
        both."""
        B, T, D = features.shape
        flat = lambda x: x.reshape(B * T, *x.shape[2:])
        args = [flat(features), flat(batch["targets"])]
        # CE only: no teacher term (an online teacher's forward is then dead code)
        if self.alpha == 0:
            def soft(logits):
                return jnp.zeros(logits.shape[:-1], jnp.float32)
        elif CACHE_KEYS[0] in batch:
            args += [flat(batch[key]) for key in CACHE_KEYS]

            def soft(logits, ids, log_probs, rest):
                return losses.top_k_kd_per_token(logits, ids, log_probs, rest,
                                                 temperature=self.temperature,
                                                 kind=self.divergence, beta=self.beta)
        else:
            args.append(flat(teacher_features))

            def soft(logits, teacher_x):
                return losses.kd_per_token(logits, teacher.logits(teacher_x),
                                           temperature=self.temperature, kind=self.divergence,
                                           beta=self.beta)

        def per_token(x, targets, *teacher_args):
            logits = student.logits(x)
            return soft(logits, *teacher_args), -token_log_probs(logits, targets)

        kd, ce = losses.map_token_chunks(per_token, student.logits_chunk, *args)
        return kd.reshape(B, T), ce.reshape(B, T)
