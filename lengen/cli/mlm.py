"""`lengen mlm`: a bidirectional byte-level masked language model (Su's MLM length-extrapolation
experiment; docs/mlm.md): train at one length, score masked tokens at longer ones."""

from __future__ import annotations

from lengen.cli import corpus_training
from lengen.cli.options import set_threads
from lengen.mlm.evaluate import MLMEvalConfig, evaluate_mlm
from lengen.mlm.options import MLM_OPTIONS, mlm_config_from_options
from lengen.mlm.train import train_mlm

#: --out's default (str.format with the run's config as `cfg`)
RUN_DIR = "runs/mlm-{cfg.model.pe}-{cfg.positions}-L{cfg.train_length}-s{cfg.seed}"
#: the validation line printed after training (str.format with eval.json's record)
VALIDATION_LINE = ("validation at the training length {train_length} ({val_test_positions} positions): accuracy "
                   "{val_accuracy:.3f}, {val_bpb:.3f} bits per byte (unigram baseline: {unigram_accuracy:.3f}, "
                   "{unigram_bpb:.3f}; {val_masked_tokens:,} masked tokens)")

def run_train(args) -> int:
    return corpus_training.train_from_args(args, MLM_OPTIONS, mlm_config_from_options, train_mlm, RUN_DIR,
                                     VALIDATION_LINE)


def run_eval(args) -> int:
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
