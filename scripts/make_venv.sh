#!/usr/bin/env bash
# Create .venv and install the package with the given extras: `bash scripts/make_venv.sh all`.
# pip byte-compiles every installed file on one core (about 70 of the 130 s that `all` takes on
# 2 cores); here it skips that, and compileall does it on every core instead.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q --no-compile -e ".[$1]"
# Quietly, as pip does: some packages ship sources for newer Pythons (torch's py312_intrinsics.py,
# never imported here) that fail to compile, and old ones that warn.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
.venv/bin/python -m compileall -q -j 0 "$site" > /dev/null 2>&1 || true
