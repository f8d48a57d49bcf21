"""Preference data in TRL's convention -> fixed-length rows, two per example: [pairs, 2, T].

    data = tokenize_pairs(dataset, tokenizer, seq_len=128)   # prompt / chosen / rejected
    batches = PreferenceBatches(data, batch_size=8, seed=0)  # deterministic, resumable
                                                             # (tunix_lite.data.batches)
    next(batches.stream())["inputs"].shape                   # (8, 2, 128): a pair never splits
                                                             # across micro-batches

Records (a `datasets.Dataset`, a JSONL file read by `tunix_lite.data.records.load_records`, or any
sequence of dicts):
- paired: "prompt", "chosen", "rejected". Each is plain text or a conversation (a list of {"role",
  "content"} messages). Plain text is a user turn (the prompt) or an assistant turn (a completion),
  written in the model's chat template as SFT writes it. Without a "prompt" column, chosen and
  rejected must be conversations: the messages they share at the start are the prompt (TRL's
  "implicit prompt").
- unpaired (KTO): "prompt", "completion", "label" (true: desirable, false: undesirable).

Each example becomes two rows in the packing convention of `tunix_lite.data` (built by SFT's
`padded_rows`): prompt + chosen and prompt + rejected; for KTO, prompt + completion and prompt + the
previous example's completion (the mismatched pair that KTO's KL estimate reads). `weights` is the
completion mask: 1 on the reply's tokens and the end-of-turn token that closes it, 0 on the prompt
and on padding. A bad record stops tokenization with one line naming its row and column, before
anything reaches jit.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np

from tunix_lite.chat import format_chat, format_chat_with_mask
from tunix_lite.data.batches import Batches
from tunix_lite.data.sft import SFTData, Truncation, TruncationReport, padded_rows
from tunix_lite.tokenizer import padding_id
from tunix_lite.training.config import TrainConfig, option

TruncationMode = Literal["keep_start", "keep_end"]


@dataclasses.dataclass
class PairConfig(TrainConfig):
    """A TrainConfig with how pairs are cut to seq_len: what DPO and the reward model share
    (`tokenize_preferences`)."""

    truncation_mode: TruncationMode = option(
        "keep_start", "with truncation: truncate, keep_start cuts the completions' ends; "
                      "keep_end cuts the prompt's beginning first")


@dataclasses.dataclass
class PreferenceData:
    """Tokenized examples, two sequences each (prompt + completion, mask 1 on the completion):
    sequences 2i and 2i + 1 are example i's chosen and rejected (KTO: its completion and a
    mismatched one). labels: KTO's 1.0 (desirable) / 0.0 (undesirable) per example; None for
    pairs."""

    sequences: SFTData
    labels: np.ndarray | None = None

    @property
    def report(self) -> TruncationReport:
        return self.sequences.report

    def __len__(self) -> int:
        return len(self.sequences) // 2

    @property
    def longest_completion(self) -> int:
        """The longest completion of any sequence, from its first trained token to its last: the
        window `completion_sums` scores."""
        return int(max(len(mask) - np.argmax(mask[::-1] > 0) - np.argmax(mask > 0)
                       for mask in self.sequences.mask))

    @functools.cached_property
    def prompts_shared(self) -> bool:
        """Whether every example's two sequences are one prompt and two completions: the same tokens
        up to the first trained one, where both start. Then the prompt can run through the model
        once for both (`completion_sums(..., shared_prompt=True)`); it holds for every example
        `tokenize_pairs` and `tokenize_unpaired` make."""
        ids, masks = self.sequences.ids, self.sequences.mask
        for i in range(0, len(ids), 2):
            first = np.argmax(masks[i] > 0)
            if (np.argmax(masks[i + 1] > 0) != first
                    or not np.array_equal(ids[i][:first], ids[i + 1][:first])):
                return False
        return True


def tokenize_pairs(records, tokenizer, *, seq_len: int, template: str | None = None,
                   truncation: Truncation = "error",
                   truncation_mode: TruncationMode = "keep_start") -> PreferenceData:
    """prompt / chosen / rejected records -> PreferenceData; see the module docstring for the
    formats.

    truncation: what to do with a pair whose prompt plus longer completion exceeds seq_len + 1
    tokens. "error" (the default) stops with the row; "drop" skips it; "truncate" cuts it as
    `truncation_mode` says: "keep_start" cuts the completions' ends (their stop tokens are lost),
    "keep_end" first cuts the prompt's beginning (keeping its first token and the reply header),
    then the completions' ends if that is not enough. The report counts each. Errors: a missing
    column, a non-string content, an empty completion, chosen == rejected (each names the row).
    """
    # "prompt" too, unless chosen and rejected are conversations that start with it
    needed = ["chosen", "rejected"]
    _check_columns(getattr(records, "column_names", None), needed,
                   "a preference dataset needs prompt, chosen and rejected (or conversations in "
                   "chosen and rejected whose first messages are the prompt)")
    examples = []
    for index, record in enumerate(records):
        prompt, chosen, rejected = _pair_messages(_record(record, index, needed), index)
        if _same(chosen, rejected):
            raise ValueError(f"row {index}: 'chosen' and 'rejected' are the same completion; a "
                             "pair needs two different ones (drop the row)")
        examples.append((index, prompt, [("chosen", chosen), ("rejected", rejected)]))
    return _tokenize(examples, None, tokenizer, seq_len, template, truncation, truncation_mode)


def tokenize_unpaired(records, tokenizer, *, seq_len: int, template: str | None = None,
                      truncation: Truncation = "error",
                      truncation_mode: TruncationMode = "keep_start") -> PreferenceData:
    """KTO's prompt / completion / label records -> PreferenceData with labels. Example i's second
    sequence is its prompt with example i - 1's completion (the last example's for i = 0): TRL
    builds KTO's mismatched pairs the same way, rotating the completions by one. Truncation as in
    `tokenize_pairs`."""
    needed = ["prompt", "completion", "label"]
    _check_columns(getattr(records, "column_names", None), needed,
                   "an unpaired (KTO) dataset needs prompt, completion and label")
    rows = [_record(record, index, needed) for index, record in enumerate(records)]
    if not rows:
        raise ValueError("no examples: the dataset is empty")
    labels, examples = [], []
    for index, record in enumerate(rows):
        label = record["label"]
        if not isinstance(label, (bool, np.bool_)) and label not in (0, 1):
            raise ValueError(f"row {index}, column 'label': expected true (desirable) or false, "
                             f"got {label!r}")
        labels.append(float(label))
        previous = rows[index - 1]
        examples.append((index, _messages(record["prompt"], index, "prompt", "user"),
                         [("completion", _messages(record["completion"], index, "completion",
                                                   "assistant")),
                          ("completion", _messages(previous["completion"],
                                                   index - 1 if index else len(rows) - 1,
                                                   "completion", "assistant"))]))
    return _tokenize(examples, np.asarray(labels, np.float32), tokenizer, seq_len, template,
                     truncation, truncation_mode)


def unpair(records) -> list[dict]:
    """Pairs -> KTO's unpaired examples: chosen as desirable, rejected as undesirable (TRL's
    unpair_preference_dataset). Records that are already unpaired (a "label" column) pass
    through."""
    rows = list(records)
    if not rows or "label" in rows[0]:
        return rows
    return [{"prompt": r.get("prompt"), "completion": r[key], "label": key == "chosen"}
            for r in rows for key in ("chosen", "rejected")]


def tokenize_preferences(records, tokenizer, config, source: str, *,
                         unpaired: bool = False) -> PreferenceData:
    """Pairs (unpaired: KTO's examples) of `records`, as a PairConfig says; a bad
    record's error names `source`, its row and column."""
    options = dict(seq_len=config.seq_len, template=config.template, truncation=config.truncation,
                   truncation_mode=config.truncation_mode)
    try:
        if unpaired:
            return tokenize_unpaired(unpair(records), tokenizer, **options)
        return tokenize_pairs(records, tokenizer, **options)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def pair_rows(data: PreferenceData, order: Sequence[int]) -> dict[str, np.ndarray]:
    """The examples at `order` as rows [len(order), 2, seq_len] (+ "label" [len(order)] for KTO)."""
    flat = padded_rows(data.sequences, [2 * i + j for i in order for j in (0, 1)])
    rows = {key: value.reshape(len(order), 2, *value.shape[1:]) for key, value in flat.items()}
    if data.labels is not None:
        rows["label"] = data.labels[np.asarray(order, int)]
    return rows


class PreferenceBatches(Batches):
    """Deterministic batches of `batch_size` examples (pairs), each [batch_size, 2, seq_len]; see
    `Batches`. extras: per-example arrays riding beside the rows, e.g. precomputed reference
    log-probs [n, 2]."""

    def __init__(self, data: PreferenceData, batch_size: int, *, seed: int = 0,
                 shuffle: bool = True, drop_last: bool = False,
                 extras: Mapping[str, np.ndarray] | None = None):
        super().__init__(len(data), lambda order: pair_rows(data, order), batch_size, seed=seed,
                         shuffle=shuffle, drop_last=drop_last, extras=extras)
        self.data = data

    def stats(self) -> dict[str, float]:
        """Pairs, batches per epoch, and how much of each row is real tokens (fill) and completion
        tokens."""
        rows = self.epoch_rows(0)
        return {"pairs": len(self.data), "batches": len(self.epoch(0)),
                "fill": float((rows["segment_ids"] > 0).mean()),
                "completion": float(rows["weights"].mean())}


# ----------------------------------------------------------------------------- records -> messages


def _check_columns(names, needed: list[str], what: str) -> None:
    if names is not None and (missing := [c for c in needed if c not in names]):
        raise ValueError(f"missing column(s) {missing} (columns: {list(names)}); {what}")


def _record(record, index: int, needed: list[str]) -> Mapping:
    if not isinstance(record, Mapping):
        raise ValueError(f"row {index}: expected a dict record, got {type(record).__name__}")
    missing = [c for c in needed if record.get(c) is None]
    if missing:
        raise ValueError(f"row {index}: column(s) {missing} missing or null "
                         f"(columns: {sorted(record)})")
    return record


def _messages(value, index: int, column: str, role: str) -> list[dict]:
    """A column's value as a message list: plain text becomes one `role` message."""
    where = f"row {index}, column {column!r}"
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{where}: empty {'completion' if role == 'assistant' else 'prompt'}; "
                             "give it text or drop the row")
        return [{"role": role, "content": value}]
    if isinstance(value, Sequence) and value and all(isinstance(m, Mapping) for m in value):
        for i, message in enumerate(value):
            if not isinstance(message.get("content"), str):
                raise ValueError(f"{where}: message {i} content must be a str, got "
                                 f"{type(message.get('content')).__name__}")
        if role == "assistant" and not any(m["content"].strip() for m in value):
            raise ValueError(f"{where}: empty completion; give it text or drop the row")
        return list(value)
    if isinstance(value, Sequence):
        got = "an empty list" if not value else "a list with items that are not dicts"
    else:
        got = type(value).__name__
    raise ValueError(f"{where}: expected a string or a list of {{'role', 'content'}} messages, "
                     f"got {got}")


def _pair_messages(record: Mapping, index: int) -> tuple[list, list, list]:
    """(prompt, chosen, rejected) messages, with TRL's implicit prompt when there is no prompt
    column."""
    if record.get("prompt") is not None:
        return (_messages(record["prompt"], index, "prompt", "user"),
                _messages(record["chosen"], index, "chosen", "assistant"),
                _messages(record["rejected"], index, "rejected", "assistant"))
    chosen = _messages(record["chosen"], index, "chosen", "assistant")
    rejected = _messages(record["rejected"], index, "rejected", "assistant")
    shared = 0
    while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == 0:
        raise ValueError(f"row {index}: no 'prompt' column, and 'chosen' and 'rejected' do not "
                         "start with the same messages; add a prompt column or give both the "
                         "conversation that leads to the reply")
    return chosen[:shared], chosen[shared:], rejected[shared:]


def _same(a: list[dict], b: list[dict]) -> bool:
    return ([(m.get("role"), m["content"].strip()) for m in a]
            == [(m.get("role"), m["content"].strip()) for m in b])


# ----------------------------------------------------------------------------- messages -> ids


def _completion_ids(tokenizer, prompt: list, completion: list, prompt_ids: list[int], template,
                    where: str):
    """(ids, mask) of the completion that follows `prompt_ids`: the reply and its end-of-turn
    token."""
    try:
        ids, mask = format_chat_with_mask(tokenizer, prompt + completion, template=template)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    n = len(prompt_ids)
    if ids[:n] != prompt_ids:
        raise ValueError(f"{where}: a completion must start with an assistant message (got roles "
                         f"{[m.get('role') for m in completion]})")
    mask = mask[n:]
    # drop what follows the last trained token
    end = len(mask) - mask[::-1].index(1) if 1 in mask else 0
    return np.asarray(ids[n:n + end], np.int32), np.asarray(mask[:end], np.float32)


def _tokenize(examples, labels, tokenizer, seq_len, template, truncation,
              truncation_mode) -> PreferenceData:
    if truncation not in ("error", "drop", "truncate"):
        raise ValueError(f"truncation must be 'error', 'drop' or 'truncate', got {truncation!r}")
    if truncation_mode not in ("keep_start", "keep_end"):
        raise ValueError("truncation_mode must be 'keep_start' or 'keep_end', "
                         f"got {truncation_mode!r}")
    limit = seq_len + 1  # a row of seq_len model inputs holds a sequence of seq_len + 1 tokens
    policy = f"{truncation} ({truncation_mode})" if truncation == "truncate" else truncation
    report = TruncationReport(policy=policy, max_tokens=limit)
    ids, masks, kept = [], [], []
    for position, (index, prompt, completions) in enumerate(examples):
        try:
            prompt_ids = format_chat(tokenizer, prompt, template=template)
            header = len(prompt_ids) - len(format_chat(tokenizer, prompt, template=template,
                                                       add_generation_prompt=False))
        except ValueError as e:
            raise ValueError(f"row {index}, column 'prompt': {e}") from None
        pieces = [_completion_ids(tokenizer, prompt, c, prompt_ids, template,
                                  f"row {index}, column {name!r}")
                  for name, c in completions]
        fitted = _fit(np.asarray(prompt_ids, np.int32), header, pieces, limit, truncation,
                      truncation_mode, report, index)
        if fitted is None:
            continue
        prompt_ids, pieces = fitted
        kept.append(position)
        for completion, mask in pieces:
            ids.append(np.concatenate([prompt_ids, completion]))
            masks.append(np.concatenate([np.zeros(len(prompt_ids), np.float32), mask]))
    if not ids:
        raise ValueError(f"no examples left ({report})")
    if labels is not None:
        labels = labels[np.asarray(kept)]
    return PreferenceData(SFTData(ids, masks, seq_len, padding_id(tokenizer), report), labels)


def _fit(prompt, header: int, pieces, limit: int, truncation: str, mode: str,
         report: TruncationReport, index: int):
    """The example cut to `limit` tokens per sequence as the policy says, or None when it is
    dropped."""
    report.rows += 1
    longest = len(prompt) + max(len(c) for c, _ in pieces)
    report.longest = max(report.longest, longest)
    if longest <= limit:
        return prompt, pieces
    if truncation == "error":
        raise ValueError(f"row {index}: prompt ({len(prompt)} tokens) + longest completion = "
                         f"{longest} tokens, more than seq_len + 1 = {limit}; raise seq_len or set "
                         "truncation to 'drop' or 'truncate'")
    if truncation == "drop":
        report.dropped += 1
        return None
    prompt_cut = 0
    # keep the first token (bos or the first turn marker) and the reply header
    if mode == "keep_end":
        prompt_cut = max(0, min(longest - limit, len(prompt) - 1 - header))
        prompt = np.concatenate([prompt[:1], prompt[1 + prompt_cut:]])
    room = limit - len(prompt)
    cut = [(c[:room], m[:room]) for c, m in pieces] if room > 0 else None
    if cut is None or any(len(c) == 0 for c, _ in cut) or np.array_equal(cut[0][0], cut[1][0]):
        report.dropped += 1  # no room for a completion, or the cut left the two completions equal
        return None
    report.truncated += 1
    report.tokens_cut += prompt_cut * len(pieces) + sum(len(c) - len(k)
                                                        for (c, _), (k, _) in zip(pieces, cut))
    report.trained_tokens_cut += int(sum(m.sum() - k.sum() for (_, m), (_, k) in zip(pieces, cut)))
    return prompt, cut
