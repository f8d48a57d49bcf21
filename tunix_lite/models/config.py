"""One frozen dataclass configures Gemma 2 and 3, Llama 3 and Qwen 3; presets are data; `family_of`
names the family of a Hugging Face config.json."""

from __future__ import annotations

import dataclasses
from typing import Literal

Family = Literal["gemma2", "gemma3", "llama3", "qwen3"]

# Hugging Face config.json `model_type` -> our family
_MODEL_TYPES: dict[str, Family] = {"gemma2": "gemma2", "gemma3_text": "gemma3", "gemma3": "gemma3",
                                   "llama": "llama3", "qwen3": "qwen3"}


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling. `kind="llama3"` is Llama 3.1+'s smooth low/high frequency rescale,
    `kind="linear"` divides every frequency by `factor` (Gemma 3 4B+ global layers)."""

    kind: Literal["llama3", "linear"]
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    family: Family
    vocab_size: int
    embed_dim: int
    num_layers: int
    num_heads: int
    num_kv_heads: int  # GQA: num_heads % num_kv_heads == 0; 1 is MQA
    head_dim: int
    mlp_dim: int
    activation: Literal["gelu_tanh", "silu"]
    norm_eps: float = 1e-6
    norm_plus_one: bool = False  # Gemma stores w and scales by (1 + w)
    qk_norm: bool = False  # RMSNorm over head_dim on q and k (Gemma 3, Qwen 3)
    sandwich_norm: bool = False  # extra norms after attention and after the MLP (Gemma 2 and 3)
    scale_embeddings: bool = False  # embeddings * sqrt(embed_dim) (Gemma)
    tie_embeddings: bool = True
    rope_base: float = 10_000.0
    rope_local_base: float | None = None  # sliding-window layers' base (Gemma 3: 10k vs 1M)
    rope_scaling: RopeScaling | None = None  # global layers only
    sliding_window: int | None = None
    sliding_window_pattern: int | None = None  # every Nth layer is global, the rest local
    query_pre_attn_scalar: float | None = None  # scores * qpas**-0.5; None: head_dim**-0.5
    # Gemma 2 bounds attention scores and final logits to (-cap, cap) by cap * tanh(x / cap)
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
    max_seq_len: int = 8192
    dtype: str = "float32"  # compute dtype; parameters stay float32
    bos_id: int = 2
    eos_id: int = 1
    pad_id: int = 0

    def __post_init__(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} must be a multiple of "
                             f"num_kv_heads={self.num_kv_heads}")
        if (self.sliding_window is None) != (self.sliding_window_pattern is None):
            raise ValueError("sliding_window and sliding_window_pattern go together")

    def is_global(self, layer: int) -> bool:
        """Gemma 3 pattern 6: layers 5, 11, 17, ... attend globally; the rest use the sliding
        window. Gemma 2 pattern 2: odd layers are global, even ones local."""
        return self.sliding_window_pattern is None or (layer + 1) % self.sliding_window_pattern == 0

    @property
    def attn_scale(self) -> float:
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


def _gemma3(**kw) -> ModelConfig:
    defaults = dict(
        family="gemma3", activation="gelu_tanh", norm_plus_one=True, qk_norm=True,
        sandwich_norm=True, scale_embeddings=True, tie_embeddings=True, rope_base=1_000_000.0,
        rope_local_base=10_000.0, sliding_window_pattern=6, norm_eps=1e-6,
    )
    return ModelConfig(**(defaults | kw))


PRESETS: dict[str, ModelConfig] = {
    # The embedded default: Gemma 3 architecture at toy size, pretrained by
    # scripts/pretrain_tiny.py.
    "tiny": _gemma3(
        vocab_size=1024, embed_dim=256, num_layers=6, num_heads=4, num_kv_heads=1, head_dim=64,
        mlp_dim=768, sliding_window=128, query_pre_attn_scalar=64, max_seq_len=1024,
    ),
    "gemma3-270m": _gemma3(
        vocab_size=262_144, embed_dim=640, num_layers=18, num_heads=4, num_kv_heads=1, head_dim=256,
        mlp_dim=2048, sliding_window=512, query_pre_attn_scalar=256, max_seq_len=32_768,
    ),
    "gemma3-1b": _gemma3(
        vocab_size=262_144, embed_dim=1152, num_layers=26, num_heads=4, num_kv_heads=1,
        head_dim=256, mlp_dim=6912, sliding_window=512, query_pre_attn_scalar=256,
        max_seq_len=32_768,
    ),
    "gemma2-2b": ModelConfig(
        family="gemma2", vocab_size=256_000, embed_dim=2304, num_layers=26, num_heads=8,
        num_kv_heads=4, head_dim=256, mlp_dim=9216, activation="gelu_tanh", norm_plus_one=True,
        sandwich_norm=True, scale_embeddings=True, sliding_window=4096, sliding_window_pattern=2,
        query_pre_attn_scalar=256, attn_logit_softcap=50.0, final_logit_softcap=30.0,
        max_seq_len=8192,
    ),
    "llama3.2-1b": ModelConfig(
        family="llama3", vocab_size=128_256, embed_dim=2048, num_layers=16, num_heads=32,
        num_kv_heads=8, head_dim=64, mlp_dim=8192, activation="silu", norm_eps=1e-5,
        rope_base=500_000.0,
        rope_scaling=RopeScaling("llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position=8192),
        max_seq_len=131_072, bos_id=128_000, eos_id=128_001, pad_id=128_004,
    ),
    "qwen3-0.6b": ModelConfig(
        family="qwen3", vocab_size=151_936, embed_dim=1024, num_layers=28, num_heads=16,
        num_kv_heads=8, head_dim=128, mlp_dim=3072, activation="silu", norm_eps=1e-6, qk_norm=True,
        rope_base=1_000_000.0, max_seq_len=40_960, bos_id=151_643, eos_id=151_645, pad_id=151_643,
    ),
}


def get_config(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; choose one of: "
                       f"{', '.join(PRESETS)}") from None


def family_of(hf: dict) -> Family:
    """The model family of a parsed Hugging Face config.json (a multimodal Gemma 3 by its
    text_config)."""
    model_type = "gemma3_text" if "text_config" in hf else hf.get("model_type")
    if model_type not in _MODEL_TYPES:
        raise ValueError(f"config.json: model_type {model_type!r} is not supported; "
                         f"supported: {', '.join(sorted(_MODEL_TYPES))}")
    return _MODEL_TYPES[model_type]
