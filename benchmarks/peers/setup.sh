#!/usr/bin/env bash
# Create the virtual environment of one benchmark peer, with pinned versions, and print them.
#
#   bash benchmarks/peers/setup.sh tunix   # google-tunix 0.1.7 + CPU jax 0.10.2  -> benchmarks/.venvs/tunix
#   bash benchmarks/peers/setup.sh trl     # torch 2.13.0 (CPU) + transformers/trl/peft -> benchmarks/.venvs/trl
#   bash benchmarks/peers/setup.sh torch   # the hand-written torch loop: sets up .venvs/trl, links .venvs/torch -> trl
#
# Idempotent: a venv whose marker matches the pins is left alone (FORCE=1 reinstalls). Top-level packages are
# pinned here; every transitive dependency is pinned by constraints-PEER.txt (the pip freeze of a working venv).
# Python: 3.11 (PYTHON=... to override). The torch wheel on this machine's local disk is cp311, and any torch
# spec other than exactly torch==2.13.0 downloads GBs, so torch is installed first, alone, with that pin.
set -euo pipefail

peer="${1:?usage: setup.sh tunix|trl|torch}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${VENV_ROOT:-$(dirname "$here")/.venvs}"
python="${PYTHON:-python3.11}"

case "$peer" in
  tunix)
    venv="$root/tunix"
    stages=("google-tunix==0.1.7 jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 qwix==0.1.8")
    show="google-tunix jax jaxlib flax optax qwix numpy" ;;
  trl|torch)
    if [ "$peer" = torch ]; then
      # the hand-written loop runs in the trl venv (same torch and transformers); .venvs/torch -> trl is a
      # symlink so that benchmarks/run.py finds .venvs/torch/bin/python
      echo "torch peer: uses the trl venv ($root/torch -> trl)"
      mkdir -p "$root"
      [ -e "$root/torch" ] || ln -s trl "$root/torch"
    fi
    peer=trl
    venv="$root/trl"
    stages=("torch==2.13.0"
            "transformers==5.23.0 trl==1.16.0 peft==0.21.2 accelerate==1.15.0 datasets==5.2.0")
    show="torch transformers trl peft accelerate datasets tokenizers safetensors numpy" ;;
  *) echo "unknown peer '$peer' (tunix, trl, torch)" >&2; exit 2 ;;
esac

constraints="$here/constraints-$peer.txt"
marker="$venv/.bench-pins"
want="$(printf '%s\n' "${stages[@]}"; cat "$constraints")"

if [ -z "${FORCE:-}" ] && [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
  echo "$venv: already set up"
else
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  for stage in "${stages[@]}"; do
    # the local-index warnings ("Location ... is ignored") are noise on this machine
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$constraints" $stage 2>&1 \
      | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "pip install failed: $stage" >&2; exit 1; }
  done
  printf '%s\n' "$want" > "$marker"
fi

"$venv/bin/python" - $show <<'EOF'
import importlib.metadata as md, platform, sys
print("python", platform.python_version())
for name in sys.argv[1:]:
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "MISSING"); sys.exit(1)
EOF
