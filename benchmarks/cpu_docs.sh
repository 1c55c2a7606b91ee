#!/bin/bash
# The CPU speed tables of docs/ (results/speed.md, training_free.md), measured again into one folder of raw outputs that docs' `bench` blocks render
# (python scripts/build_docs.py). Run it on an idle machine: stop other CPU work first (kill
# -STOP / -CONT), since the "idle" rows of shared_cpu.py and every absolute number need it.
# About 40 minutes on 2 cores.
#
#   bash benchmarks/cpu_docs.sh [OUT]     # OUT: docs/data/benchmarks/<today>-cpu-quiet
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
D=${1:-docs/data/benchmarks/$(date -u +%F)-cpu-quiet}
mkdir -p "$D"
run() {  # run NAME SCRIPT ARGS...: stdout, a provenance line on top, to NAME.txt; stderr to NAME.err
  local name=$1; shift
  [ -s "$D/$name.txt" ] && { echo "$name: done before, kept"; return; }   # rerunning resumes
  echo "$name: python $*"
  if { echo "# lengen $(git rev-parse --short=12 HEAD)$(git diff --quiet -- lengen benchmarks || echo +changes)," \
            "$(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg): python $*"
       PYTHONPATH=. "$PY" "$@"; } > "$D/$name.tmp" 2> "$D/$name.err"; then
    mv "$D/$name.tmp" "$D/$name.txt"
    [ -s "$D/$name.err" ] || rm -f "$D/$name.err"
  else
    echo "$name FAILED (see $D/$name.err)"
  fi
}
run attention-kernel-2threads benchmarks/attention_kernel.py --skip-model --threads 2
run attention-kernel-1thread  benchmarks/attention_kernel.py --skip-model --threads 1
run attention-kernel-model    benchmarks/attention_kernel.py --skip-attention --threads 2 --encodings rope,relative,t5,alibi
run shared-cpu                benchmarks/shared_cpu.py --steps 40
run train-many-paper          benchmarks/train_many.py --threads 1 --steps 6 --sizes 1,8 --buckets auto,1
run train-many-tiny           benchmarks/train_many.py --threads 1 --layers 2 --d-model 16 --heads 2 \
                                --batch-size 8 --train-length 5 --steps 20 --sizes 8,32,128
run attention-speed           benchmarks/attention_speed.py --lengths 1024,4096,16384 --repeats 3 --threads 1
run hf-forward                benchmarks/hf_forward_speed.py --layers 1 --lengths 4096,16384 --threads 1 \
                                --methods "yarn:factor=16;rerope:window=512;self_extend:group=16,window=1024;dca;string"
run train-speed-prope-fope    benchmarks/train_speed.py --encodings rope,p_rope,fope,rope,p_rope,fope \
                                --steps 30 --eval-samples 32 --threads 1
run train-speed-cope          benchmarks/train_speed.py --encodings rope,cope,rope,cope,rope,cope \
                                --steps 8 --eval-samples 8 --eval-batch 8 --threads 1
run train-speed-bias-family   benchmarks/train_speed.py --encodings alibi,kerple_log,t5,fire,fire_shared \
                                --steps 30 --eval-samples 32 --threads 1
run sweep-throughput          benchmarks/sweep_throughput.py --tasks 1
echo "raw outputs in $D"
