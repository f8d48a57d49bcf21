"""Tokenizers: text <-> ids, and the one source of a model's special ids.

Two tokenizer kinds sit behind one small interface (`encode`, `decode`, `piece_to_id`, `bos_id`,
`eos_id`, `pad_id`, `vocab_size`, `chat_template`):

- `Tokenizer`: SentencePiece (Gemma). Built from a `tokenizer.model` file, or from the vocabulary
  stored in the Gemma 3 270M GGUF (`tunix_lite.weights.gguf` rebuilds it once, with the weights, and
  caches both).
- `HFJsonTokenizer`: a Hugging Face `tokenizer.json` (byte-level BPE: Llama 3, Qwen 3).

Everything that needs a special id asks the tokenizer (`padding_id` for padding), never the model
config. `chat_template` names the model family's chat format (`tunix_lite.chat`); `tunix_lite.load`
sets it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm


class UnknownPieceError(KeyError):
    """A piece name that is not in the vocabulary."""

    def __str__(self):  # KeyError would print the message in quotes
        return str(self.args[0])


# --------------------------------------------------------------------------------------------------
# SentencePiece


class Tokenizer:
    """A SentencePiece tokenizer (Gemma), with Gemma's special ids exposed as properties."""

    def __init__(self, sp: spm.SentencePieceProcessor, *, chat_template: str | None = None):
        self.sp = sp
        self.chat_template = chat_template  # a tunix_lite.chat.TEMPLATES name, e.g. "gemma"
        self._special = {i for i in (self.bos_id, self.eos_id, self.pad_id) if i is not None}

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, chat_template: str | None = None) -> Tokenizer:
        """Load a SentencePiece `tokenizer.model` (e.g. from a Hugging Face Gemma checkpoint)."""
        return cls(spm.SentencePieceProcessor(model_file=str(path)), chat_template=chat_template)

    @classmethod
    def from_serialized(cls, data: bytes, *, chat_template: str | None = None) -> Tokenizer:
        """Load from the bytes of a `tokenizer.model` (a serialized SentencePiece ModelProto)."""
        return cls(spm.SentencePieceProcessor(model_proto=data), chat_template=chat_template)

    def save(self, path: str | os.PathLike) -> Path:
        """Write `tokenizer.model` (into `path` if it is a directory). Returns the file written."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.model"
        # Write then rename, so a concurrent reader (another process filling the same cache) never
        # sees half a file.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(self.serialized)
        os.replace(tmp, path)
        return path

    @property
    def serialized(self) -> bytes:
        return self.sp.serialized_model_proto()

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        return _add_bos_eos(self, self.sp.encode(text), add_bos, add_eos)

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        """Ids -> text. With skip_special=False, control tokens are spelled out (`<start_of_turn>`).

        decode(encode(s)) == s for any s without '▁' (U+2581), which SentencePiece reads as a space.
        An id past the tokenizer's pieces decodes to nothing, as in HF tokenizers: a model's
        vocabulary may be padded past its tokenizer's (Qwen 3's is), and it may sample those ids.
        """
        size = self.vocab_size
        ids = [i for i in map(int, ids) if 0 <= i < size]  # also accepts numpy / jax arrays
        is_special = [i in self._special or self.sp.is_control(i) for i in ids]
        if skip_special:
            return self.sp.decode([i for i, s in zip(ids, is_special) if not s])
        # SentencePiece always drops control pieces, so decode the runs between them and splice
        # names in.
        out, run = [], []
        for i, special in zip(ids, is_special):
            if special:
                out += [self.sp.decode(run), self.sp.id_to_piece(i)]
                run = []
            else:
                run.append(i)
        return "".join(out + [self.sp.decode(run)])

    def piece_to_id(self, piece: str) -> int:
        i = self.sp.piece_to_id(piece)
        if self.sp.id_to_piece(i) != piece:  # SentencePiece maps unknown pieces to unk silently
            raise UnknownPieceError(f"piece {piece!r} is not in the vocabulary")
        return i

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(int(i))

    @property
    def bos_id(self) -> int | None:
        return _none_if_negative(self.sp.bos_id())

    @property
    def eos_id(self) -> int | None:
        return _none_if_negative(self.sp.eos_id())

    @property
    def pad_id(self) -> int | None:
        return _none_if_negative(self.sp.pad_id())

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()


# --------------------------------------------------------------------------------------------------
# Hugging Face tokenizer.json (byte-level BPE)


class HFJsonTokenizer:
    """A Hugging Face `tokenizer.json` (Llama 3, Qwen 3) with the same interface as `Tokenizer`.

    tokenizer.json does not say which token is bos/eos/pad (tokenizer_config.json does), so pass
    their names. Special tokens written in text are encoded as plain text, as SentencePiece does.
    """

    def __init__(self, tokenizer, *, bos: str | None = None, eos: str | None = None,
                 pad: str | None = None, chat_template: str | None = None):
        self.tok = tokenizer
        self.chat_template = chat_template
        self.tok.encode_special_tokens = True  # "<|im_end|>" typed by a user stays text
        self.bos_id = None if bos is None else self.piece_to_id(bos)
        self.eos_id = None if eos is None else self.piece_to_id(eos)
        self.pad_id = None if pad is None else self.piece_to_id(pad)

    @classmethod
    def from_file(cls, path: str | os.PathLike, **special) -> HFJsonTokenizer:
        """Load `tokenizer.json`; `special` names the bos/eos/pad pieces (see __init__)."""
        try:
            import tokenizers
        except ImportError as e:
            raise ImportError("tokenizer.json files need the `tokenizers` package: "
                              "pip install tokenizers") from e
        return cls(tokenizers.Tokenizer.from_file(str(path)), **special)

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        # add_special_tokens=False skips the post-processor (Llama 3's adds <|begin_of_text|> on
        # its own).
        return _add_bos_eos(self, self.tok.encode(text, add_special_tokens=False).ids, add_bos,
                            add_eos)

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        ids = [int(i) for i in ids]
        if skip_special:  # also drop bos/eos/pad even if tokenizer.json does not mark them special
            ids = [i for i in ids if i not in (self.bos_id, self.eos_id, self.pad_id)]
        return self.tok.decode(ids, skip_special_tokens=skip_special)

    def piece_to_id(self, piece: str) -> int:
        i = self.tok.token_to_id(piece)
        if i is None:
            raise UnknownPieceError(f"piece {piece!r} is not in the vocabulary")
        return i

    def id_to_piece(self, i: int) -> str:
        return self.tok.id_to_token(int(i))

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)


def load_tokenizer(directory: str | os.PathLike) -> Tokenizer | HFJsonTokenizer:
    """The tokenizer of a Hugging Face checkpoint directory: `tokenizer.model`
    (SentencePiece, preferred because it is exact) or else `tokenizer.json` with special tokens
    named in `tokenizer_config.json`. Its `chat_template` is the model family's (from the
    directory's config.json, when there is one)."""
    directory = Path(directory)
    template = _family_template(directory / "config.json")
    if (directory / "tokenizer.model").is_file():
        return Tokenizer.from_file(directory / "tokenizer.model", chat_template=template)
    if (directory / "tokenizer.json").is_file():
        config_file = directory / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}

        def name(key):  # older configs store {"content": "<s>", ...} instead of the string
            value = config.get(key)
            return value.get("content") if isinstance(value, dict) else value

        return HFJsonTokenizer.from_file(directory / "tokenizer.json", bos=name("bos_token"),
                                         eos=name("eos_token"), pad=name("pad_token"),
                                         chat_template=template)
    raise FileNotFoundError(f"no tokenizer in {directory}: looked for tokenizer.model and "
                            "tokenizer.json")


def _family_template(config_file: Path) -> str | None:
    """The chat template of the model family a checkpoint's config.json names (None without one)."""
    if not config_file.is_file():
        return None
    from tunix_lite.chat import template_for
    from tunix_lite.models.config import family_of  # here, not above: tunix_lite.models imports jax

    return template_for(family_of(json.loads(config_file.read_text())))


def _add_bos_eos(tokenizer, ids: list[int], add_bos: bool, add_eos: bool) -> list[int]:
    bos = [_required(tokenizer.bos_id, "bos")] if add_bos else []
    eos = [_required(tokenizer.eos_id, "eos")] if add_eos else []
    return bos + list(ids) + eos


def _required(i: int | None, name: str) -> int:
    if i is None:
        raise ValueError(f"this tokenizer has no {name} token")
    return i


def _none_if_negative(i: int) -> int | None:
    return None if i < 0 else i


def padding_id(tokenizer) -> int:
    """The id that fills padded positions: the tokenizer's pad, else its eos (Llama 3 has no pad
    token), else 0. Padding is always masked out, so any id works; this picks the same one
    everywhere."""
    for i in (tokenizer.pad_id, tokenizer.eos_id):
        if i is not None:
            return i
    return 0
