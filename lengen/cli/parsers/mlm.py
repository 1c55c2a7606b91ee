"""`lengen mlm`: a bidirectional byte-level masked language model (Su's MLM length-extrapolation
experiment; docs/mlm.md): train at one length, score masked tokens at longer ones."""

from __future__ import annotations

from lengen.cli.parsers import corpus_training, values
from lengen.cli.parsers.common import add_device_arguments, add_logit_scale_arguments, parse_lengths


TRAIN_EPILOG = """examples:
  # the defaults of Su's protocol (docs/mlm.md): 4 x 128 pre-LN RoPE encoder, windows of 64 bytes, 15% BERT masking
  lengen mlm train --out runs/mlm-std
  # randomized positions (Ruoss): sorted distinct integers from [0, 2048)
  lengen mlm train --positions randomized --out runs/mlm-rand
  # equal-mean random positions (Su): span n ~ Exp(mean 64), float positions (rope / sincos only)
  lengen mlm train --positions equal_mean --position-option distribution=exponential --out runs/mlm-exp
  lengen mlm train --positions equal_mean --position-option distribution=beta \\
      --position-option test_length=512 --position-option beta_shape=7 --out runs/mlm-beta

Interrupt with Ctrl-C and rerun the same command to resume. The run directory gets config.json,
checkpoint.pt, metrics.jsonl and eval.json (validation accuracy and bits per byte at the
training length next to a unigram baseline). log-n scaling is not a training option: every
training window has the training length, where the factor is 1; switch it on in `lengen mlm eval`.
"""


EVAL_EPILOG = """examples:
  lengen mlm eval runs/mlm-std --lengths 64,128,256,512
  lengen mlm eval runs/mlm-rand --test-positions random,uniform --log-n both --windows 1000
  lengen mlm eval runs/mlm-exp --log-n on --out results/mlm-exp

Rows: one per (test-position mode, log-n) variant and length, plus the unigram baseline;
columns accuracy, bpb (masked-token cross-entropy in bits), acc_first (indices below the
training length), acc_last_half. Windows, masks and test positions depend only on --seed and the
length, so every variant and every run scores the same tokens. Writes results.csv, results.json
and results.png into --out (default RUN_DIR/eval-mlm).
"""


def add_parser(sub) -> None:
    corpus_training.add_command_group(sub, "mlm", "bidirectional byte-level masked LM: train, evaluate against "
                                "length", __doc__, [_add_train, _add_eval])


def _add_train(sub) -> None:
    d = values.MLM
    p = corpus_training.add_subcommand(sub, "train", "train a masked LM (resumable)", "Train a byte-level "
                                 "bidirectional masked LM on random windows of a corpus.", TRAIN_EPILOG)
    g = corpus_training.add_data_arguments(p, d)
    g.add_argument("--mask-rate", type=float, help=f"share of positions chosen per window, then "
                   f"80%% MASK / 10%% random byte / 10%% unchanged ({d.mask_rate})")
    corpus_training.add_position_arguments(
        p, f"standard, randomized, equal_mean, pose ({d.positions})",
        "equal_mean: distribution=exponential|beta, test_length=M, beta_shape=B; pose: target=L_t, chunks=N, "
        "split=half|uniform")
    g = corpus_training.add_model_arguments(p, d, max_position="learned-table size and randomized range")
    g.add_argument("--key-norm", action="store_true", default=None, help="L2-normalise the keys")
    add_logit_scale_arguments(g, "none (log-n: `mlm eval --log-n`)")
    corpus_training.add_run_arguments(p, d, seeded="weights, data order, masks, positions", validated="eval.json",
                                out_default="runs/mlm-PE-POSITIONS-LTRAIN-sSEED")
    p.set_defaults(func="lengen.cli.mlm:run_train")


def _add_eval(sub) -> None:
    d = values.MLM_EVAL
    p = corpus_training.add_subcommand(sub, "eval", "masked-token accuracy and bits per byte against length",
                                 "Evaluate a trained masked LM against length.", EVAL_EPILOG)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `lengen mlm train`")
    p.add_argument("--lengths", type=parse_lengths, help="window lengths, comma-separated "
                   "(default: 1, 2, 4, 8 x the training length)")
    p.add_argument("--test-positions", help="comma-separated test position modes: standard, random, "
                   "uniform (default: random,uniform for a randomized run, standard otherwise)")
    p.add_argument("--log-n", default=d.log_n, help="log-n scaled attention at test time: off, on or both "
                   f"({d.log_n})")
    p.add_argument("--windows", type=int, default=d.windows, help=f"validation windows per length ({d.windows})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"windows per forward pass ({d.batch_size})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"seed of the windows, masks and test positions ({d.seed})")
    p.add_argument("--no-unigram", action="store_true", help="leave out the unigram baseline's rows")
    p.add_argument("--out", metavar="DIR", help="output directory (default RUN_DIR/eval-mlm)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p, "the evaluation runs")
    p.set_defaults(func="lengen.cli.mlm:run_eval")
