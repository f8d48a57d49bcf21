"""Hugging Face checkpoints <-> tunix_lite models.

A checkpoint directory holds `config.json`, `model.safetensors` (or shards listed in
`model.safetensors.index.json`) and a tokenizer. Loading is a mapping table: our parameter path ->
(HF tensor name, transform), with a shape check on every tensor.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.models.config import ModelConfig, RopeScaling, family_of
from tunix_lite.models.transformer import Transformer

_GEMMAS = ("gemma2", "gemma3")
# Gemma 2 config.json files older than transformers' `layer_types` imply local, global, local, ...
_DEFAULT_WINDOW_PATTERN = {"gemma2": 2}
_ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh", "silu": "silu"}


# ----------------------------------------------------------------------------- config.json

_REQUIRED = object()
_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
               list: "a list", dict: "a mapping"}


def _get(hf: dict, key: str, kind: type, default=_REQUIRED, *, positive: bool = False):
    """hf[key] checked to be of `kind` (an int is a number; null counts as absent): one line naming
    the key."""
    value = hf.get(key)
    if value is None:
        if default is _REQUIRED:
            raise ValueError(f"config.json: missing key {key!r} ({_KIND_NAMES[kind]})")
        return default
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ValueError(f"config.json: {key}: expected {_KIND_NAMES[kind]}, got {value!r} "
                         f"({type(value).__name__})")
    if positive and value < 1:
        raise ValueError(f"config.json: {key}: must be >= 1, got {value}")
    return float(value) if kind is float else value


def _rope_settings(hf: dict, layer_kind: str) -> dict:
    """The rope dict for one layer kind, from either transformers-5 `rope_parameters` (per
    layer kind for Gemma 3) or the older flat `rope_theta` / `rope_scaling` /
    `rope_local_base_freq` keys."""
    params = hf.get("rope_parameters")
    if params:
        if "full_attention" in params or "sliding_attention" in params:  # per layer kind (Gemma 3)
            return params.get(layer_kind, params.get("full_attention"))
        return params
    if layer_kind == "sliding_attention" and "rope_local_base_freq" in hf:
        return {"rope_type": "default", "rope_theta": hf["rope_local_base_freq"]}
    return ({"rope_type": "default", "rope_theta": hf.get("rope_theta", 10_000.0)}
            | (hf.get("rope_scaling") or {}))


def _rope_scaling(rope: dict) -> RopeScaling | None:
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind == "default":
        return None
    if kind == "linear":
        return RopeScaling("linear", factor=_get(rope, "factor", float))
    if kind == "llama3":
        return RopeScaling("llama3", factor=_get(rope, "factor", float),
                           low_freq_factor=_get(rope, "low_freq_factor", float),
                           high_freq_factor=_get(rope, "high_freq_factor", float),
                           original_max_position=_get(rope, "original_max_position_embeddings",
                                                      int))
    raise ValueError(f"config.json: rope type {kind!r} is not supported "
                     "(supported: default, linear, llama3)")


def _window_pattern(hf: dict, num_layers: int, family: str) -> int | None:
    types = hf.get("layer_types")
    if types is None:
        return (hf.get("sliding_window_pattern") or hf.get("_sliding_window_pattern")
                or _DEFAULT_WINDOW_PATTERN.get(family))
    if all(t == "full_attention" for t in types):
        return None
    pattern = types.index("full_attention") + 1 if "full_attention" in types else num_layers + 1
    expected = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                for i in range(num_layers)]
    if list(types) != expected:
        raise ValueError(f"config.json: layer_types {types} are not a periodic "
                         "local/global pattern")
    return pattern


def config_from_hf(hf: dict) -> ModelConfig:
    """ModelConfig from a parsed HF config.json (Gemma 2, Gemma 3 text, Llama 3, Qwen 3). A
    missing key, a value of the wrong type or an unsupported feature is a ValueError starting
    "config.json: " and naming the key."""
    if not isinstance(hf, dict):
        raise ValueError(f"config.json: expected a mapping of keys, got {type(hf).__name__}")
    if "text_config" in hf:  # a multimodal Gemma 3 checkpoint: use its language model
        hf = _get(hf, "text_config", dict) | {"model_type": "gemma3_text"}
    family = family_of(hf)
    for flag in ("attention_bias", "mlp_bias"):
        if _get(hf, flag, bool, False):
            raise ValueError(f"config.json: {flag}=true is not supported")
    softcaps = {cap: _get(hf, cap, float, None)
                for cap in ("attn_logit_softcapping", "final_logit_softcapping")}
    for cap, value in softcaps.items():
        if value is not None and family != "gemma2":
            raise ValueError(f"config.json: {cap}={value} is not supported "
                             "(Gemma 2 style softcapping)")
    num_layers = _get(hf, "num_hidden_layers", int, positive=True)
    hidden, heads = (_get(hf, "hidden_size", int, positive=True),
                     _get(hf, "num_attention_heads", int, positive=True))
    is_gemma = family in _GEMMAS
    use_sliding_window = _get(hf, "use_sliding_window", bool, False)
    pattern = _window_pattern(hf, num_layers, family) if is_gemma or use_sliding_window else None
    if family == "qwen3" and use_sliding_window:
        raise ValueError("config.json: Qwen 3 use_sliding_window=true is not supported")
    global_rope = _rope_settings(hf, "full_attention")
    local_rope = _rope_settings(hf, "sliding_attention")
    act = hf.get("hidden_activation") or hf.get("hidden_act")
    if act not in _ACTIVATIONS:
        raise ValueError(f"config.json: activation {act!r} is not supported")
    eos = hf.get("eos_token_id", 1)
    eos = eos[0] if isinstance(eos, list) and eos else eos
    if eos is not None and (not isinstance(eos, int) or isinstance(eos, bool)):
        raise ValueError("config.json: eos_token_id: expected an integer or a list of them, "
                         f"got {eos!r}")
    return ModelConfig(
        family=family,
        vocab_size=_get(hf, "vocab_size", int, positive=True),
        embed_dim=hidden,
        num_layers=num_layers,
        num_heads=heads,
        num_kv_heads=_get(hf, "num_key_value_heads", int, heads, positive=True),
        head_dim=_get(hf, "head_dim", int, hidden // heads, positive=True),
        mlp_dim=_get(hf, "intermediate_size", int, positive=True),
        activation=_ACTIVATIONS[act],
        norm_eps=_get(hf, "rms_norm_eps", float, 1e-6),
        norm_plus_one=is_gemma,
        qk_norm=family in ("gemma3", "qwen3"),
        sandwich_norm=is_gemma,
        scale_embeddings=is_gemma,
        tie_embeddings=_get(hf, "tie_word_embeddings", bool, is_gemma),
        rope_base=float(global_rope.get("rope_theta", 10_000.0)),
        rope_local_base=float(local_rope["rope_theta"]) if pattern else None,
        rope_scaling=_rope_scaling(global_rope),
        sliding_window=_get(hf, "sliding_window", int, positive=True) if pattern else None,
        sliding_window_pattern=pattern,
        query_pre_attn_scalar=_get(hf, "query_pre_attn_scalar", float, None),
        attn_logit_softcap=softcaps["attn_logit_softcapping"],
        final_logit_softcap=softcaps["final_logit_softcapping"],
        max_seq_len=_get(hf, "max_position_embeddings", int, 8192, positive=True),
        bos_id=_get(hf, "bos_token_id", int, 2),
        eos_id=eos,
        pad_id=_get(hf, "pad_token_id", int, 0),
    )


def read_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig of a checkpoint directory's config.json; one line naming the file and
    the problem."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{directory}: no config.json (expected a Hugging Face "
                                "checkpoint directory)")
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} "
                         f"column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        return config_from_hf(hf)
    except ValueError as e:
        raise ValueError(f"{path}: {str(e).removeprefix('config.json: ')}") from None


def config_to_hf(c: ModelConfig) -> dict:
    """HF config.json for `c` (what transformers needs to load our exported checkpoints)."""
    rope = {"rope_type": "default", "rope_theta": c.rope_base}
    if c.rope_scaling:
        s = c.rope_scaling
        rope = {"rope_theta": c.rope_base, "rope_type": s.kind, "factor": s.factor}
        if s.kind == "llama3":
            rope |= {"low_freq_factor": s.low_freq_factor, "high_freq_factor": s.high_freq_factor,
                     "original_max_position_embeddings": s.original_max_position}
    hf = {
        "vocab_size": c.vocab_size, "hidden_size": c.embed_dim, "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim, "intermediate_size": c.mlp_dim, "rms_norm_eps": c.norm_eps,
        "tie_word_embeddings": c.tie_embeddings, "max_position_embeddings": c.max_seq_len,
        "bos_token_id": c.bos_id, "eos_token_id": c.eos_id,
        "pad_token_id": c.pad_id, "attention_bias": False, "torch_dtype": "float32",
    }
    if c.family in _GEMMAS:
        return hf | _gemma_fields(c, rope)
    arch = {"llama3": ("LlamaForCausalLM", "llama"),
            "qwen3": ("Qwen3ForCausalLM", "qwen3")}[c.family]
    return hf | {"architectures": [arch[0]], "model_type": arch[1], "hidden_act": c.activation,
                 "rope_parameters": rope, "mlp_bias": False}


def _gemma_fields(c: ModelConfig, rope: dict) -> dict:
    """The config.json keys of a Gemma 2 or Gemma 3 text model beyond the common ones."""
    qpas = c.query_pre_attn_scalar
    if qpas is not None and float(qpas).is_integer():
        qpas = int(qpas)  # transformers types the field int (and refuses 64.0)
    layer_types = ["full_attention" if c.is_global(i) else "sliding_attention"
                   for i in range(c.num_layers)]
    fields = {"hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": qpas,
              "sliding_window": c.sliding_window, "layer_types": layer_types,
              "final_logit_softcapping": c.final_logit_softcap,
              "attn_logit_softcapping": c.attn_logit_softcap}
    if c.family == "gemma2":  # one RoPE for every layer
        return fields | {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
                         "rope_parameters": rope}
    local_rope = {"rope_type": "default", "rope_theta": c.rope_local_base or c.rope_base}
    return fields | {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                     "rope_parameters": {"full_attention": rope, "sliding_attention": local_rope}}


# ----------------------------------------------------------------------------- weight mapping


def _transpose(w):
    return w.T


def _keep(w):
    return w


def weight_map(c: ModelConfig) -> dict[tuple, tuple[str, Callable]]:
    """Our parameter path -> (HF tensor name, HF->ours transform). HF linears are [out, in]; ours
    [in, out]."""
    # Llama/Qwen call the pre-MLP norm `post_attention_layernorm`; Gemma 2 and 3 use that name for
    # the sandwich norm after attention and call the pre-MLP one `pre_feedforward_layernorm`.
    norms = {"input_norm": "input_layernorm"}
    if c.sandwich_norm:
        norms |= {"post_attn_norm": "post_attention_layernorm",
                  "pre_mlp_norm": "pre_feedforward_layernorm",
                  "post_mlp_norm": "post_feedforward_layernorm"}
    else:
        norms |= {"pre_mlp_norm": "post_attention_layernorm"}
    table = {("embedder", "embedding"): ("model.embed_tokens.weight", _keep),
             ("final_norm", "scale"): ("model.norm.weight", _keep)}
    if not c.tie_embeddings:
        table[("lm_head", "kernel")] = ("lm_head.weight", _transpose)
    for i in range(c.num_layers):
        hf = f"model.layers.{i}"
        for ours, theirs in norms.items():
            table[("layers", i, ours, "scale")] = (f"{hf}.{theirs}.weight", _keep)
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            table[("layers", i, "attn", proj, "kernel")] = (f"{hf}.self_attn.{proj}.weight",
                                                            _transpose)
        if c.qk_norm:
            for norm in ("q_norm", "k_norm"):
                table[("layers", i, "attn", norm, "scale")] = (f"{hf}.self_attn.{norm}.weight",
                                                               _keep)
        for proj in ("gate_proj", "up_proj", "down_proj"):
            table[("layers", i, "mlp", proj, "kernel")] = (f"{hf}.mlp.{proj}.weight", _transpose)
    return table


def param_names(model: Transformer) -> list[dict]:
    """Each parameter's path in export/orbax, its tensor name in export/hf, and both shapes:
    what another JAX stack needs to read either export without tunix_lite. HF stores a linear as
    [out, in], ours (and the orbax dict) as [in, out]; everything else has one layout, the
    same values."""
    table = weight_map(model.config)
    rows = []
    for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        hf_name, transform = table[path]
        transposed = transform is _transpose
        rows.append({"orbax": "/".join(map(str, path)), "hf": hf_name, "shape": list(var.shape),
                     "hf_shape": list(var.shape[::-1] if transposed else var.shape),
                     "transposed": transposed})
    return rows


_PREFIXES = ("model.language_model.", "language_model.model.", "language_model.")
# tensors a text checkpoint may hold that no config value asks for: a multimodal model's vision
# parts, old rotary caches, a tied lm_head saved anyway
_IGNORED = re.compile(r"^(model\.)?(vision_tower|multi_modal_projector)\.|rotary_emb\.inv_freq$")


def _canonical(name: str) -> str:
    """Multimodal Gemma 3 checkpoints nest the text model under a prefix; strip it."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return "model." + name[len(prefix):]
    return name


def model_from_tensors(config: ModelConfig, tensors: dict[str, np.ndarray], *,
                       where: str = "checkpoint") -> Transformer:
    """Build a Transformer from HF-named tensors without running a random init first."""
    tensors = {_canonical(k): v for k, v in tensors.items()}
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    flat = nnx.to_flat_state(state)
    table = weight_map(config)
    for path, var in flat:
        hf_name, transform = table[path]
        if hf_name not in tensors:
            raise KeyError(f"{where}: tensor {hf_name!r} is missing "
                           f"(needed for {'.'.join(map(str, path))})")
        value = transform(np.asarray(tensors[hf_name], dtype=np.float32))
        if value.shape != var.shape:
            raise ValueError(f"{where}: tensor {hf_name!r} has shape "
                             f"{tuple(tensors[hf_name].shape)}, the config expects "
                             f"{var.shape[::-1] if transform is _transpose else var.shape}")
        var.set_value(jnp.asarray(value, var.dtype))
    used = ({table[path][0] for path, _ in flat}
            | ({"lm_head.weight"} if config.tie_embeddings else set()))
    unused = sorted(k for k in tensors if k not in used and not _IGNORED.search(k))
    if unused:
        raise ValueError(f"{where}: {len(unused)} tensors are not used by the config "
                         f"(num_layers={config.num_layers}): {_summarize(unused)}; "
                         "the config and the weights disagree")
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def _summarize(names: list[str]) -> str:
    """Tensor names with each layer's group folded: "model.layers.4.* (11 tensors), model.layers.5.*
    (11 tensors)"."""
    groups: dict[str, int] = {}
    for name in names:
        layer = re.match(r"(.*?\.layers\.\d+)\.", name)
        key = layer.group(1) + ".*" if layer else name
        groups[key] = groups.get(key, 0) + 1
    return ", ".join(k if n == 1 and not k.endswith("*") else f"{k} ({n} tensors)"
                     for k, n in groups.items())


def model_to_tensors(model: Transformer, dtype=np.float32) -> dict[str, np.ndarray]:
    """The inverse of model_from_tensors: HF-named numpy arrays (float32 unless told otherwise)."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    table = weight_map(model.config)
    out = {}
    for path, var in flat:
        hf_name, transform = table[path]
        # transpose is its own inverse; copy so safetensors gets contiguous memory
        out[hf_name] = np.ascontiguousarray(
            transform(np.asarray(jax.device_get(var[...]), np.float32)), dtype)
    return out


# ----------------------------------------------------------------------------- directories


def read_tensors(directory: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    index = directory / "model.safetensors.index.json"
    if index.exists():
        try:
            files = sorted(set(
                json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{index}: not a safetensors index (a JSON mapping with a "
                             f"weight_map): {type(e).__name__}: {e}") from None
    elif (directory / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{directory}: no model.safetensors or "
                                "model.safetensors.index.json")
    tensors = {}
    for name in files:
        path = directory / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing (listed in {index.name})")
        try:
            tensors |= load_file(path)
        # torch checkpoints may hold bf16, which numpy cannot: load via flax
        except (TypeError, ValueError):
            from safetensors.flax import load_file as load_flax
            tensors |= {k: np.asarray(v, np.float32) for k, v in load_flax(path).items()}
        except SafetensorError as e:
            raise ValueError(f"{path}: not a readable safetensors file ({e}); it may be truncated "
                             "or corrupt: export or download it again") from None
    return tensors


def load_hf_model(directory: str | Path) -> Transformer:
    directory = Path(directory)
    return model_from_tensors(read_config(directory), read_tensors(directory), where=str(directory))


def save_hf_model(model: Transformer, directory: str | Path, dtype=np.float32) -> Path:
    """Write config.json + model.safetensors that both tunix_lite and transformers load.
    dtype=ml_dtypes.bfloat16 (or np.float16) halves the file, and config.json's torch_dtype says
    which (tunix_lite computes in its config's dtype whatever the file holds)."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    hf = config_to_hf(model.config) | {"torch_dtype": np.dtype(dtype).name}
    (directory / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    save_file(model_to_tensors(model, dtype), directory / "model.safetensors",
              metadata={"format": "pt"})
    return directory
