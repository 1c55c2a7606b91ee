#!/usr/bin/env bash
PY=/work/main/.venv/bin/python
for tree in base main; do
  for enc in rope alibi; do
    echo "=== step_traffic $tree $enc"
    (cd /work/$tree && PYTHONPATH=/work/$tree $PY benchmarks/step_traffic.py --models 8 --encoding $enc --top 0 2>&1 | grep -v "^$" | tail -6)
  done
done
for rep in 1 2 3; do
  for tree in base main; do
    echo "=== train_many $tree rep $rep"
    (cd /work/$tree && PYTHONPATH=/work/$tree $PY benchmarks/train_many.py --encodings rope,alibi --sizes 8 --steps 8 --solo-models 1 2>&1 | grep "| 8 ")
  done
done
