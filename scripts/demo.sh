#!/usr/bin/env bash
# Set up a virtual environment (once) and run the main job on the embedded default model: supervised
# fine-tuning of `tiny` on the course's synthetic reasoning tasks, reporting held-out accuracy before and
# after, then chatting with the fine-tuned model (a few minutes on 2 CPU cores).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/tunix-lite ] || ! .venv/bin/python -c "import datasets, orbax.checkpoint" 2>/dev/null; then
  bash scripts/make_venv.sh course
fi
.venv/bin/tunix-lite info
rm -rf runs/sft_tiny  # a fresh run each time (the same folder would resume from its checkpoints)
.venv/bin/tunix-lite train --config sft_tiny --output-dir runs/sft_tiny
.venv/bin/tunix-lite generate --model runs/sft_tiny/model --chat --max-new-tokens 48 \
  --prompt "Which is smaller, 189 or 995?" \
  --prompt "How many times does the letter p appear in pen?" \
  --prompt "What sound does a sheep make?"
