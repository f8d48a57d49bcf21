#!/usr/bin/env bash
# Set up the full test environment (once) and run every test: unit, reference parity, notebooks.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/pytest ] || ! .venv/bin/python -c "import torch, transformers, tunix_lite" 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[all]"
fi
export JAX_PLATFORMS=cpu TUNIX_LITE_PROFILE=ci
.venv/bin/python -m pytest "$@"
