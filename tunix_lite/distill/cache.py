"""A top-k teacher cache: the teacher's softened distribution over a dataset, computed once and kept
small.

    cache = build_cache(teacher, rows, k=32, temperature=2.0,
                        tokenizer=tokenizer)  # one teacher pass
    cache.save("runs/x/teacher_cache.npz")
    cache = TeacherCache.load(path,
                              expect=cache_key(tokenizer, rows, k=32, temperature=2.0))  # checked
    batches = Batches(n, rows_fn, batch_size, extras=cache.extras())  # rides in every batch

Per position the cache keeps the teacher's k most likely ids, their log-probabilities at the
training temperature and the probability mass of every other id (`losses.top_k_distribution`), so KD
from the cache (`losses.top_k_kd_per_token`) needs neither the teacher's weights nor its forward
pass during training. The full float32 distribution would take V * 4 bytes per position
(1 MiB for Gemma's 262k vocabulary); the cache takes k * 8 + 4. A cache only fits the rows it was
computed on, with the tokenizer, temperature and k it was computed with: `load` checks all of them
and says which one differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import zipfile
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from tunix_lite.distill.losses import map_token_chunks, top_k_distribution

FORMAT = "tunix_lite.teacher_cache/1"
CACHE_KEYS = ("teacher_ids", "teacher_log_probs", "teacher_rest")  # the batch keys a cache adds
# what the teacher saw, and what it predicted
ROW_KEYS = ("inputs", "targets", "positions", "segment_ids")


class CacheError(ValueError):
    """A teacher cache file that cannot serve this run: unreadable, malformed, or computed for other
    data."""


def vocabulary_fingerprint(tokenizer) -> str:
    """A hash of what every id means (its piece) and of the special ids: two tokenizers with the
    same fingerprint give the same id the same meaning, which is what comparing two models'
    distributions over ids needs."""
    digest = hashlib.sha256()
    for i in range(tokenizer.vocab_size):
        digest.update(tokenizer.id_to_piece(i).encode("utf-8", "surrogatepass") + b"\x00")
    digest.update(repr((tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id)).encode())
    return digest.hexdigest()[:16]


def rows_digest(rows: dict) -> str:
    """A hash of the token rows a cache was computed on (inputs, targets, positions, segments)."""
    digest = hashlib.sha256()
    for key in ROW_KEYS:
        if key in rows:
            digest.update(key.encode() + np.ascontiguousarray(rows[key], np.int32).tobytes())
    return digest.hexdigest()[:16]


def cache_key(tokenizer, rows: dict, *, k: int, temperature: float) -> dict:
    """What a cache must have been computed with to serve a run on `rows`."""
    n, seq_len = np.shape(rows["inputs"])
    return {"format": FORMAT, "tokenizer": vocabulary_fingerprint(tokenizer),
            "rows": rows_digest(rows), "examples": int(n), "seq_len": int(seq_len), "k": int(k),
            "temperature": float(temperature)}


@dataclasses.dataclass
class TeacherCache:
    # [n, T, k] int32: the teacher's top-k ids at each position (position t predicts targets[t])
    ids: np.ndarray
    log_probs: np.ndarray  # [n, T, k] float32: log softmax(z_t / T) at those ids
    rest: np.ndarray  # [n, T] float32: the probability mass of every other id
    meta: dict  # cache_key(...) + the teacher's name and vocabulary size

    def extras(self) -> dict[str, np.ndarray]:
        """Per-example arrays for `Batches(..., extras=...)`: they reach the loss as batch keys."""
        return dict(zip(CACHE_KEYS, (self.ids, self.log_probs, self.rest)))

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.log_probs.nbytes + self.rest.nbytes

    @property
    def full_nbytes(self) -> int:
        """What the teacher's full float32 distributions for the same positions would take."""
        n, T, _ = self.ids.shape
        return n * T * self.meta["vocab_size"] * 4

    def memory_report(self) -> str:
        n, T, k = self.ids.shape
        return (f"teacher cache: {n} examples x {T} positions x top-{k}: "
                f"{self.nbytes / 2**20:.1f} MiB; the full float32 distributions "
                f"(V = {self.meta['vocab_size']:,}) would take {self.full_nbytes / 2**20:,.1f} MiB "
                f"({self.full_nbytes / self.nbytes:,.0f}x more)")

    def save(self, path: str | os.PathLike) -> Path:
        """Write one .npz (arrays + metadata), under a temporary name then renamed: never half a
        file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.partial.npz")
        np.savez(tmp, ids=self.ids, log_probs=self.log_probs, rest=self.rest,
                 meta=np.array(json.dumps(self.meta)))
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, *, expect: dict | None = None) -> TeacherCache:
        """Read a cache file; with `expect` (a `cache_key`), refuse one computed for other data,
        another tokenizer, temperature or k. Every failure is one CacheError naming the file, what
        differs and the fix."""
        path = Path(path)
        fix = "delete it to recompute the cache, or point teacher_cache at another file"
        try:
            with np.load(path, allow_pickle=False) as f:
                missing = [key for key in ("ids", "log_probs", "rest", "meta")
                           if key not in f.files]
                if missing:
                    raise CacheError(f"{path}: not a teacher cache (no {', '.join(missing)} "
                                     f"arrays); {fix}")
                ids, log_probs, rest, meta = (f["ids"], f["log_probs"], f["rest"],
                                              json.loads(str(f["meta"])))
        except (OSError, ValueError, zipfile.BadZipFile, json.JSONDecodeError) as e:
            if isinstance(e, CacheError):
                raise
            raise CacheError(f"{path}: cannot read a teacher cache ({type(e).__name__}: {e}); "
                             f"{fix}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise CacheError(f"{path}: format "
                             f"{meta.get('format') if isinstance(meta, dict) else meta!r}, "
                             f"expected {FORMAT!r}; {fix}")
        n, T, k = meta["examples"], meta["seq_len"], meta["k"]
        for name, array, shape, kind in (("ids", ids, (n, T, k), "i"),
                                         ("log_probs", log_probs, (n, T, k), "f"),
                                         ("rest", rest, (n, T), "f")):
            if array.shape != shape or array.dtype.kind != kind:
                raise CacheError(f"{path}: {name} has shape {array.shape} ({array.dtype}), its "
                                 f"metadata says {shape} ({'integer' if kind == 'i' else 'float'});"
                                 f" the file is damaged; {fix}")
        if ids.size and (ids.min() < 0 or ids.max() >= meta["vocab_size"]):
            raise CacheError(f"{path}: ids outside the vocabulary [0, {meta['vocab_size']}); {fix}")
        for key, want in (expect or {}).items():
            if meta.get(key) != want:
                what = {"tokenizer": "tokenizer fingerprint",
                        "rows": "token rows (a digest of the training data)"}
                raise CacheError(f"{path}: computed with {what.get(key, key)} {meta.get(key)!r}, "
                                 f"this run needs {want!r}; {fix}")
        return cls(ids, log_probs, rest, meta)


@nnx.jit(static_argnames=("k", "temperature", "chunk"))
def _top_k_rows(teacher, batch, *, k: int, temperature: float, chunk: int | None):
    features = teacher.features(batch["inputs"], batch["positions"],
                                segment_ids=batch.get("segment_ids"))
    B, T, D = features.shape
    ids, log_probs, rest = map_token_chunks(
        lambda x: top_k_distribution(teacher.logits(x), k, temperature), chunk,
        features.reshape(B * T, D))
    return ids.reshape(B, T, k), log_probs.reshape(B, T, k), rest.reshape(B, T)


def build_cache(teacher: nnx.Module, rows: dict, *, k: int, temperature: float, tokenizer,
                batch_size: int = 16, chunk: int | None = None,
                teacher_name: str = "") -> TeacherCache:
    """Run the teacher once over `rows` ({inputs, targets, positions[, segment_ids]} [n, T], one
    example per row) and keep its top-k distribution at every position. `chunk` tokens at a time
    through the vocabulary projection (None: all of a batch's tokens at once). The last batch is
    padded, so one compiled step serves every batch."""
    vocab = teacher.config.vocab_size
    if not 1 <= k <= vocab:
        raise ValueError(f"k must be in [1, {vocab}] (the teacher's vocabulary), got {k}")
    n = len(rows["inputs"])
    keys = [key for key in ("inputs", "positions", "segment_ids") if key in rows]
    out = []
    teacher.eval()
    for start in tqdm(range(0, n, batch_size), desc="teacher cache"):
        batch = {key: np.asarray(rows[key][start:start + batch_size]) for key in keys}
        short = batch_size - len(batch["inputs"])
        batch = {key: np.pad(v, [(0, short), (0, 0)]) for key, v in batch.items()}
        out.append(jax.device_get(_top_k_rows(teacher, batch, k=k, temperature=float(temperature),
                                              chunk=chunk)))
    ids, log_probs, rest = (np.concatenate([o[i] for o in out])[:n] for i in range(3))
    meta = (cache_key(tokenizer, rows, k=k, temperature=temperature)
            | {"vocab_size": vocab, "teacher": teacher_name})
    return TeacherCache(ids.astype(np.int32), log_probs.astype(np.float32),
                        rest.astype(np.float32), meta)
