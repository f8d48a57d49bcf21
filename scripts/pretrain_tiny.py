"""Pretrain the embedded default model ("tiny") on the project's synthetic corpus.

    python scripts/pretrain_tiny.py            # ~10 min on 2 CPU cores; writes tunix_lite/assets/tiny/

The corpus (tunix_lite.data.synthetic.pretraining_corpus) mixes worked "Question/Answer" problems,
fact sentences and chat-formatted instructions. The result knows the facts and the answer format and
gets some arithmetic right: enough to be useful, with room for SFT, DPO and GRPO to improve it.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from tunix_lite.data.packing import pack_documents
from tunix_lite.data.synthetic import pretraining_corpus
from tunix_lite.models import Transformer, get_config
from tunix_lite.chat import format_chat_with_mask
from tunix_lite.tokenizer import Tokenizer
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import Trainer, adamw_cosine
from tunix_lite.weights.hf import save_hf_model

ASSETS = Path(__file__).resolve().parents[1] / "tunix_lite" / "assets" / "tiny"


def tokenize(doc: dict, tokenizer: Tokenizer) -> list[int]:
    if "messages" in doc:
        return format_chat_with_mask(tokenizer, doc["messages"], template="gemma")[0]
    return [tokenizer.bos_id, *tokenizer.encode(doc["text"]), tokenizer.eos_id]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ASSETS)
    args = parser.parse_args()

    tokenizer = Tokenizer.from_file(ASSETS / "tokenizer.model")
    config = get_config("tiny")
    assert config.vocab_size == tokenizer.vocab_size, (config.vocab_size, tokenizer.vocab_size)
    model = Transformer(config, rngs=nnx.Rngs(args.seed))
    docs = (tokenize(d, tokenizer) for d in pretraining_corpus(10**9, seed=args.seed))
    batches = pack_documents(docs, args.seq_len, args.batch_size)
    trainer = Trainer(model, adamw_cosine(args.lr, args.steps, warmup_steps=args.steps // 20), lm_loss)

    start = time.perf_counter()
    try:
        history = trainer.fit(batches, args.steps, desc="pretrain tiny")
    except KeyboardInterrupt:  # Ctrl-C stops early and still saves
        history = trainer.history
    args.steps = len(history)
    minutes = (time.perf_counter() - start) / 60
    tokens = args.steps * args.batch_size * args.seq_len
    print(f"{args.steps} steps, {tokens / 1e6:.1f}M tokens in {minutes:.1f} min; "
          f"loss {history[0]['loss']:.3f} -> {sum(h['loss'] for h in history[-50:]) / len(history[-50:]):.3f} (last 50)")

    args.out.mkdir(parents=True, exist_ok=True)
    save_hf_model(model, args.out, dtype=np.float16)  # half the bytes in git; fp16 keeps 3 decimal digits
    if args.out.resolve() != ASSETS.resolve():
        shutil.copy(ASSETS / "tokenizer.model", args.out / "tokenizer.model")
    print(f"saved to {args.out} on {jax.default_backend()}")


if __name__ == "__main__":
    main()
