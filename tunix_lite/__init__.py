"""tunix_lite: LLM post-training in JAX + Flax NNX, small enough to read,
complete enough to build on.

Importing the package does no work (and does not import jax), so a notebook can still set XLA flags
after `import tunix_lite`.
"""

__version__ = "0.1.0"


def load(name_or_path="tiny", **kwargs):
    """(model, tokenizer) for "tiny", "gemma3-270m", a checkpoint directory or a hub id."""
    from tunix_lite.loading import load as _load

    return _load(name_or_path, **kwargs)
