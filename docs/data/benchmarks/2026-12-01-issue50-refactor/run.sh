#!/usr/bin/env bash
# before/after, interleaved: base (c26896b) and main (HEAD), same machine, same run
PY=/work/main/.venv/bin/python
for rep in 1 2; do
  for tree in base main; do
    echo "=== train_speed $tree rep $rep"
    (cd /work/$tree && PYTHONPATH=/work/$tree $PY benchmarks/train_speed.py --encodings rope,alibi,t5,cope --steps 20 --eval-samples 32 2>&1 | tail -12)
    echo "=== train_many $tree rep $rep"
    (cd /work/$tree && PYTHONPATH=/work/$tree $PY benchmarks/train_many.py --encodings rope,alibi --sizes 1,8 --steps 3 2>&1 | tail -10)
  done
done
