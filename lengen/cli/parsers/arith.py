"""`lengen arith`: arithmetic length generalization (McLeish et al. 2024, Abacus embeddings; Cho et
al. 2024, position coupling): train a small causal decoder on additions or multiplications of up
to N digits, evaluate it on every (digits of a, digits of b) up to M (docs/arithmetic.md)."""

from __future__ import annotations

from lengen.cli.parsers import corpus_training, values
from lengen.cli.parsers.common import add_device_arguments


TRAIN_EPILOG = """examples:
  # Abacus embeddings (with NoPE): addition up to 5 digits, tested on every pair up to 8
  lengen arith train --task addition --pe abacus --train-digits 5 --test-digits 8 --out runs/add-abacus
  # Abacus with FIRE or RoPE as the attention's encoding (McLeish et al. combine them)
  lengen arith train --pe abacus+fire --abacus-k 20 --out runs/add-abacus-fire
  # position coupling (Cho et al.): their format and learned absolute ids; RoPE or FIRE read them too
  lengen arith train --pe learned --positions coupled --format padded --max-position 16 --out runs/add-coupled
  lengen arith train --pe rope --positions coupled --format padded --max-position 16 --out runs/add-coupled-rope
  # the baseline: ordinary positions 0..T-1
  lengen arith train --pe rope --out runs/add-rope
  # multiplication n x 1, multi-operand addition
  lengen arith train --task multiplication --b-digits 1 --out runs/mul-nx1
  lengen arith train --task multi_addition --max-operands 4 --out runs/multi-add

--pe is an encoding of `lengen.encodings` (none = NoPE, rope, fire, learned, alibi, ...), `abacus`
(Abacus + NoPE) or `abacus+ENCODING`. --positions says where that encoding's positions come from:
`standard` (0..T-1) or `coupled` (equal ids for digits of equal significance; not with NoPE, not
with --format plain). Formats: reversed (89+54=341, McLeish et al.), padded (57+68=521: operands
zero-padded, the answer zero-padded and reversed, Cho et al.), plain (98+45=143). The loss is on the
answer tokens only; evaluation decodes greedily, exact match per cell. Interrupt with Ctrl-C and
rerun the same command to resume. The run directory gets config.json, checkpoint.pt,
metrics.jsonl and eval.json (the heat map up to --test-digits).
"""


EVAL_EPILOG = """examples:
  lengen arith eval runs/add-abacus                      # the run's own grid again
  lengen arith eval runs/add-abacus --test-digits 12 --samples 50 --out results/add-abacus-12.json

Every cell (i, j) gets --samples problems from its own random stream (seeded by --seed, i and j),
so any two runs and any two grids score the same problems in the cells they share.
"""


def add_parser(sub) -> None:
    corpus_training.add_command_group(sub, "arith", "arithmetic length generalization: addition and multiplication "
                                "with Abacus embeddings and position coupling", __doc__, [_add_train, _add_eval])


def _add_train(sub) -> None:
    d = values.ARITH
    p = corpus_training.add_subcommand(sub, "train", "train an arithmetic decoder (resumable), then evaluate it",
                                 "Train a causal decoder on arithmetic problems of up to --train-digits digits "
                                 "and evaluate it on every cell up to --test-digits.", TRAIN_EPILOG)
    g = p.add_argument_group("task")
    g.add_argument("--task", help=f"{', '.join(values.ARITH_TASKS)} ({d.task})")
    g.add_argument("--format", help=f"{', '.join(values.ARITH_FORMATS)} ({d.format})")
    g.add_argument("--train-digits", type=int, metavar="N", help=f"operands of 1..N digits in training ({d.train_digits})")
    g.add_argument("--test-digits", type=int, metavar="M", help=f"evaluation on every cell up to M digits ({d.test_digits})")
    g.add_argument("--max-operands", type=int, help=f"multi_addition: 2..K operands ({d.max_operands})")
    g.add_argument("--b-digits", type=int, help="multiplication: the second operand's digits capped (1: n x 1; "
                   "default: n x m)")
    g = p.add_argument_group("positions")
    g.add_argument("--pe", help=f"ENCODING (none = NoPE, rope, fire, learned, ...), abacus, or abacus+ENCODING ({d.pe})")
    g.add_argument("--pe-option", dest="pe_options", action="append", metavar="KEY=VALUE",
                   help="attention encoding option, repeatable (e.g. base=500)")
    g.add_argument("--positions", help=f"{', '.join(values.ARITH_POSITIONS)} ({d.positions})")
    g.add_argument("--abacus-k", type=int, metavar="K", help=f"Abacus training offset, k ~ U{{0..K}} per step; "
                   f"0 at evaluation ({d.abacus_k}, McLeish et al.'s)")
    g.add_argument("--max-position", type=int, help=f"position ids live in [0, max-position): the learned table's "
                   f"rows, and coupled ids' training range ({d.model.max_position})")
    corpus_training.add_architecture_arguments(p.add_argument_group("model"), d)
    g = p.add_argument_group("optimisation and run")
    corpus_training.add_optimisation_arguments(g, d, "fresh problems",
                                         "the weights, problems and offsets")
    g.add_argument("--eval-samples", type=int, help=f"problems per evaluation cell ({d.eval_samples})")
    g.add_argument("--eval-seed", type=int, help=f"seed of the evaluation problems ({d.eval_seed})")
    g.add_argument("--eval-batch", type=int, help=f"problems decoded together ({d.eval_batch})")
    g.add_argument("--out", metavar="RUN_DIR", help="run directory (default runs/arith-TASK-PE-POSITIONS-NN-sSEED)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p, "training and the evaluation run")
    p.set_defaults(func="lengen.cli.arith:run_train")


def _add_eval(sub) -> None:
    p = corpus_training.add_subcommand(sub, "eval", "exact match over (digits of a, digits of b) of a trained run",
                                 "Evaluate a trained arithmetic run by greedy decoding.", EVAL_EPILOG)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `lengen arith train`")
    p.add_argument("--test-digits", type=int, metavar="M", help="every cell up to M digits (default: the run's)")
    p.add_argument("--samples", type=int, help="problems per cell (default: the run's --eval-samples)")
    p.add_argument("--seed", type=int, help="seed of the problems (default: the run's --eval-seed)")
    p.add_argument("--out", metavar="FILE", help="where to write the results JSON, the heat map beside it as .png "
                   "(default RUN_DIR/eval-arith-MM.json)")
    p.add_argument("--force", action="store_true", help="let --out replace a file of a training run "
                   "(its eval.json, ...)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p, "the evaluation runs")
    p.set_defaults(func="lengen.cli.arith:run_eval")
