#!/usr/bin/env bash
# Sets up .venv with lengen and its test, HF and sweep (Ray) extras. Installs the CPU wheel of torch 2.13.0 first
# (present on every lengen dev machine) so pip never pulls the multi-gigabyte CUDA build; a
# user with a GPU installs torch their usual way before running this, and it is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/pip install --quiet --disable-pip-version-check torch==2.13.0
fi
.venv/bin/pip install --quiet --disable-pip-version-check -e ".[dev,hf,sweep]"
