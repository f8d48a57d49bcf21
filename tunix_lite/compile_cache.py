"""XLA's persistent compilation cache, on by default: a rerun loads its programs, not compiles them.

Every `tunix-lite` command, `tunix_lite.load` and the notebooks' `setup()` call `enable()`, which
points JAX at `<cache>/xla`, beside the converted weights ($TUNIX_LITE_CACHE, default
~/.cache/tunix_lite). A second run of the same config then reads its compiled steps and sampler
from disk (benchmarks/RESULTS.md, "Compile once per machine").

    TUNIX_LITE_COMPILATION_CACHE=0      # off (or `tunix-lite --no-compile-cache ...`)
    JAX_COMPILATION_CACHE_DIR=/path     # JAX's own setting wins over the default directory

JAX keys each entry by the program, the jax/XLA version and the device kind, so a changed model or
a new jax misses the cache rather than reads a wrong program.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path

SWITCH = "TUNIX_LITE_COMPILATION_CACHE"
DIRECTORY = "xla"  # under cache_root(); only this directory gets MAX_BYTES (see enable)
# Programs that compile faster than this are not written (JAX's default is 1 s): a run has dozens
# of small programs (initialisation, optimizer state, the sampler's pieces) that add up to seconds.
MIN_COMPILE_SECONDS = 0.2
# JAX's cache never shrinks by default; past this size it drops the least recently used programs
# (a Colab or Kaggle disk is small, and every model, shape and jax version adds its own). Without
# the filelock package (Colab and Kaggle have it) the cache stays unbounded.
MAX_BYTES = 2 * 2**30


def cache_root() -> Path:
    """tunix_lite's cache directory: $TUNIX_LITE_CACHE or ~/.cache/tunix_lite (never the repo)."""
    return Path(os.environ.get("TUNIX_LITE_CACHE", Path.home() / ".cache" / "tunix_lite"))


def cache_path() -> Path | None:
    """Where compiled programs go, or None when the switch turns the cache off."""
    if os.environ.get(SWITCH, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    return Path(os.environ.get("JAX_COMPILATION_CACHE_DIR") or cache_root() / DIRECTORY)


def enable(path: str | Path | None = None) -> Path | None:
    """Turn the persistent cache on at `path` (default: `cache_path()`); the directory, or None
    when switched off. Calling it again is free: only a new directory resets JAX's cache."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    path = Path(path) if path is not None else cache_path()
    if path is None:
        return None
    if jax.config.jax_compilation_cache_dir != str(path):
        jax.config.update("jax_compilation_cache_dir", str(path))
        if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
            jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
        if path == cache_root() / DIRECTORY and find_spec("filelock"):
            # Our directory only: JAX's eviction expects every entry written with it on, so a
            # cap on a directory other programs filled warns at each write. It evicts under a
            # file lock and refuses a cap without the filelock package.
            jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
        # JAX decides at its first compile whether to use a cache; a process that compiled before
        # this call decided "no", and forgets that decision only here.
        compilation_cache.reset_cache()
    return path
