"""Model configs and the NNX decoder: one `Transformer` for every family, configured by data.

    config.py       `ModelConfig` (a frozen dataclass), the presets, `family_of` (the family of
                    an HF config.json)
    transformer.py  the decoder: embeddings, attention with a KV cache, MLP, blocks, logits
    heads.py        a scalar head on the decoder (reward models, PPO's critic)

Adding a model family (Gemma 2 went in this way: one commit, most of it tests):
1. `config.py`: its name in `Family`, its Hugging Face `model_type` in `_MODEL_TYPES`, and a preset
   whose comments say where each odd value comes from.
2. `transformer.py`: only what the family does differently, as a config field that defaults to
   off (Gemma 2's soft-capping, Qwen 3's q/k norms), never a branch on the family's name.
3. `tunix_lite/weights/hf.py`: `config_from_hf` / `config_to_hf` for its config.json and the name
   table of its tensors, `weight_map` (`tunix_lite/weights/gguf.py` too, if it ships as GGUF).
4. `tunix_lite/chat.py`: its chat template in `TEMPLATES` and `FAMILY_TEMPLATES`.
5. A test against `transformers` on a tiny random checkpoint made in the test (logits with
   padding, greedy generation with and without the KV cache, the exported checkpoint read back):
   `tests/test_gemma2.py` is the one to copy.
"""

from tunix_lite.models.config import PRESETS, ModelConfig, RopeScaling, get_config
from tunix_lite.models.transformer import KVCache, Transformer, set_training_options

__all__ = ["PRESETS", "ModelConfig", "RopeScaling", "get_config", "KVCache", "Transformer",
           "set_training_options"]
