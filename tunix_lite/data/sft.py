"""Supervised fine-tuning data: chat or prompt/completion records in, fixed [B, T] integer batches
out.

    data = tokenize_sft(dataset, tokenizer, seq_len=128)  # formats, tokenizes, masks, reports
                                                          # truncation
    batches = SFTBatches(data, batch_size=16, seed=0)  # shuffled per epoch, padded or packed rows
    for batch in batches.stream():  # {inputs, targets, weights, positions, segment_ids}
        trainer.step(batch)

Rows follow the one packing convention of `tunix_lite.data`: segment id 0 is padding (position -1,
weight 0), real tokens have segment ids 1, 2, ... (one per example in a row), positions restart at 0
for each example.

A record is either {"messages": [{"role", "content"}, ...]} or {"prompt": str, "completion": str}
(column names configurable). The loss trains on the assistant replies (and the end-of-turn token
that closes each, so the model learns to stop); `train_on_prompt=True` trains on every token. Row t
of a batch predicts targets[t] from inputs[..t]: for an example of n tokens, inputs are ids[:-1] and
targets ids[1:], so a sequence of T model inputs holds an example of up to T + 1 tokens.

Only numbers leave this module: strings are tokenized here, and a malformed record is reported with
its row index before anything reaches jit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Literal

import numpy as np

from tunix_lite.chat import format_chat_with_mask
from tunix_lite.data.batches import Batches
from tunix_lite.tokenizer import padding_id

Truncation = Literal["error", "drop", "truncate"]


@dataclasses.dataclass
class TruncationReport:
    """What happened to examples longer than the sequence: nothing is cut silently."""

    policy: str
    max_tokens: int  # the longest example that fits: seq_len + 1 tokens
    rows: int = 0
    dropped: int = 0
    truncated: int = 0
    tokens_cut: int = 0
    trained_tokens_cut: int = 0  # of those, tokens the loss would have trained on
    longest: int = 0
    # examples with an assistant reply that is empty or blank: they teach "stop at once"
    empty_replies: int = 0
    first_empty_row: int | None = None

    def __str__(self) -> str:
        text = f"{self.rows} examples, longest {self.longest} tokens (limit {self.max_tokens})"
        if self.dropped:
            text += f"; dropped {self.dropped} longer ones"
        if self.truncated:
            text += (f"; truncated {self.truncated} longer ones, cutting {self.tokens_cut} tokens "
                     f"({self.trained_tokens_cut} of them trained on)")
        if self.empty_replies:
            text += (f"; {self.empty_replies} with an empty assistant reply "
                     f"(first: row {self.first_empty_row}), which trains the model to stop at once")
        return text


@dataclasses.dataclass
class SFTData:
    """Tokenized examples: ids and a 0/1 loss mask per example (variable length, at most
    seq_len + 1)."""

    ids: list[np.ndarray]
    mask: list[np.ndarray]
    seq_len: int
    pad_id: int
    report: TruncationReport

    def __len__(self) -> int:
        return len(self.ids)


def record_messages(record: Mapping, index: int, *, messages_key: str = "messages",
                    prompt_key: str = "prompt", completion_key: str = "completion") -> list[dict]:
    """The conversation in one record; a ValueError names the row and what is wrong with it."""
    if messages_key in record and record[messages_key] is not None:
        messages = record[messages_key]
        if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
            raise ValueError(f"row {index}: {messages_key!r} must be a non-empty list of "
                             f"{{'role', 'content'}} dicts, got {type(messages).__name__}")
        return list(messages)
    missing = [k for k in (prompt_key, completion_key) if not isinstance(record.get(k), str)]
    if missing:
        raise ValueError(f"row {index}: needs a {messages_key!r} list or string {prompt_key!r} and "
                         f"{completion_key!r} columns; {missing} missing or not str "
                         f"(columns: {sorted(record)})")
    return [{"role": "user", "content": record[prompt_key]},
            {"role": "assistant", "content": record[completion_key]}]


def tokenize_sft(records, tokenizer, *, seq_len: int, template: str | None = None,
                 train_on_prompt: bool = False, truncation: Truncation = "error",
                 messages_key: str = "messages", prompt_key: str = "prompt",
                 completion_key: str = "completion") -> SFTData:
    """Format, tokenize and mask every record (a `datasets.Dataset`, or any sequence of dicts).

    truncation: what to do with an example longer than seq_len + 1 tokens. "error" (the default)
    stops with the row index; "drop" skips it; "truncate" keeps its first seq_len + 1 tokens
    (the end of the reply is lost, including its stop token). The report says how many of each.
    """
    if truncation not in ("error", "drop", "truncate"):
        raise ValueError(f"truncation must be 'error', 'drop' or 'truncate', got {truncation!r}")
    limit = seq_len + 1
    report = TruncationReport(policy=truncation, max_tokens=limit)
    all_ids, all_masks = [], []
    for index, record in enumerate(records):
        if not isinstance(record, Mapping):
            raise ValueError(f"row {index}: expected a dict record, got {type(record).__name__}")
        messages = record_messages(record, index, messages_key=messages_key, prompt_key=prompt_key,
                                   completion_key=completion_key)
        try:
            ids, mask = format_chat_with_mask(tokenizer, messages, template=template)
        except ValueError as e:
            raise ValueError(f"row {index}: {e}") from None
        ids, mask = np.asarray(ids, np.int32), np.asarray(mask, np.float32)
        if train_on_prompt:
            mask = np.ones_like(mask)
        if not mask[1:].any():
            raise ValueError(f"row {index}: no token to train on (an assistant reply is needed, "
                             "after the first token)")
        report.rows += 1
        if any(m.get("role") == "assistant" and isinstance(m.get("content"), str)
               and not m["content"].strip() for m in messages):
            report.empty_replies += 1
            report.first_empty_row = (index if report.first_empty_row is None
                                      else report.first_empty_row)
        report.longest = max(report.longest, len(ids))
        if len(ids) > limit:
            if truncation == "error":
                raise ValueError(f"row {index}: {len(ids)} tokens, more than seq_len + 1 = {limit};"
                                 " raise seq_len or set truncation to 'drop' or 'truncate'")
            if truncation == "drop":
                report.dropped += 1
                continue
            report.truncated += 1
            report.tokens_cut += len(ids) - limit
            report.trained_tokens_cut += int(mask[limit:].sum())
            ids, mask = ids[:limit], mask[:limit]
        all_ids.append(ids)
        all_masks.append(mask)
    if not all_ids:
        raise ValueError(f"no examples left ({report})")
    return SFTData(all_ids, all_masks, seq_len, padding_id(tokenizer), report)


def _pieces(ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """One example's model inputs and targets, length n - 1."""
    n = len(ids) - 1
    return {"inputs": ids[:-1], "targets": ids[1:], "weights": mask[1:],
            "positions": np.arange(n, dtype=np.int32)}


def _empty_rows(rows: int, seq_len: int, pad_id: int) -> dict[str, np.ndarray]:
    return {"inputs": np.full((rows, seq_len), pad_id, np.int32),
            "targets": np.full((rows, seq_len), pad_id, np.int32),
            "weights": np.zeros((rows, seq_len), np.float32),
            "positions": np.full((rows, seq_len), -1, np.int32),
            "segment_ids": np.zeros((rows, seq_len), np.int32)}


def padded_rows(data: SFTData, order: Sequence[int]) -> dict[str, np.ndarray]:
    """One example per row, right-padded to seq_len (padding: position -1, weight 0, segment 0)."""
    out = _empty_rows(len(order), data.seq_len, data.pad_id)
    for row, i in enumerate(order):
        pieces = _pieces(data.ids[i], data.mask[i])
        n = len(pieces["inputs"])
        for key, value in pieces.items():
            out[key][row, :n] = value
        out["segment_ids"][row, :n] = 1
    return out


def packed_rows(data: SFTData, order: Sequence[int]) -> dict[str, np.ndarray]:
    """Examples in `order`, placed one after another into rows of seq_len (a new row when the next
    one does not fit). Each example keeps its own positions (from 0) and segment id (1, 2, ...
    within a row), so attention stays inside it (`attention_mask` with segments) and the row's loss
    is the examples' losses."""
    rows, row, used = [], [], 0
    for i in order:
        n = len(data.ids[i]) - 1
        if used + n > data.seq_len:
            rows.append(row)
            row, used = [], 0
        row.append(i)
        used += n
    rows.append(row)
    out = _empty_rows(len(rows), data.seq_len, data.pad_id)
    for r, members in enumerate(rows):
        start = 0
        for segment, i in enumerate(members, start=1):
            pieces = _pieces(data.ids[i], data.mask[i])
            n = len(pieces["inputs"])
            for key, value in pieces.items():
                out[key][r, start:start + n] = value
            out["segment_ids"][r, start:start + n] = segment
            start += n
    return out


class SFTBatches(Batches):
    """Deterministic batches over `data` (see `Batches`): one example per row, right-padded, or with
    `packing` several examples per row (fewer padding tokens, fewer steps per epoch)."""

    def __init__(self, data: SFTData, batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 packing: bool = False, drop_last: bool = False):
        rows_fn = ((lambda order: packed_rows(data, order)) if packing
                   else (lambda order: padded_rows(data, order)))
        super().__init__(len(data), rows_fn, batch_size, seed=seed, shuffle=shuffle,
                         drop_last=drop_last)
        self.data, self.packing = data, packing

    def stats(self, epoch: int = 0) -> dict[str, float]:
        """Rows, batches, and how much of each row is real tokens (fill) and trained tokens
        (trained)."""
        rows = self.epoch_rows(epoch)
        real = rows["segment_ids"] > 0
        return {"examples": len(self.data), "rows": len(rows["inputs"]),
                "batches": len(self.epoch(epoch)), "fill": float(real.mean()),
                "trained": float(rows["weights"].mean())}


def largest_remainder(weights: Sequence[float], n: int) -> list[int]:
    """n split in proportion to `weights` (non-negative, positive sum): each n * w / sum rounded
    down, and what is left one each to the largest remainders (the earlier on a tie), so equal
    weights give the first n % k one more. Exact arithmetic: no float tie decides a share."""
    exact = [n * Fraction(w) / sum(map(Fraction, weights)) for w in weights]
    shares = [math.floor(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: (shares[i] - exact[i], i))[:n - sum(shares)]:
        shares[i] += 1
    return shares


def mix_domains(records, weights: Mapping[str, float], n: int, *, seed: int = 0,
                column: str = "domain"):
    """`n` rows drawn from `records` with each value of `column` getting its share of `weights`
    (largest remainder rounding), rows of a domain taken in a seeded order and cycled if it has too
    few; the result is shuffled. Returns the same kind it was given: a `datasets.Dataset`
    (via `select`) or a list."""
    values = records[column] if hasattr(records, "column_names") else [r[column] for r in records]
    by_domain: dict[str, list[int]] = {}
    for i, value in enumerate(values):
        by_domain.setdefault(value, []).append(i)
    unknown = sorted(set(weights) - set(by_domain))
    if unknown or not weights:
        raise ValueError(f"weights name domains {unknown or '(none)'} not in column {column!r} "
                         f"(present: {sorted(by_domain)})")
    if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
        raise ValueError(f"weights must be non-negative with a positive sum, got {dict(weights)}")
    counts = dict(zip(weights, largest_remainder(list(weights.values()), n), strict=True))
    rng = np.random.default_rng(seed)
    picked = []
    for d in sorted(counts):
        pool = np.asarray(by_domain[d])[rng.permutation(len(by_domain[d]))]
        picked.extend(np.resize(pool, counts[d]).tolist())
    picked = [picked[i] for i in rng.permutation(len(picked))]
    return records.select(picked) if hasattr(records, "select") else [records[i] for i in picked]
