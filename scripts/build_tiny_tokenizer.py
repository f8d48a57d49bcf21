"""Train the tiny model's SentencePiece tokenizer on the synthetic pretraining corpus.

    PYTHONPATH=. python scripts/build_tiny_tokenizer.py   # writes tunix_lite/assets/tiny/tokenizer.model in ~2 s

The settings follow Gemma's tokenizer at toy size: BPE with byte fallback (no text is ever <unk>), the same
special pieces and ids (<pad> 0, <eos> 1, <bos> 2, <unk> 3), no dummy prefix and no normalization (so that
decode(encode(x)) == x). Digits are split one per piece so that the model sees numbers digit by digit, which makes
arithmetic learnable. Training is deterministic: a fixed corpus seed and a single thread give the same file each run.
"""

import io
import pathlib

import sentencepiece as spm

from tunix_lite.data.synthetic import ANSWER_CLOSE, ANSWER_OPEN, pretraining_corpus

OUT = pathlib.Path(__file__).resolve().parents[1] / "tunix_lite" / "assets" / "tiny" / "tokenizer.model"
# The corpus supports at most ~1,700 pieces (BPE runs out of merges), and merges past 1024 barely shorten it:
# 64.3 tokens per document at 1024, 64.2 at 1536.
VOCAB_SIZE = 1024
N_DOCS = 20_000
# Pieces that must never be split: the chat turn markers and the answer tags the rewards parse.
SPECIAL_PIECES = ["<start_of_turn>", "<end_of_turn>", ANSWER_OPEN, ANSWER_CLOSE]


def corpus_text():
    """Every document's text. Chat documents are written out in Gemma's turn format, so that the role names the
    chat template puts after `<start_of_turn>` ("user", "model") become pieces too."""
    for doc in pretraining_corpus(N_DOCS, seed=0):
        if "text" in doc:
            yield doc["text"]
        else:
            yield "".join(f"<start_of_turn>{'model' if m['role'] == 'assistant' else m['role']}\n{m['content']}"
                          "<end_of_turn>\n" for m in doc["messages"])


def main():
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=corpus_text(), model_writer=model, model_type="bpe", vocab_size=VOCAB_SIZE,
        character_coverage=1.0, byte_fallback=True, split_digits=True,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        user_defined_symbols=SPECIAL_PIECES,
        add_dummy_prefix=False, normalization_rule_name="identity", remove_extra_whitespaces=False,
        num_threads=1, minloglevel=2,
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(model.getvalue())
    print(f"wrote {OUT} ({VOCAB_SIZE} pieces)")


if __name__ == "__main__":
    main()
