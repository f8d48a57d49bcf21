#!/usr/bin/env bash
# Set up a virtual environment (once) and run the main job on the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/tunix-lite ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[course]"
fi
.venv/bin/tunix-lite info
.venv/bin/tunix-lite generate --model tiny --max-new-tokens 40 \
  --prompt "Question: Tom has 12 coins. Tom doubles them. How many coins does Tom have now?
Answer:" \
  --prompt "Question: What comes next: 3, 6, 9, 12?
Answer:"
