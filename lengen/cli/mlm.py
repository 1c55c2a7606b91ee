"""`lengen mlm`: a bidirectional byte-level masked language model (Su's MLM length-extrapolation
experiment; docs/mlm.md): train at one length, score masked tokens at longer ones."""

from __future__ import annotations

import argparse

from lengen.cli.options import add_device_arguments, parse_key_values, parse_lengths, set_threads

TRAIN_EPILOG = """examples:
  # su_mlm.md section B defaults: 4 x 128 pre-LN RoPE encoder, windows of 64 bytes, 15% BERT masking
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
    p = sub.add_parser("mlm", help="bidirectional byte-level masked LM: train, evaluate against length",
                       description=__doc__)
    mlm_sub = p.add_subparsers(dest="mlm_command", metavar="COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    _add_train(mlm_sub)
    _add_eval(mlm_sub)


def _add_train(sub) -> None:
    from lengen.mlm.config import MLMConfig

    d = MLMConfig()
    p = sub.add_parser("train", help="train a masked LM (resumable)", description="Train a byte-level "
                       "bidirectional masked LM on random windows of a corpus.", epilog=TRAIN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--corpus", metavar="PATH_OR_GLOB",
                   help="a file, a folder or a glob (quote it); default: this Python's standard library")
    g.add_argument("--val-fraction", type=float, help=f"share of documents held out ({d.val_fraction})")
    g.add_argument("--train-length", type=int, metavar="N", help=f"tokens per training window ({d.train_length})")
    g.add_argument("--mask-rate", type=float, help=f"share of positions chosen per window, then "
                   f"80%% MASK / 10%% random byte / 10%% unchanged ({d.mask_rate})")
    g = p.add_argument_group("positions")
    g.add_argument("--positions", help=f"training position sampler: standard, randomized, equal_mean "
                   f"({d.positions})")
    g.add_argument("--position-option", dest="position_options", action="append", metavar="KEY=VALUE",
                   help="sampler option, repeatable (equal_mean: distribution=exponential|beta, "
                   "test_length=M, beta_shape=B)")
    g = p.add_argument_group("model")
    g.add_argument("--pe", help=f"positional encoding: any of `lengen.encodings` ({d.model.pe})")
    g.add_argument("--pe-option", dest="pe_options", action="append", metavar="KEY=VALUE",
                   help="encoding option, repeatable (e.g. base=500)")
    g.add_argument("--layers", type=int, help=f"blocks ({d.model.num_layers})")
    g.add_argument("--heads", type=int, help=f"attention heads ({d.model.num_heads})")
    g.add_argument("--d-model", type=int, help=f"width ({d.model.d_model})")
    g.add_argument("--d-ff", type=int, help=f"feed-forward width ({d.model.d_ff})")
    g.add_argument("--dropout", type=float, help=f"dropout ({d.model.dropout})")
    g.add_argument("--max-position", type=int, help=f"learned-table size and randomized range "
                   f"({d.model.max_position})")
    g.add_argument("--key-norm", action="store_true", default=None, help="L2-normalise the keys")
    g = p.add_argument_group("optimisation and run")
    g.add_argument("--steps", type=int, help=f"training steps ({d.steps})")
    g.add_argument("--batch-size", type=int, help=f"windows per step ({d.batch_size})")
    g.add_argument("--lr", type=float, help=f"peak AdamW learning rate ({d.lr})")
    g.add_argument("--warmup", type=int, help=f"warmup steps ({d.warmup})")
    g.add_argument("--weight-decay", type=float, help=f"AdamW weight decay ({d.weight_decay})")
    g.add_argument("--grad-clip", type=float, help=f"global gradient-norm clip ({d.grad_clip})")
    g.add_argument("--seed", type=int, help=f"seed of weights, data order, masks, positions ({d.seed})")
    g.add_argument("--checkpoint-every", type=int, metavar="K", help=f"checkpoint every K steps ({d.checkpoint_every})")
    g.add_argument("--log-every", type=int, help=f"metrics row every this many steps ({d.log_every})")
    g.add_argument("--val-windows", type=int, help=f"validation windows for eval.json ({d.val_windows})")
    g.add_argument("--out", metavar="RUN_DIR", help="run directory (default runs/mlm-PE-POSITIONS-LTRAIN-sSEED)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p, "training and the final validation run")
    p.set_defaults(func=run_train)


def _add_eval(sub) -> None:
    from lengen.mlm.evaluate import MLMEvalConfig

    d = MLMEvalConfig()
    p = sub.add_parser("eval", help="masked-token accuracy and bits per byte against length",
                       description="Evaluate a trained masked LM against length.", epilog=EVAL_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
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
    p.set_defaults(func=run_eval)


def config_from_args(args):
    from lengen.mlm.options import MLM_OPTIONS, mlm_config_from_options

    given = {k: v for k, v in vars(args).items() if k in MLM_OPTIONS and v is not None}
    if "pe_options" in given:
        given["pe_options"] = parse_key_values(given["pe_options"], "--pe-option")
    if "position_options" in given:
        given["position_options"] = parse_key_values(given["position_options"], "--position-option")
    return mlm_config_from_options(given)


def run_train(args) -> int:
    from lengen.mlm.train import train_mlm

    set_threads(args.threads)
    cfg = config_from_args(args)
    out = args.out or f"runs/mlm-{cfg.model.pe}-{cfg.positions}-L{cfg.train_length}-s{cfg.seed}"
    rec = train_mlm(cfg, out, progress=not args.no_progress)
    print(f"\n{rec['corpus']}")
    print(f"{rec['parameters']:,} parameters, {rec['steps']} steps")
    print(f"validation at the training length {rec['train_length']} ({rec['val_test_positions']} positions): "
          f"accuracy {rec['val_accuracy']:.3f}, {rec['val_bpb']:.3f} bits per byte (unigram baseline: "
          f"{rec['unigram_accuracy']:.3f}, {rec['unigram_bpb']:.3f}; {rec['val_masked_tokens']:,} masked tokens)")
    print(f"run directory: {out}  (config.json, checkpoint.pt, metrics.jsonl, eval.json)")
    return 0


def run_eval(args) -> int:
    from lengen.mlm.evaluate import MLMEvalConfig, evaluate_mlm

    set_threads(args.threads)
    modes = [m.strip() for m in args.test_positions.split(",") if m.strip()] if args.test_positions else []
    ecfg = MLMEvalConfig(lengths=args.lengths or [], test_positions=modes, log_n=args.log_n,
                         windows=args.windows, batch_size=args.batch_size, seed=args.seed,
                         unigram=not args.no_unigram, device=args.device or "auto",
                         precision=args.precision or "fp32")
    res = evaluate_mlm(args.run_dir, ecfg, args.out, progress=not args.no_progress)
    print("masked-token accuracy\n" + res["table"])
    print("\nbits per byte (masked tokens)\n" + res["table_bpb"])
    print(f"wrote {res['out_dir']}/results.csv, results.json and results.png")
    return 0
