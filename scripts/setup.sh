#!/usr/bin/env bash
# Sets up .venv with lengen and its test (with Triton, whose interpreter runs the GPU kernel's tests on
# the CPU), HF, GGUF, sweep (Ray), docs-site (MkDocs) and lm-eval extras, at the
# versions in constraints.txt (what CI passed with), so the README's commands give the same
# environment on any day. On another Python than the one constraints.txt was resolved for, or with
# LENGEN_UNPINNED=1, it installs the newest releases within pyproject.toml's ranges instead (and
# says so).
# When the venv has no torch it installs the pinned torch from pip's configured index: on lengen's
# dev machines and CI that is a local CPU wheel; from plain PyPI on Linux it is the CUDA build
# (several GB). TORCH_INDEX_URL picks another index (e.g. PyTorch's CPU-only one, see README).
# A torch already in .venv is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip=(.venv/bin/pip install --quiet --disable-pip-version-check)
have=$(.venv/bin/python -c 'import platform; print(".".join(platform.python_version_tuple()[:2]))')
pinned_for=$(sed -n 's/^# python //p' constraints.txt)
if [ -n "${LENGEN_UNPINNED:-}" ]; then
  echo "scripts/setup.sh: LENGEN_UNPINNED is set: newest releases within pyproject.toml's ranges"
elif [ "$have" != "$pinned_for" ]; then
  echo "scripts/setup.sh: constraints.txt is for Python $pinned_for, this is $have: installing the" \
       "newest releases within pyproject.toml's ranges (a combination CI has not run)"
else
  pip+=(--constraint constraints.txt)
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "${pip[@]}" torch --index-url "$TORCH_INDEX_URL"
  else
    # the pinned release even when unpinned: a plain `torch` from PyPI is the newest CUDA build
    "${pip[@]}" "$(grep '^torch==' constraints.txt)"
  fi
fi
"${pip[@]}" -e ".[dev,hf,gguf,sweep,docs,lmeval]"
