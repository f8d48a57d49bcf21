"""Pack token documents into fixed [B, T] rectangles with segment ids, for pretraining-style
batches."""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np


def pack_documents(documents: Iterable[list[int]], seq_len: int, batch_size: int) -> Iterator[dict]:
    """Concatenate documents into one stream and cut it into rows of seq_len + 1 tokens.

    Each row gives inputs = row[:-1], targets = row[1:]. segment_ids keep documents from attending
    to each other (document i of the stream has segment i + 1: as everywhere in tunix_lite.data, 0
    would mean padding, and these rows have none); positions count within a document (a document cut
    across rows continues its positions); a target in a different document than its input gets
    weight 0.
    """
    row_len = seq_len + 1
    tokens, segments, positions = [], [], []
    rows = []
    for doc_index, doc in enumerate(documents):
        tokens.extend(doc)
        segments.extend([doc_index + 1] * len(doc))
        positions.extend(range(len(doc)))
        while len(tokens) >= row_len:
            rows.append((tokens[:row_len], segments[:row_len], positions[:row_len]))
            # the last token of a row is the first input of the next: no target is skipped
            tokens, segments, positions = tokens[seq_len:], segments[seq_len:], positions[seq_len:]
            if len(rows) == batch_size:
                yield _to_batch(rows)
                rows = []


def _to_batch(rows) -> dict:
    tok, seg, pos = (np.asarray(x, np.int32) for x in zip(*rows))
    return {
        "inputs": tok[:, :-1], "targets": tok[:, 1:], "positions": pos[:, :-1],
        "segment_ids": seg[:, :-1], "weights": (seg[:, 1:] == seg[:, :-1]).astype(np.float32),
    }
