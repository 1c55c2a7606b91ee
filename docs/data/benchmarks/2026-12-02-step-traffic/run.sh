#!/usr/bin/env bash
# How changes.jsonl was made: today's benchmarks/step_traffic.py (the counter) run against the
# library of each commit of issue 54's traffic work, a meta-device count of a group of 512 and a
# CPU group of 8 (1 thread, 2 steps after a warm-up), three rounds of the CPU timing interleaved
# over the commits (a shared 2-core machine: the block shows the median). Run from the repository root.
# ROWS='timed again|one pass' runs only the rows whose label matches (grep -E): how the rotary
# kernel's row was added, beside three new timings of the commit before it on the same machine and load.
set -euo pipefail
out=${1:-docs/data/benchmarks/2026-12-02-step-traffic/changes.jsonl}
py=${PYTHON:-python}
counter=$PWD/benchmarks/step_traffic.py
rows=(
  "f38fdc8|before: SDPA counted as its math path|--sdpa math"
  "f38fdc8|before: SDPA counted as CUDA's memory-efficient kernel|"
  "0f63de0|models folded into the batch for SDPA|"
  "5229107|split_heads' Function under vmap|"
  "6ee4f56|bf16 activations (precision bf16)|"
  "e111f6f|bucket rows as leaves (gradients by index_add_)|"
  "3c85040|layer norm's vmap rule (one addcmul)|"
  "bb6eee4|fused Adam for the stack|"
  "bb6eee4|fused Adam for the stack, timed again beside the next row|"
  "e2e27d9|RoPE's rotation in one pass (Triton kernel)|"
)
for round in 1 2 3; do
  for row in "${rows[@]}"; do
    IFS='|' read -r commit label flags <<<"$row"
    if [ -n "${ROWS:-}" ] && ! grep -qE "$ROWS" <<<"$label"; then continue; fi
    snap=/tmp/step-traffic-snaps/$commit
    if [ ! -d "$snap" ]; then mkdir -p "$snap" && git archive "$commit" | tar -x -C "$snap"; fi
    cp "$counter" "$snap/benchmarks/step_traffic.py"
    # shellcheck disable=SC2086
    (cd "$snap" && OMP_NUM_THREADS=1 PYTHONPATH=. $py benchmarks/step_traffic.py --models 512 --top 0 \
      --cpu-steps 2 --json "$OLDPWD/$out" --label "$label" $flags >/dev/null)
    if [ "$round" = 1 ] && [ "$commit" != f38fdc8 ] && [ "$commit" != 0f63de0 ] && [ "$commit" != 5229107 ] \
       && [[ "$label" != *"timed again"* ]]; then
      (cd "$snap" && OMP_NUM_THREADS=1 PYTHONPATH=. $py benchmarks/step_traffic.py --models 512 --top 0 \
        --precision bf16 --json "$OLDPWD/$out" --label "$label" >/dev/null)
    fi
  done
done
