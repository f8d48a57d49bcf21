"""Sampled completions -> fixed-length training rows, so the train step compiles once whatever the
prompt lengths.

    out = sampler.generate(prompts, max_new_tokens=N, num_samples=G, temperature=1.0)
    batch = rollout_rows(out, seq_len=P_max + N, pad_id=padding_id(tokenizer),
                         logprobs=out.logprobs)

Row r holds prompt r followed by its completion (up to and including the stop token), left-aligned
and right-padded to seq_len, in the packing convention of `tunix_lite.data` (segment 1 real, 0
padding; position -1 on padding). `weights` is 1 exactly on the targets that are generated tokens
(the completion mask), so a loss over it never trains on the prompt or the padding. Arrays aligned
with the completion tokens ([R, N], e.g. the sampler's log-probs or per-token rewards) are moved
onto the same target positions.
"""

from __future__ import annotations

import numpy as np


def rollout_rows(output, seq_len: int, pad_id: int,
                 **per_token: np.ndarray) -> dict[str, np.ndarray]:
    """{inputs, targets, weights, positions, segment_ids} [R, seq_len] (+ each per_token array
    [R, seq_len]) from a `GenerateOutput` of R rows. seq_len must hold every row's prompt plus its
    completion, minus one (the longest prompt plus max_new_tokens always fits)."""
    R, N = output.tokens.shape
    total = output.prompt_lengths + output.lengths
    longest = int(np.argmax(total))
    if total[longest] - 1 > seq_len:
        raise ValueError(f"rollout_rows: a prompt of {int(output.prompt_lengths[longest])} tokens "
                         f"and its completion of {int(output.lengths[longest])} need seq_len >= "
                         f"{int(total[longest]) - 1}, got {seq_len}")
    for key, values in per_token.items():
        if np.shape(values) != (R, N):
            raise ValueError(f"rollout_rows: {key} has shape {np.shape(values)}, expected the "
                             f"completions' {(R, N)}")
    rows = {"inputs": np.full((R, seq_len), pad_id, np.int32),
            "targets": np.full((R, seq_len), pad_id, np.int32),
            "weights": np.zeros((R, seq_len), np.float32),
            "positions": np.full((R, seq_len), -1, np.int32),
            "segment_ids": np.zeros((R, seq_len), np.int32)}
    rows |= {key: np.zeros((R, seq_len), np.float32) for key in per_token}
    for r, (prompt, completion, length) in enumerate(zip(output.prompts, output.tokens,
                                                         output.lengths)):
        tokens = np.concatenate([prompt, completion[:length]])
        n, p = len(tokens) - 1, len(prompt)  # n targets; completion token i is target p - 1 + i
        rows["inputs"][r, :n], rows["targets"][r, :n] = tokens[:-1], tokens[1:]
        rows["positions"][r, :n], rows["segment_ids"][r, :n] = np.arange(n), 1
        rows["weights"][r, p - 1:n] = 1.0
        for key, values in per_token.items():
            rows[key][r, p - 1:n] = values[r, :length]
    return rows
