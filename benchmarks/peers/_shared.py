"""Helpers shared by the peer implementations (standard library only, like benchmarks/common.py).

Every peer draws its training tokens and prompts from here, so all sides see the same ids.
"""

from __future__ import annotations

import importlib.metadata
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

import common  # noqa: E402  (benchmarks/common.py, stdlib only)

TINY_DIR = os.path.join(REPO, "tunix_lite", "assets", "tiny")
GEMMA_DIR = os.path.expanduser("~/.cache/tunix_lite/gemma3-270m")
BOS = common.BOS  # Gemma's bos; the llama-shaped random models have no tokenizer and use it too


def train_tokens(vocab: int, batch: int, seq: int, seed: int = 0) -> list[list[int]]:
    """One fixed batch of random token ids in [3, vocab): no padding, every position is a real token."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(seq)] for _ in range(batch)]


def prompt_ids(vocab: int, length: int, seed: int = 1) -> list[int]:
    """A fixed prompt of exactly `length` ids: bos followed by random ids in [3, vocab)."""
    rng = random.Random(seed)
    return [BOS] + [rng.randrange(3, vocab) for _ in range(length - 1)]


def versions(*names: str) -> dict:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def unsupported(impl: str, workload: str, why: str) -> None:
    """Exit code 3 with one line: run.py records the cell as n/a."""
    print(f"{impl}: workload {workload} not supported: {why}", file=sys.stderr, flush=True)
    sys.exit(common.NOT_APPLICABLE)


def generation_fields(batch: int, prompt: int, new_tokens: int, prefill_s: float, total_s: float) -> dict:
    """Prefill tokens/s from a 1-new-token call, decode tokens/s from the remaining new_tokens - 1 steps
    (the convention of benchmarks/impl_tunix_lite.py)."""
    decode_s = max(total_s - prefill_s, 1e-9)
    return dict(prefill_s=prefill_s, total_s=total_s, prompt_tokens=batch * prompt, new_tokens=new_tokens,
                prefill_tokens_per_s=batch * prompt / prefill_s,
                decode_tokens_per_s=batch * (new_tokens - 1) / decode_s)
