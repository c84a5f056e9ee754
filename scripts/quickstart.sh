#!/usr/bin/env bash
# The quickstart: makes the tiny model once (runs/quickstart/model), then trains it with GRPO
# through every service on this machine (`rlmesh run deploy/configs/quickstart.yaml`).
# Extra arguments are key=value overrides for the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BUILD:-build}/bin
model=runs/quickstart/model
if [[ ! -f $model/config.json ]]; then
  # The quickstart-notes model: Llama-style, d 128, 2 layers, 4 heads, SwiGLU 352, RoPE.
  "$bin/rlmesh" make-tiny-model --arch llama --out "$model" --hidden 128 --layers 2 --heads 4 \
    --kv-heads 4 --intermediate 352 --max-position 64 --seed 1
fi
exec "$bin/rlmesh" run deploy/configs/quickstart.yaml "$@"
