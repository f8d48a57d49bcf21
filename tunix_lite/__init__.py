"""tunix_lite: LLM post-training in JAX + Flax NNX, small enough to read,
complete enough to build on.

Importing the package does no work (and does not import jax), so a notebook can still set XLA flags
after `import tunix_lite`.
"""

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

# Modules that moved, by their former names: `import tunix_lite.verifiers` (a learner's notebook,
# an older script) loads the module where it lives now and binds it under both names, so every
# object is the same one. No file stands at the old path.
MOVED = {
    "tunix_lite.verifiers": "tunix_lite.rewards.verifiers",
    "tunix_lite.sandbox": "tunix_lite.rewards.sandbox",
    "tunix_lite.sandbox_child": "tunix_lite.rewards.sandbox_child",
    "tunix_lite.math_answers": "tunix_lite.rewards.math_answers",
    "tunix_lite.math_latex": "tunix_lite.rewards.math_latex",
    "tunix_lite.data.reasoning_gym_scorer": "tunix_lite.rewards.reasoning_gym_scorer",
    "tunix_lite.rl.rewards": "tunix_lite.rewards.functions",
    "tunix_lite.reasoning_eval": "tunix_lite.evaluation",
    "tunix_lite.model_eval": "tunix_lite.evaluation.model_eval",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a MOVED name (after every real file: a module at the old path would win) and loads
    the module it names."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass  # loaded already, under its own name


if not any(isinstance(finder, _Moved) for finder in sys.meta_path):
    sys.meta_path.append(_Moved())


def load(name_or_path="tiny", **kwargs):
    """(model, tokenizer) for "tiny", "gemma3-270m", a checkpoint directory or a hub id."""
    from tunix_lite.loading import load as _load

    return _load(name_or_path, **kwargs)
