#!/usr/bin/env bash
# Everything the open GPU work needs measured, in two parts that each fit one 10-minute call of
# the device tool (docs/results/speed.md, docs/engineering/gpu-sessions.md and docs/devices.md say
# where the results go):
#
#   bash benchmarks/gpu_session.sh checks   # CUDA tests + attention-level and whole-model speed (issue 12)
#   bash benchmarks/gpu_session.sh many     # many models at once on CUDA (issue 10)
#   bash benchmarks/gpu_session.sh once     # the most of both in ONE call of under 10 minutes, for a
#                                           # session lent 15 device-minutes (start-up included)
#   bash benchmarks/gpu_session.sh sweeps   # sweeps of groups sharing the GPU: --group-size x
#                                           # --runs-per-gpu (sweep_throughput.py)
#   bash benchmarks/gpu_session.sh devices  # docs/devices.md's two tables and docs/sweeps.md's K runs
#                                           # sharing a GPU, each into its own raw file (bench blocks)
#   bash benchmarks/gpu_session.sh flex     # flex speed one length per process (the first compile of
#                                           # each method's passes took the whole 90 s of `once` on
#                                           # 2026-11-28; inductor's disk cache serves later lengths)
#
# Runs with the machine's python3 and PYTHONPATH=. (no install); writes one log per step to
# $OUT (the device tool's folder; ./gpu-session-out elsewhere). Every step has its own time limit,
# so one slow step cannot eat the others' time; a step that times out says so in its log.
set -u
case "${1:-}" in
checks | many | once | flex | sweeps | devices) ;;
*) echo "usage: bash benchmarks/gpu_session.sh checks|many|once|flex|sweeps|devices" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-session-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}

source benchmarks/gpu_step.sh   # step NAME SECONDS COMMAND...

{ date -u; nvidia-smi -L; $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; } \
    >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

case "${1:-}" in
checks)
    step tests 200 $PY -m pytest -q -p no:cacheprovider --dist load -W default::FutureWarning tests/test_flex_remap.py tests/test_devices.py \
        tests/test_group_training.py::test_group_on_cuda_matches_solo_on_cuda
    step attention_prefill 150 $PY benchmarks/attention_speed.py --device cuda --dtype bfloat16 \
        --lengths 16384,65536,131072 --repeats 3 --flex only
    step attention_decode 60 $PY benchmarks/attention_speed.py --device cuda --dtype bfloat16 \
        --lengths 16384,65536,131072 --repeats 3 --step decode --flex only
    step hf_forward 130 $PY benchmarks/hf_forward_speed.py --device cuda --dtype bfloat16 \
        --lengths 16384,65536,131072 --repeats 2
    ;;
many)
    step many_rope 240 $PY benchmarks/train_many.py --device cuda --encodings rope \
        --sizes 1,8,32,128,256,512 --buckets auto,1,2,4 --steps 20 --warmup 3 --solo-models 2
    step many_precision 120 $PY benchmarks/train_many.py --device cuda --encodings rope \
        --sizes 256 --buckets auto,1,4 --steps 20 --warmup 3 --solo-models 1 --precision bf16
    step many_others 150 $PY benchmarks/train_many.py --device cuda --encodings alibi,relative \
        --sizes 1,32,256 --buckets auto,1,4 --steps 20 --warmup 3 --solo-models 2
    ;;
once)  # limits add up to 450 s: run with timeout_s 480 (a start took 30-60 s on 2026-11-27/28)
    # issue 54: the Triton remapping kernel compiled and checked against its references, then timed
    # against SDPA (all lengths, no flex: flex compiles take > 80 s a method) and against flex at 16k;
    # the group of 512 in fp32 and bf16 (0.65 GB / model-step counted for bf16 on the meta device, RoPE rotated by the one-pass kernel)
    # -v: the names as they finish (on 2026-11-28 the run hung after its last test, before the summary)
    step tests 110 $PY -m pytest -v -p no:cacheprovider -n 8 --dist load -W default::FutureWarning tests/test_flex_remap.py tests/test_devices.py \
        tests/test_group_training.py tests/test_kernels.py tests/test_hf_banded.py tests/test_triton_remap.py tests/test_triton_rotary.py tests/test_group_bf16.py \
        -k "cuda or flex or devices or multiple or folded or vmap or triton_remap or triton_rotary or group_bf16"
    step remap_kernel 130 $PY benchmarks/remap_kernel_speed.py --no-flex --lengths 16384,65536,131072 --repeats 3 \
        --configs 128x64x8,64x64x4
    step remap_kernel_flex_16384 110 $PY benchmarks/remap_kernel_speed.py --lengths 16384 --repeats 3 \
        --methods "rerope:window=512;self_extend:group=8,window=512"
    step many_precision 100 $PY benchmarks/train_many.py --device cuda --encodings rope --sizes 512 --buckets auto \
        --precision fp32,bf16 --steps 10 --warmup 2 --solo-models 1
    ;;
flex)  # limits add up to 400 s: run with timeout_s 430
    for T in 16384 65536 131072; do
        step "attention_prefill_$T" 80 $PY benchmarks/attention_speed.py --device cuda --dtype bfloat16 \
            --lengths $T --repeats 3 --flex only --methods "rerope:window=512;self_extend:group=8,window=512;dca"
    done  # 2026-11-28: the first two timed out compiling, the third (cache warm) took 60 s
    step hf_forward 120 $PY benchmarks/hf_forward_speed.py --device cuda --dtype bfloat16 \
        --lengths 16384,65536 --repeats 2 --methods "yarn:factor=8;rerope:window=2048;self_extend:group=8,window=1024"
    step many_tf32 40 $PY benchmarks/train_many.py --device cuda --encodings rope \
        --sizes 512 --buckets auto --steps 10 --warmup 2 --solo-models 1 --precision tf32
    ;;
devices)  # limits add up to 420 s: run with timeout_s 460. The tables docs/devices.md and
    # docs/sweeps.md hold as hand-copied history (H100, 2026-11-23), measured again
    step devices_encodings 200 $PY benchmarks/device_check.py --device cuda --steps 150 --max-length 50 --part encodings
    step devices_precision 80 $PY benchmarks/device_check.py --device cuda --steps 150 --max-length 50 --part precision
    step sweeps_k 140 $PY benchmarks/sweep_throughput.py --device cuda --ks 1,2,4,8,16 --steps 300
    ;;
sweeps)  # limits add up to 380 s: run with timeout_s 420
    # K processes sharing the GPU, each training a group of G runs (seeds): what the CUDA defaults
    # of --runs-per-gpu and --group-size should be (a sweep's groups hold 5-30 runs, docs/sweeps.md)
    step sweeps_k8 240 $PY benchmarks/sweep_throughput.py --device cuda --ks 8 --group-sizes 1,9,30 --steps 200
    step sweeps_k16 140 $PY benchmarks/sweep_throughput.py --device cuda --ks 16 --group-sizes 9 --steps 200
    ;;
esac
