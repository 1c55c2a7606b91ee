"""`lengen tasks`: the 15 CHE tasks with their level, vocabularies and one decoded example."""

from __future__ import annotations

import numpy as np

from lengen.cli.options import format_table
from lengen.errors import LengenError
from lengen.tasks import TASK_NAMES, get_task


def run(args) -> int:
    if args.length < 1:
        raise LengenError(f"--length must be >= 1, got {args.length}")
    rows = []
    for name in TASK_NAMES:
        task = get_task(name)
        batch = task.sample(1, args.length, np.random.default_rng(args.seed))
        rows.append([name + (" †" if task.permutation_invariant else ""), task.level, task.input_vocab_size,
                     task.output_vocab_size, task.decode_input(batch.inputs[0].tolist()),
                     task.decode_output(batch.targets[0].tolist())])
    print(format_table(["task", "level", "in vocab", "out vocab", f"example input (length {args.length})",
                        "target"], rows))
    print("\nlevel: R regular, DCF deterministic context-free, CS context-sensitive (Deletang et al. 2022).\n"
          "† permutation-invariant: solvable without positional information.\n"
          "In targets, | is the terminator token and each . after it a padding token: answers shorter than\n"
          "the output slots end with a terminator and are padded (the padding counts in the loss, not in\n"
          "the accuracy).")
    return 0
