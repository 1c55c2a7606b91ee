#!/usr/bin/env bash
# Sets up .venv with lengen and its test, HF and sweep (Ray) extras. When the venv has no torch it
# installs torch==2.13.0 from pip's configured index: on lengen's dev machines and CI that is a
# local CPU wheel; from plain PyPI on Linux it is the CUDA build (several GB). TORCH_INDEX_URL
# picks another index (e.g. PyTorch's CPU-only one, see README). A torch already in .venv is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    .venv/bin/pip install --quiet --disable-pip-version-check torch --index-url "$TORCH_INDEX_URL"
  else
    .venv/bin/pip install --quiet --disable-pip-version-check torch==2.13.0
  fi
fi
.venv/bin/pip install --quiet --disable-pip-version-check -e ".[dev,hf,sweep]"
