"""Model configs and the NNX decoder."""

from tunix_lite.models.config import PRESETS, ModelConfig, RopeScaling, get_config
from tunix_lite.models.transformer import KVCache, Transformer, set_training_options

__all__ = ["PRESETS", "ModelConfig", "RopeScaling", "get_config", "KVCache", "Transformer",
           "set_training_options"]
