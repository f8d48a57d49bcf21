"""What the two torch peers (impl_trl.py, impl_torch.py) share: threads, models, LoRA, a token-id tokenizer.

Import this before anything imports torch: it sets OMP_WAIT_POLICY=PASSIVE first. With the default (ACTIVE)
policy, OpenMP threads spin while waiting, and torch with 2 threads collapses to 2-7 s/step when other
processes share the CPU (~1.25 s/step quiet). Threads default to os.cpu_count(); override with
BENCH_TORCH_THREADS=N (and OMP_WAIT_POLICY=ACTIVE to undo the policy).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download: every model is built or loaded from disk
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch  # noqa: E402

import _shared  # noqa: E402
from _shared import common  # noqa: E402

THREADS = int(os.environ.get("BENCH_TORCH_THREADS") or os.cpu_count())
torch.set_num_threads(THREADS)


def torch_fields(model=None) -> dict:
    out = dict(versions=_shared.versions("torch", "transformers", "peft", "trl", "accelerate", "datasets", "numpy"),
               torch_threads=torch.get_num_threads(), omp_wait_policy=os.environ.get("OMP_WAIT_POLICY"),
               dtype="float32")
    if model is not None:
        out["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    return out


def llama_model(shape: dict, seed: int = 0):
    """transformers LlamaForCausalLM with SHAPES['llama'], random init (transformers' own init, seed 0), fp32."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=shape["vocab"], hidden_size=shape["d_model"], intermediate_size=shape["ffn"],
        num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
        head_dim=shape["head_dim"], rms_norm_eps=shape["norm_eps"], tie_word_embeddings=shape["tied"],
        rope_parameters=dict(rope_type="default", rope_theta=shape["rope_theta"]), max_position_embeddings=2048,
        attention_bias=False, mlp_bias=False, bos_token_id=_shared.BOS, eos_token_id=1, pad_token_id=0,
        use_cache=False)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    assert model.config.rope_parameters["rope_theta"] == shape["rope_theta"], model.config.rope_parameters
    return model


def pretrained(directory: str):
    """A Gemma 3 HF-layout checkpoint (config.json + model.safetensors) as Gemma3ForCausalLM, fp32."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)


def gemma_shape(model) -> dict:
    c = model.config
    return dict(vocab=c.vocab_size, d_model=c.hidden_size, layers=c.num_hidden_layers, heads=c.num_attention_heads,
                kv_heads=c.num_key_value_heads, head_dim=c.head_dim, ffn=c.intermediate_size)


def training_model(work: dict) -> tuple:
    """(model, shape, result fields) for a training workload: the random llama-shaped model or the Gemma 3
    checkpoint, without a generation cache; the fields name the model and, for LoRA runs, the adapters."""
    if work["shape"] == "llama":
        shape = common.SHAPES["llama"]
        model = llama_model(shape)
        extra = dict(shape="llama", model="transformers.LlamaForCausalLM (random init, seed 0)")
    else:
        model = pretrained(_shared.GEMMA_DIR)
        shape = gemma_shape(model)
        extra = dict(shape="gemma3-270m", model=f"transformers.{type(model).__name__} ({_shared.GEMMA_DIR})")
    model.config.use_cache = False
    if work.get("lora_rank"):
        extra["lora"] = dict(rank=work["lora_rank"], alpha=work["lora_alpha"], targets=list(common.LORA_TARGETS))
    return model, shape, extra


def lora_config(work: dict):
    import peft

    return peft.LoraConfig(r=work["lora_rank"], lora_alpha=work["lora_alpha"], lora_dropout=0.0, bias="none",
                           target_modules=list(common.LORA_TARGETS), task_type="CAUSAL_LM")


def trainable_params(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


SPECIAL_WORDS = {common.PAD: "<pad>", common.EOS: "<eos>", common.BOS: "<bos>", 3: "<unk>"}


def id_text(ids) -> str:
    """The text id_tokenizer turns back into exactly `ids` ("<bos> 17 99 <eos>")."""
    return " ".join(SPECIAL_WORDS.get(int(i), str(int(i))) for i in ids)


def id_tokenizer(vocab: int):
    """A tokenizer whose words are the ids themselves ("17" is id 17), except the special ids 0-3, which are
    spelled as words no digit string matches ("<pad>", "<eos>", "<bos>", "<unk>"): special tokens are matched
    inside words, so a special token "1" would split "17" into 1, 7. The SFT data is pre-tokenized (TRL only
    needs pad/eos from it); DPO, ORPO and GRPO data are texts made by id_text."""
    import tokenizers
    import transformers

    words = {SPECIAL_WORDS.get(i, str(i)): i for i in range(vocab)}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<unk>"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    core.decoder = tokenizers.decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return transformers.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                                bos_token="<bos>", unk_token="<unk>")
