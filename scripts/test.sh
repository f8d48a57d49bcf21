#!/usr/bin/env bash
# Set up the full test environment (once) and run every test: unit, reference parity, graded
# exercises, and every notebook under nbval (ci profile). Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/pytest ] || ! .venv/bin/python -c "import torch, transformers, tunix_lite" 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[all]"
fi
export JAX_PLATFORMS=cpu TUNIX_LITE_PROFILE=ci
.venv/bin/python -m tunix_lite.course.build --check   # committed exercises == a fresh build
.venv/bin/python -m pytest -p tunix_lite.course.nbtiming \
  --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=600 \
  tests notebooks solutions "$@"
