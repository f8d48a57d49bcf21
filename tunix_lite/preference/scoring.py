"""How a policy scores preference rows: each pair's two completions' summed log-probs, cheaply.

    scores = scoring(train_data, val_data)         # {"completion_window", "shared_prompt"}
    sums, counts = completion_sums(model, batch, scores["completion_window"],
                                   scores["shared_prompt"])                   # [B, 2] each
    ref_logps = reference_log_probs(reference, data, batch_size, **scores)    # [n, 2]

Two savings, both exact: the lm head runs only on a window of each row's completion
(`completion_sums`), and each pair's prompt runs through the model once for both completions
(`shared_prompt_rows`). DPO's loss and the reward model read pair rows through these functions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.models.transformer import SHARED_PREFIX
from tunix_lite.preference import losses
from tunix_lite.preference.data import PreferenceBatches, PreferenceData
from tunix_lite.training.losses import feature_log_probs
from tunix_lite.training.trainer import pad_batch, score_batch

SEQUENCE_KEYS = ("inputs", "targets", "weights", "positions", "segment_ids")


def scoring(*data: PreferenceData) -> dict:
    """`completion_sums`'s window and shared_prompt for rows of all of `data`: the longest
    completion, and whether every example's prompt can run once for both of its rows."""
    return {"completion_window": max(d.longest_completion for d in data),
            "shared_prompt": all(d.prompts_shared for d in data)}


def completion_sums(model, batch: dict, window: int | None = None,
                    shared_prompt: bool = False) -> tuple[jax.Array, jax.Array]:
    """(summed completion log-probs, completion token counts), each [B, 2], of rows [B, 2, T]: the
    2B sequences run through the model as one [2B, T] batch, or with `shared_prompt` as B rows of
    the prompt and both completions.

    window: the longest completion any row has (`PreferenceData.longest_completion`). The lm head
    then runs on the `window` positions from each row's first completion target instead of on all
    T: the prompt's positions need no logits (about half the lm head's work for DPO-shaped data,
    most of it for a 262k vocabulary). A row with a longer completion would lose its last tokens:
    pass a window that covers the data, or None for all T.
    shared_prompt (needs a window; only for data whose `prompts_shared` holds): see
    `shared_prompt_features`."""
    B, _, T = batch["inputs"].shape
    if shared_prompt and window is not None:
        features, targets, weights = shared_prompt_features(model, batch, window)
    else:
        flat = {key: batch[key].reshape(2 * B, T) for key in SEQUENCE_KEYS if key in batch}
        features = model.features(flat["inputs"], flat["positions"],
                                  segment_ids=flat.get("segment_ids"))  # [2B, T, D]
        targets, weights = flat["targets"], flat["weights"]
        if window is not None and window < T:
            # each row's first completion target
            start = jnp.minimum(jnp.argmax(weights > 0, axis=-1), T - window)
            keep = start[:, None] + jnp.arange(window)  # [2B, window]
            features = jnp.take_along_axis(features, keep[..., None], axis=1)
            targets, weights = (jnp.take_along_axis(x, keep, axis=1) for x in (targets, weights))
    token_log_probs = feature_log_probs(model, features, targets)
    return (losses.completion_log_probs(token_log_probs, weights).reshape(B, 2),
            jnp.sum(batch["weights"], axis=-1))


def shared_prompt_rows(batch: dict,
                       window: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(inputs, positions, segment_ids), each [B, T + W - 1], and first [B, 1]: each pair of rows
    [B, 2, T] as one row whose prompt serves both completions, W = window (the longest
    completion).

    Both rows of a pair are the same prompt up to input f = first, the last prompt token (whose
    output predicts the first completion token), then differ. Row 0 (prompt + chosen) stays as it
    is; the rejected completion's W - 1 inputs after f are appended to it, at their own positions.
    Segments keep the two completions apart: the prompt is segment SHARED_PREFIX, which every
    segment sees (`attention_mask`), the chosen side 1 and the rejected side 2. So every token sees
    exactly what it sees in its own row, and the model runs on B rows of T + W - 1 tokens instead
    of 2B rows of T (a quarter fewer for a prompt as long as its completions). Attention is
    position-based, so sliding windows and RoPE need nothing more. Only for data whose
    `PreferenceData.prompts_shared` holds."""
    B, _, T = batch["inputs"].shape
    first = jnp.argmax(batch["weights"][:, 0] > 0, axis=-1)[:, None]  # [B, 1]
    tail = first + 1 + jnp.arange(window - 1)  # [B, W-1] the rejected row's inputs after the prompt
    inside = tail < T
    tail = jnp.minimum(tail, T - 1)

    def rejected_tail(key):
        return jnp.take_along_axis(batch[key][:, 1], tail, axis=1)

    inputs = jnp.concatenate([batch["inputs"][:, 0], rejected_tail("inputs")], axis=1)
    positions = jnp.concatenate(
        [batch["positions"][:, 0], jnp.where(inside, rejected_tail("positions"), -1)], axis=1)
    segments = jnp.concatenate(
        [jnp.where(jnp.arange(T) <= first, SHARED_PREFIX, 1), jnp.full((B, window - 1), 2)], axis=1)
    return inputs, positions, segments.astype(jnp.int32), first


def shared_prompt_features(model, batch: dict,
                           window: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(features [2B, W, D], targets [2B, W], weights [2B, W]) of each row's completion window,
    W = window, with each pair's prompt run through the model once instead of twice
    (`shared_prompt_rows`): the log-probs are those of the separate rows (to float32 rounding),
    gradients included."""
    B, _, T = batch["inputs"].shape
    inputs, positions, segments, first = shared_prompt_rows(batch, window)
    features = model.features(inputs, positions, segment_ids=segments)  # [B, T + W - 1, D]

    keep = jnp.minimum(first, T - window) + jnp.arange(window)  # [B, W] both rows' window
    # the prompt is row 0's; the rejected side's tokens were appended after T
    rejected = jnp.where(keep <= first, keep, T + keep - first - 1)
    where = jnp.stack([keep, rejected], axis=1).reshape(B, 2 * window)
    features = jnp.take_along_axis(features, where[..., None], axis=1).reshape(2 * B, window, -1)
    targets, weights = (jnp.take_along_axis(batch[key], keep[:, None, :], axis=2)
                        .reshape(2 * B, window) for key in ("targets", "weights"))
    return features, targets, weights


def reference_log_probs(reference: nnx.Module, data: PreferenceData, batch_size: int,
                        **scores) -> np.ndarray:
    """The reference's summed completion log-probs of every example, [n, 2], in fixed batches (one
    compile). scores: `scoring`'s window and shared_prompt, as the policy is scored (default:
    `scoring(data)`)."""
    scores = scores or scoring(data)
    out = []
    for batch in PreferenceBatches(data, batch_size, shuffle=False).epoch(0):
        n = len(batch["inputs"])
        sums, _ = score_batch(completion_sums, reference, pad_batch(batch, batch_size),
                              window=scores["completion_window"],
                              shared_prompt=scores["shared_prompt"])
        out.append(np.asarray(sums)[:n])
    return np.concatenate(out)
