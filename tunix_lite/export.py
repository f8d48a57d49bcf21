"""Export a trained model for use anywhere:
a Hugging Face checkpoint that `transformers` loads, plus Orbax.

    export_model(model, tokenizer, "runs/capstone/export")
    # export/hf/     config.json, model.safetensors, tokenizer (tokenizer.model or tokenizer.json),
    #                tokenizer_config.json (with the chat template), generation_config.json
    # export/orbax/  the same weights as an Orbax checkpoint of nnx.state(model, nnx.Param)
    #                (a pure dict)
    # export/param_names.json  each orbax path beside its HF tensor name and both shapes

Another JAX stack reads export/orbax with Orbax alone: `ocp.StandardCheckpointer().restore(path)`
gives a nested dict of arrays ({"layers": {"0": {"attn": {"q_proj": {"kernel": [in, out]}}}}, ...}),
and param_names.json maps each of its paths to the HF name (and says which are transposed), so that
stack's own names can be matched to either export. The model's config is export/hf/config.json.

LoRA adapters are merged into the weights first (`merge_lora`: W + (alpha / r) A @ B), so the export
is a plain model of its family. `transformers.AutoModelForCausalLM.from_pretrained("export/hf")` and
`AutoTokenizer.from_pretrained("export/hf")` load it; `tests/test_export.py` checks the logits and
the chat template's token ids against tunix_lite's own. The directory is written under a temporary
name and renamed, so an interrupted export never looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
from flax import nnx

from tunix_lite.chat import TEMPLATES, ChatTemplate


def chat_template_jinja(tpl: ChatTemplate) -> str:
    """tunix_lite's chat template as the Jinja template transformers' `apply_chat_template` runs
    (same ids)."""
    def turn(role_expr: str) -> str:
        before, _, after = tpl.turn_prefix.partition("{role}")
        return f"{before!r} + {role_expr} + {after!r}"

    content = "(message['content'] | trim)" if tpl.strip_content else "message['content']"
    role = f"({tpl.assistant_role!r} if message['role'] == 'assistant' else message['role'])"
    parts = ["{%- set ns = namespace(system='') -%}", "{{- bos_token -}}" if tpl.bos else ""]
    parts.append("{%- for message in messages -%}")
    if tpl.system_in_first_user:
        parts.append("{%- if message['role'] == 'system' -%}"
                     "{%- set ns.system = message['content'] + '\\n\\n' -%}{%- else -%}")
        parts.append(f"{{{{- {turn(role)} + ns.system + {content} + {tpl.turn_suffix!r} -}}}}"
                     "{%- set ns.system = '' -%}{%- endif -%}")
    else:
        parts.append(f"{{{{- {turn(role)} + {content} + {tpl.turn_suffix!r} -}}}}")
    parts.append("{%- endfor -%}")
    parts.append(f"{{%- if add_generation_prompt -%}}"
                 f"{{{{- {turn(repr(tpl.assistant_role))} -}}}}{{%- endif -%}}")
    return "".join(parts)


def _tokenizer_files(tokenizer, directory: Path) -> None:
    """tokenizer.model (SentencePiece) or tokenizer.json,
    and tokenizer_config.json naming the special tokens."""
    def piece(i):
        return None if i is None else tokenizer.id_to_piece(i)

    config = {"bos_token": piece(tokenizer.bos_id), "eos_token": piece(tokenizer.eos_id),
              "pad_token": piece(tokenizer.pad_id), "model_max_length": 1_000_000}
    tpl = TEMPLATES[tokenizer.chat_template] if getattr(tokenizer, "chat_template", None) else None
    if hasattr(tokenizer, "sp"):  # SentencePiece (Gemma)
        tokenizer.save(directory / "tokenizer.model")
        config |= {"tokenizer_class": "GemmaTokenizer", "unk_token": piece(tokenizer.sp.unk_id()),
                   "add_bos_token": True, "add_eos_token": False}
        # SentencePiece matches user-defined pieces (<start_of_turn>, <answer>, ...) whole wherever
        # they appear in text; transformers' converted tokenizer does so only for tokens listed
        # as added.
        specials = set(tpl.specials) if tpl else set()
        config["added_tokens_decoder"] = {
            str(i): {"content": p, "special": p in specials, "normalized": False, "lstrip": False,
                     "rstrip": False, "single_word": False}
            for i, p in _user_defined_pieces(tokenizer)}
    else:  # a tokenizers.Tokenizer (Llama 3, Qwen 3)
        (directory / "tokenizer.json").write_text(tokenizer.tok.to_str(), encoding="utf-8")
        config |= {"tokenizer_class": "PreTrainedTokenizerFast"}
    if tpl:
        config["chat_template"] = chat_template_jinja(tpl)
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n",
                                                     encoding="utf-8")


def _user_defined_pieces(tokenizer) -> list[tuple[int, str]]:
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tokenizer.serialized)
    kind = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    return [(i, p.piece) for i, p in enumerate(proto.pieces) if p.type == kind]


def write_model(model: nnx.Module, tokenizer, directory: str | Path, dtype=np.float32) -> Path:
    """The one way a model goes to disk: `directory` in Hugging Face layout (config.json,
    model.safetensors; LoRA adapters merged), with the tokenizer's files and
    generation_config.json beside it (no tokenizer: the weights alone), so that `tunix_lite.load`
    and transformers both read it. Written in place: callers rename a finished temporary
    directory (`export_model`, the run harness, a reward model's save). Returns `directory`."""
    from tunix_lite.chat import stop_ids
    from tunix_lite.lora import lora_layers, merge_lora
    from tunix_lite.weights.hf import save_hf_model

    directory = Path(directory)
    save_hf_model(merge_lora(model) if lora_layers(model) else model, directory, dtype)
    if tokenizer is not None:
        _tokenizer_files(tokenizer, directory)
        (directory / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": tokenizer.bos_id, "eos_token_id": stop_ids(tokenizer),
             "pad_token_id": tokenizer.pad_id}, indent=1) + "\n")
    return directory


def export_model(model: nnx.Module, tokenizer, directory: str | Path, *, orbax: bool = True,
                 dtype=np.float32) -> Path:
    """Write `directory`/hf (`write_model`: Hugging Face layout, LoRA merged) and
    `directory`/orbax, both holding the weights in `dtype` (ml_dtypes.bfloat16: half the disk of
    float32, as Gemma's released checkpoints are); returns `directory`."""
    from tunix_lite.lora import lora_layers, merge_lora
    from tunix_lite.weights.hf import param_names

    directory = Path(directory)
    merged = merge_lora(model) if lora_layers(model) else model
    tmp = directory.with_name(f".{directory.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    write_model(merged, tokenizer, tmp / "hf", dtype)
    if orbax:
        import jax
        import orbax.checkpoint as ocp

        table = {"config": "hf/config.json", "tied_embeddings": merged.config.tie_embeddings,
                 "params": param_names(merged)}
        (tmp / "param_names.json").write_text(json.dumps(table, indent=1) + "\n")

        checkpointer = ocp.StandardCheckpointer()
        weights = nnx.to_pure_dict(nnx.state(merged, nnx.Param))
        # cast where the arrays live: a sharded array stays sharded, as Orbax saves it
        weights = jax.tree.map(lambda w: w.astype(dtype), weights)
        checkpointer.save((tmp / "orbax").absolute(), weights)
        checkpointer.wait_until_finished()
        checkpointer.close()
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return directory


def load_orbax(model: nnx.Module, directory: str | Path) -> nnx.Module:
    """Load `export_model`'s orbax/ weights into `model` (same config, no adapters) in place;
    returns it."""
    import jax
    import orbax.checkpoint as ocp

    state = nnx.state(model, nnx.Param)
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, nnx.to_pure_dict(state))
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore(Path(directory).absolute(), target)
    nnx.replace_by_pure_dict(state, restored)
    nnx.update(model, state)
    return model
