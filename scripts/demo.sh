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
# Base-model style prompts (the format it was pretrained on), then a chat turn. It gets some right and
# some wrong: the SFT, DPO and GRPO lessons start from exactly this model.
.venv/bin/tunix-lite generate --model tiny --max-new-tokens 32 \
  --prompt "Question: Which is larger, 405 or 596?
Answer:" \
  --prompt "Question: Tom has 12 coins. Tom doubles them. How many coins does Tom have now?
Answer:"
.venv/bin/tunix-lite generate --model tiny --chat --max-new-tokens 32 --prompt "Write the word coin in capital letters."
