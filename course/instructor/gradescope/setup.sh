#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder image. Everything is installed here,
# tunix-lite from the wheel in the autograder zip (no index publishes it; its dependencies come
# from PyPI), so run_autograder installs nothing per submission.
set -euo pipefail
apt-get update -qq
if python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then  # Ubuntu 24.04: 3.12
  python=python3 && apt-get install -y -qq python3-venv
else  # Ubuntu 22.04 ships 3.10; tunix-lite needs >= 3.11
  python=python3.11 && apt-get install -y -qq python3.11 python3.11-venv
fi
"$python" -m venv /autograder/venv
wheel=$(ls /autograder/source/tunix_lite-*.whl)  # exactly one: with several, pip fails loudly
/autograder/venv/bin/pip install --no-cache-dir "${wheel}[hosted]"  # [hosted]: what notebooks import
