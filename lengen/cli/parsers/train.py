"""`lengen train`: train a CHE model on lengths 1..N and evaluate it on 1..M."""

from __future__ import annotations

import argparse

from lengen.cli.parsers import values
from lengen.cli.parsers.common import add_device_arguments, add_layer_pe_argument, add_logit_scale_arguments


EPILOG = """examples:
  # the seed paper's experiment on one task: standard vs randomized RoPE
  lengen train --task reverse_string --pe rope --steps 2000 --out runs/rev-rope
  lengen train --task reverse_string --pe rope --positions randomized --steps 2000 --out runs/rev-rope-rand
  # encoding options and a preset (flags always override the preset)
  lengen train --task parity_check --pe alibi --train-length 20 --max-length 100 --out runs/par
  lengen train --preset ruoss-randomized --task bucket_sort --out runs/bs
  # the CHE benchmark's recurrent baselines (no --pe/--positions: they read no positions)
  lengen train --task reverse_string --model stack_rnn --lr 1e-3 --out runs/rev-stack

Interrupt with Ctrl-C and rerun the same command to resume from the last checkpoint.
The run directory gets config.json, metrics.jsonl, checkpoint.pt, eval.json and accuracy.png.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a CHE model and evaluate it past its training length",
                       description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("task and data")
    g.add_argument("--task", help="one of `lengen tasks` (default reverse_string)")
    g.add_argument("--train-length", type=int, metavar="N", help="train on lengths U{1..N} (default 40)")
    g.add_argument("--max-length", type=int, metavar="M", help="evaluate lengths 1..M (default 500)")
    g.add_argument("--eval-samples", type=int, help="samples per evaluated length (default 512)")
    g = p.add_argument_group("positions")
    g.add_argument("--pe", help="positional encoding: none, sincos, learned, relative, alibi, rope, ... (default rope)")
    g.add_argument("--pe-option", dest="pe_options", action="append", metavar="KEY=VALUE",
                   help="encoding option, repeatable (e.g. base=500)")
    g.add_argument("--positions", help="training position sampler: standard, randomized, equal_mean, pose, ... "
                   "(default standard)")
    g.add_argument("--position-option", dest="position_options", action="append", metavar="KEY=VALUE",
                   help="sampler option, repeatable (e.g. pose: target=1000, chunks=2, split=half|uniform)")
    g.add_argument("--test-positions", choices=["random", "uniform", "standard"],
                   help="test-time positions (default: random for randomized training, else standard)")
    g.add_argument("--max-position", type=int, help="positions are drawn from [0, max_position) (default 2048)")
    add_layer_pe_argument(g)
    g = p.add_argument_group("model (defaults: the seed paper's encoder)")
    g.add_argument("--model", choices=values.ARCHITECTURES,
                   help="architecture (transformer); rnn, lstm, stack_rnn and tape_rnn are the CHE benchmark's "
                        "recurrent baselines: they read no positions, so the position and Transformer flags do not "
                        "apply to them")
    g.add_argument("--layers", type=int, help="blocks (5)")
    g.add_argument("--heads", type=int, help="attention heads (8)")
    g.add_argument("--d-model", type=int, help="width (64)")
    g.add_argument("--d-ff", type=int, help="feed-forward width (256)")
    g.add_argument("--dropout", type=float, help="dropout (0.1)")
    g.add_argument("--norm", choices=["post", "pre"], help="LayerNorm placement (post)")
    add_logit_scale_arguments(g, "none, log_n, log_n_clipped, log_n_position")
    g.add_argument("--key-norm", action="store_true", default=None, help="L2-normalise attention keys")
    g = p.add_argument_group("recurrent models (--model rnn, lstm, stack_rnn, tape_rnn)")
    g.add_argument("--hidden-size", type=int, help="state width (256)")
    g.add_argument("--memory-cell-size", type=int, help="stack / tape cell width, stack_rnn and tape_rnn (8)")
    g.add_argument("--memory-size", type=int,
                   help="stack depth / tape length (default: the L + T steps of each sequence)")
    g = p.add_argument_group("optimisation and run")
    g.add_argument("--preset", help="named defaults for a seed experiment (see `lengen presets`)")
    g.add_argument("--steps", type=int, help="training steps (default 10000)")
    g.add_argument("--batch-size", type=int, help="batch size (default 128)")
    g.add_argument("--lr", type=float, help="Adam learning rate (default 1e-4)")
    g.add_argument("--grad-clip", type=float, help="global gradient-norm clip (default 1.0)")
    g.add_argument("--seed", type=int, help="seed of weights, data and positions (default 0)")
    g.add_argument("--checkpoint-every", type=int, metavar="K", help="checkpoint every K steps (default 500)")
    g.add_argument("--log-every", type=int, help="metrics row every this many steps (default 50)")
    g.add_argument("--out", help="run directory (default runs/TASK-PE-POSITIONS-sSEED)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_device_arguments(p)
    p.set_defaults(func="lengen.cli.train:run")
