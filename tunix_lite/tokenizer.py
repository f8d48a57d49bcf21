"""Tokenizers and chat formatting.

Two tokenizer kinds sit behind one small interface (`encode`, `decode`, `piece_to_id`, `bos_id`, `eos_id`,
`pad_id`, `vocab_size`):

- `Tokenizer`: SentencePiece (Gemma). Built from a `tokenizer.model` file, or from the vocabulary stored in
  the Gemma 3 270M GGUF (`tunix_lite.weights.gguf` does this once, with the weights, and caches both).
- `HFJsonTokenizer`: a Hugging Face `tokenizer.json` (byte-level BPE: Llama 3, Qwen 3).

Chat formatting (`format_chat`, `format_chat_with_mask`) writes special tokens as ids and encodes only the
plain text between them, so message text can never smuggle in a control token.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as sp_pb2

GEMMA_EXTRA = 'pip install "tunix-lite[gemma]"'


class UnknownPieceError(KeyError):
    """A piece name that is not in the vocabulary."""

    def __str__(self):  # KeyError would print the message in quotes
        return str(self.args[0])


# ----------------------------------------------------------------------------------------------------------
# SentencePiece


class Tokenizer:
    """A SentencePiece tokenizer (Gemma), with Gemma's special ids exposed as properties."""

    def __init__(self, sp: spm.SentencePieceProcessor):
        self.sp = sp
        self._special = {i for i in (self.bos_id, self.eos_id, self.pad_id) if i is not None}

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> Tokenizer:
        """Load a SentencePiece `tokenizer.model` (e.g. from a Hugging Face Gemma checkpoint)."""
        return cls(spm.SentencePieceProcessor(model_file=str(path)))

    @classmethod
    def from_serialized(cls, data: bytes) -> Tokenizer:
        """Load from the bytes of a `tokenizer.model` (a serialized SentencePiece ModelProto)."""
        return cls(spm.SentencePieceProcessor(model_proto=data))

    @classmethod
    def from_gguf(cls, path_or_reader) -> Tokenizer:
        """Rebuild the SentencePiece model from a GGUF file's `tokenizer.ggml.*` metadata. Parsing the
        file is slow (10-30 s), so an open `gguf.GGUFReader` is accepted too."""
        reader = path_or_reader
        if not hasattr(reader, "fields"):
            reader = _import_gguf().GGUFReader(str(path_or_reader))
        fields, path = reader.fields, getattr(reader, "path", path_or_reader)

        def meta(key):
            return fields[key].contents() if key in fields else None

        if meta("tokenizer.ggml.model") != "llama":  # llama.cpp's name for SentencePiece vocabularies
            raise ValueError(f"{path}: not a SentencePiece vocabulary ({meta('tokenizer.ggml.model')!r})")
        proto = sentencepiece_proto(
            meta("tokenizer.ggml.tokens"),
            meta("tokenizer.ggml.scores"),
            meta("tokenizer.ggml.token_type"),
            bos_id=meta("tokenizer.ggml.bos_token_id"),
            eos_id=meta("tokenizer.ggml.eos_token_id"),
            unk_id=meta("tokenizer.ggml.unknown_token_id"),
            pad_id=meta("tokenizer.ggml.padding_token_id"),
        )
        return cls.from_serialized(proto.SerializeToString())

    def save(self, path: str | os.PathLike) -> Path:
        """Write `tokenizer.model` (into `path` if it is a directory). Returns the file written."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.model"
        # Write then rename, so a concurrent reader (another process filling the same cache) never sees
        # half a file.
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
        """
        ids = [int(i) for i in ids]  # also accepts numpy / jax arrays
        is_special = [i in self._special or self.sp.is_control(i) for i in ids]
        if skip_special:
            return self.sp.decode([i for i, s in zip(ids, is_special) if not s])
        # SentencePiece always drops control pieces, so decode the runs between them and splice names in.
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


_Piece = sp_pb2.ModelProto.SentencePiece
# gguf.TokenType -> SentencePiece piece type. The numbers coincide, but spelling it out documents the mapping.
_GGUF_TO_SP_TYPE = {
    1: _Piece.NORMAL,
    2: _Piece.UNKNOWN,
    3: _Piece.CONTROL,
    4: _Piece.USER_DEFINED,
    5: _Piece.UNUSED,
    6: _Piece.BYTE,
}


def sentencepiece_proto(tokens, scores, token_types, *, bos_id, eos_id, unk_id, pad_id) -> sp_pb2.ModelProto:
    """A SentencePiece BPE ModelProto from a GGUF vocabulary (pieces, merge scores, gguf token types).

    The settings reproduce Gemma's tokenizer: no normalization, no dummy prefix, whitespace kept as is and
    escaped to '▁', unknown bytes as <0xNN> pieces. tests/test_tokenizer.py compares it with transformers.
    """
    proto = sp_pb2.ModelProto()
    for i, (piece, score, kind) in enumerate(zip(tokens, scores, token_types)):
        kind = _GGUF_TO_SP_TYPE[int(kind)]
        if kind == _Piece.USER_DEFINED:
            # GGUF stores these with real spaces; SentencePiece matches them after escaping ' ' to '▁',
            # so unconverted ones (Gemma's '  ', '   ', ...) would never match a run of spaces.
            piece = piece.replace(" ", "▁")
        if i == unk_id:
            kind = _Piece.UNKNOWN  # Gemma's GGUF marks <unk> as CONTROL; SentencePiece needs one UNKNOWN
        proto.pieces.add(piece=piece, score=float(score), type=kind)

    spec = proto.trainer_spec
    spec.model_type = sp_pb2.TrainerSpec.BPE
    spec.vocab_size = len(proto.pieces)
    spec.byte_fallback = True
    # SentencePiece finds bos/eos/pad by piece name, so set names along with ids (-1 = absent).
    for name, i in [("unk", unk_id), ("bos", bos_id), ("eos", eos_id), ("pad", pad_id)]:
        setattr(spec, f"{name}_id", -1 if i is None else int(i))
        if i is not None:
            setattr(spec, f"{name}_piece", proto.pieces[int(i)].piece)

    norm = proto.normalizer_spec
    norm.name = "identity"
    norm.add_dummy_prefix = False
    norm.remove_extra_whitespaces = False
    norm.escape_whitespaces = True
    return proto


def _import_gguf():
    try:
        import gguf
    except ImportError as e:
        raise ImportError(f"Reading GGUF files needs the `gguf` package: {GEMMA_EXTRA}") from e
    return gguf


# ----------------------------------------------------------------------------------------------------------
# Hugging Face tokenizer.json (byte-level BPE)


class HFJsonTokenizer:
    """A Hugging Face `tokenizer.json` (Llama 3, Qwen 3) with the same interface as `Tokenizer`.

    tokenizer.json does not say which token is bos/eos/pad (tokenizer_config.json does), so pass their
    names. Special tokens written in text are encoded as plain text, as SentencePiece does.
    """

    def __init__(self, tokenizer, *, bos: str | None = None, eos: str | None = None, pad: str | None = None):
        self.tok = tokenizer
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
            raise ImportError("tokenizer.json files need the `tokenizers` package: pip install tokenizers") from e
        return cls(tokenizers.Tokenizer.from_file(str(path)), **special)

    def encode(self, text: str, *, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        # add_special_tokens=False skips the post-processor (Llama 3's adds <|begin_of_text|> on its own).
        return _add_bos_eos(self, self.tok.encode(text, add_special_tokens=False).ids, add_bos, add_eos)

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
    """The tokenizer of a Hugging Face checkpoint directory: `tokenizer.model` (SentencePiece, preferred
    because it is exact) or else `tokenizer.json` with special tokens named in `tokenizer_config.json`."""
    directory = Path(directory)
    if (directory / "tokenizer.model").is_file():
        return Tokenizer.from_file(directory / "tokenizer.model")
    if (directory / "tokenizer.json").is_file():
        config_file = directory / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}

        def name(key):  # older configs store {"content": "<s>", ...} instead of the string
            value = config.get(key)
            return value.get("content") if isinstance(value, dict) else value

        return HFJsonTokenizer.from_file(
            directory / "tokenizer.json", bos=name("bos_token"), eos=name("eos_token"), pad=name("pad_token")
        )
    raise FileNotFoundError(f"no tokenizer in {directory}: looked for tokenizer.model and tokenizer.json")


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


# ----------------------------------------------------------------------------------------------------------
# Chat formatting


@dataclass(frozen=True)
class ChatTemplate:
    """How a model family writes a conversation.

    `turn_prefix` / `turn_suffix` surround every message ("{role}" is replaced by the role name) and may
    contain the special pieces listed in `specials`, which become single ids. Message text never does.
    """

    name: str
    bos: str | None  # special piece written once at the start
    turn_prefix: str
    turn_suffix: str
    specials: tuple[str, ...]
    stop: tuple[str, ...]  # pieces besides eos that end a model reply
    assistant_role: str = "assistant"
    system_in_first_user: bool = False  # no system role: prepend "{system}\n\n" to the first user message
    strip_content: bool = False  # the HF template trims whitespace around each message


TEMPLATES = {
    # <bos><start_of_turn>user\n{msg}<end_of_turn>\n<start_of_turn>model\n{answer}<end_of_turn>\n
    "gemma": ChatTemplate(
        name="gemma",
        bos="<bos>",
        turn_prefix="<start_of_turn>{role}\n",
        turn_suffix="<end_of_turn>\n",
        specials=("<start_of_turn>", "<end_of_turn>"),
        stop=("<end_of_turn>",),
        assistant_role="model",
        system_in_first_user=True,
        strip_content=True,
    ),
    # Llama 3.0's format. 3.1+ templates also add a "Cutting Knowledge Date" system block; we do not.
    "llama3": ChatTemplate(
        name="llama3",
        bos="<|begin_of_text|>",
        turn_prefix="<|start_header_id|>{role}<|end_header_id|>\n\n",
        turn_suffix="<|eot_id|>",
        specials=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        stop=("<|eot_id|>",),
        strip_content=True,
    ),
    # Plain ChatML. Qwen 3's HF template also manages <think> blocks; we leave reasoning text as written.
    "qwen3": ChatTemplate(
        name="qwen3",
        bos=None,
        turn_prefix="<|im_start|>{role}\n",
        turn_suffix="<|im_end|>\n",
        specials=("<|im_start|>", "<|im_end|>"),
        stop=("<|im_end|>",),
    ),
}


def format_chat(tokenizer, messages, *, template: str | ChatTemplate = "gemma", add_generation_prompt=True):
    """Token ids of a conversation `[{"role": "user"|"assistant"|"system", "content": str}, ...]`.

    With add_generation_prompt, ends with the header of a model turn (`<start_of_turn>model\\n`), ready to
    sample the reply.
    """
    ids, _ = format_chat_with_mask(tokenizer, messages, template=template, add_generation_prompt=add_generation_prompt)
    return ids


def format_chat_with_mask(tokenizer, messages, *, template: str | ChatTemplate = "gemma", add_generation_prompt=False):
    """(ids, completion_mask): mask is 1 on the tokens SFT trains on, the assistant replies and the stop
    token that closes each (so the model learns to stop), and 0 elsewhere.

    Role headers and replies are encoded separately, as at inference time, where the prompt ends with the
    header and the reply is sampled from there.
    """
    tpl = _template(template)
    stop = {tokenizer.piece_to_id(p) for p in tpl.stop}
    ids, mask = [], []

    def emit(new_ids, trainable=False):
        ids.extend(new_ids)
        mask.extend(int(trainable) for _ in new_ids)

    if tpl.bos is not None:
        emit([tokenizer.piece_to_id(tpl.bos)])
    for role, content in _turns(messages, tpl):
        is_reply = role == tpl.assistant_role
        emit(_encode_with_specials(tokenizer, tpl.turn_prefix.replace("{role}", role), tpl.specials))
        emit(tokenizer.encode(content), is_reply)
        for i in _encode_with_specials(tokenizer, tpl.turn_suffix, tpl.specials):
            emit([i], is_reply and i in stop)
    if add_generation_prompt:
        emit(_encode_with_specials(tokenizer, tpl.turn_prefix.replace("{role}", tpl.assistant_role), tpl.specials))
    return ids, mask


def stop_ids(tokenizer, template: str | ChatTemplate = "gemma") -> list[int]:
    """Ids that end a reply: eos and the template's end-of-turn token (eos first)."""
    tpl = _template(template)
    ids = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    for piece in tpl.stop:
        if (i := tokenizer.piece_to_id(piece)) not in ids:
            ids.append(i)
    return ids


def _template(template: str | ChatTemplate) -> ChatTemplate:
    if isinstance(template, ChatTemplate):
        return template
    if template not in TEMPLATES:
        raise ValueError(f"unknown chat template {template!r}; known: {', '.join(TEMPLATES)}")
    return TEMPLATES[template]


def _turns(messages, tpl: ChatTemplate) -> list[tuple[str, str]]:
    """Validate messages; return (role as the template writes it, content) per turn."""
    if not messages:
        raise ValueError("messages is empty: a chat needs at least one message")
    turns, system = [], None
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"message {i}: expected a dict with 'role' and 'content', got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if role not in ("system", "user", "assistant"):
            raise ValueError(f"message {i}: unknown role {role!r} (expected 'system', 'user' or 'assistant')")
        if not isinstance(content, str):
            raise ValueError(f"message {i}: content must be a str, got {type(content).__name__}")
        if tpl.strip_content:
            content = content.strip()
        if role == "system" and tpl.system_in_first_user:
            if i != 0:
                raise ValueError(f"message {i}: the {tpl.name} template only allows a system message first")
            system = message["content"]  # Gemma's HF template does not trim the system text
            continue
        if system is not None:
            if role != "user":
                raise ValueError(f"message {i}: the system message must be followed by a user message")
            content, system = f"{system}\n\n{content}", None
        turns.append((tpl.assistant_role if role == "assistant" else role, content))
    if system is not None:
        raise ValueError("message 0: the system message must be followed by a user message")
    return turns


def _encode_with_specials(tokenizer, text: str, specials: tuple[str, ...]) -> list[int]:
    """Encode template text, turning each special piece in it into its id."""
    ids = []
    for part in re.split("(" + "|".join(map(re.escape, specials)) + ")", text):
        if part in specials:
            ids.append(tokenizer.piece_to_id(part))
        elif part:
            ids.extend(tokenizer.encode(part))
    return ids
