#!/usr/bin/env bash
# Set up the full test environment (once) and run every test: unit, reference parity, graded
# exercises, and every notebook under nbval (ci profile). Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/pytest ] || ! .venv/bin/python -c "import torch, transformers, trl, reasoning_gym, jupytext, ruff, tunix_lite" 2>/dev/null; then
  bash scripts/make_venv.sh all
fi
export JAX_PLATFORMS=cpu TUNIX_LITE_PROFILE=ci
# XLA's persistent compilation cache: tests and notebooks compile many identical programs (the tiny model's
# steps, samplers); each compiles once per run, and a second local run starts warm.
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-$PWD/.cache/jax}"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="${JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS:-0.5}"
.venv/bin/python -m tunix_lite.course.build --check   # committed exercises == a fresh build
# One worker per core; a file's tests stay on one worker (module fixtures, a notebook's cells in order).
# --durations: the 30 slowest tests and notebook cells, printed at the end (where the CI time goes).
.venv/bin/python -m pytest -p tunix_lite.course.nbtiming -n "${PYTEST_WORKERS:-auto}" --dist loadfile --durations=30 \
  --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=600 \
  tests notebooks solutions "$@"
