"""`lengen lm`: byte-level decoder language models and their long-context evaluation."""

from __future__ import annotations

import argparse

from lengen.cli.options import add_device_arguments, parse_key_values, parse_lengths, set_threads

TRAIN_EPILOG = """examples:
  # the default: a 0.86M-parameter RoPE model on the Python standard library, ~10 CPU minutes
  lengen lm train --pe rope --out runs/lm-rope
  # another encoding, your own text, a shorter run
  lengen lm train --pe alibi --corpus 'notes/**/*.md' --steps 300 --out runs/lm-alibi
  lengen lm train --pe rope --pe-option base=500 --train-length 128 --seed 1 --out runs/lm-rope-b500
  # on a GPU, bfloat16 autocast
  lengen lm train --pe rope --device cuda --precision bf16 --out runs/lm-rope-gpu

Interrupt with Ctrl-C and rerun the same command to resume from the last checkpoint, on any
--device and in any --precision (neither is part of the run's identity). The run directory gets
config.json, checkpoint.pt, metrics.jsonl and eval.json (validation perplexity at the training
length next to a unigram baseline). Corpus tokens are cached under $LENGEN_CACHE
(default ~/.cache/lengen).
"""

EVAL_EPILOG = """examples:
  # perplexity against context length (one forward pass per length, every token scored)
  lengen lm eval runs/lm-rope --methods rope,pi:factor=8,ntk:factor=8,yarn:factor=8,rerope:window=128 \\
      --lengths 256,512,1024,2048
  # the last-segment protocol: every length scores the same last 256 tokens of each document
  lengen lm eval runs/lm-rope --protocol last-segment --segment 256 --methods rope,rerope:window=128+logn
  # passkey retrieval accuracy (landmark / YaRN prompt format)
  lengen lm eval runs/lm-rope --protocol passkey --lengths 512,1024 --trials 20 --out results/passkey
  # RULER-style tasks (needles, variable tracking, common words): accuracy per task and length
  lengen lm eval runs/lm-rope --protocol ruler --tasks niah_single,vt,cwe --lengths 1k,2k --trials 10
  # non-RoPE models are evaluated as trained
  lengen lm eval runs/lm-alibi --methods base --lengths 256,1024,4096

Methods (RoPE models only; "rope" = as trained) are lengen.extrapolation specs, comma-separated;
options follow a colon and methods compose with "+". An option the protocol does not use is
refused: --docs and --batch-size are for ppl and last-segment, --segment for last-segment, --trials
and --seed for passkey and ruler, --tasks for ruler (the same rule as `lengen hf eval`). Writes
results.csv (method, length, ppl or accuracy, ...; ruler: method, task, length, accuracy, ...),
results.json and a plot into --out (default RUN_DIR/eval-PROTOCOL).

ruler tasks: niah_single, niah_single_word, niah_single_uuid, niah_multikey, niah_multivalue,
niah_multiquery, vt, cwe (docs/language_models.md defines them); a trial scores the fraction of its
expected answers found as whole words in the greedy continuation.
"""



def add_parser(sub) -> None:
    p = sub.add_parser("lm", help="byte-level decoder language models: train, evaluate against length",
                       description=__doc__)
    lm_sub = p.add_subparsers(dest="lm_command", metavar="COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    _add_train(lm_sub)
    _add_eval(lm_sub)


def _add_train(sub) -> None:
    from lengen.lm.config import LMConfig

    d = LMConfig()
    p = sub.add_parser("train", help="train a decoder LM (resumable)", description="Train a byte-level "
                       "decoder LM on random windows of a corpus.", epilog=TRAIN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("data")
    g.add_argument("--corpus", metavar="PATH_OR_GLOB",
                   help="a file, a folder or a glob (quote it); default: this Python's standard library")
    g.add_argument("--val-fraction", type=float, help=f"share of documents held out ({d.val_fraction})")
    g.add_argument("--train-length", type=int, metavar="N", help=f"tokens per training window ({d.train_length})")
    g = p.add_argument_group("model")
    g.add_argument("--pe", help=f"positional encoding: any of `lengen.encodings` ({d.model.pe})")
    g.add_argument("--pe-option", dest="pe_options", action="append", metavar="KEY=VALUE",
                   help="encoding option, repeatable (e.g. base=500)")
    g.add_argument("--layers", type=int, help=f"blocks ({d.model.num_layers})")
    g.add_argument("--heads", type=int, help=f"attention heads ({d.model.num_heads})")
    g.add_argument("--d-model", type=int, help=f"width ({d.model.d_model})")
    g.add_argument("--d-ff", type=int, help=f"feed-forward width ({d.model.d_ff})")
    g.add_argument("--dropout", type=float, help=f"dropout ({d.model.dropout})")
    g.add_argument("--max-position", type=int, help=f"learned-table size ({d.model.max_position})")
    g.add_argument("--logit-scale", help="attention logit scaling while training: none, log_n, ...")
    g = p.add_argument_group("optimisation and run")
    g.add_argument("--steps", type=int, help=f"training steps ({d.steps})")
    g.add_argument("--batch-size", type=int, help=f"windows per step ({d.batch_size})")
    g.add_argument("--lr", type=float, help=f"peak AdamW learning rate ({d.lr})")
    g.add_argument("--warmup", type=int, help=f"warmup steps ({d.warmup})")
    g.add_argument("--weight-decay", type=float, help=f"AdamW weight decay ({d.weight_decay})")
    g.add_argument("--grad-clip", type=float, help=f"global gradient-norm clip ({d.grad_clip})")
    g.add_argument("--seed", type=int, help=f"seed of weights and data order ({d.seed})")
    g.add_argument("--checkpoint-every", type=int, metavar="K", help=f"checkpoint every K steps ({d.checkpoint_every})")
    g.add_argument("--log-every", type=int, help=f"metrics row every this many steps ({d.log_every})")
    g.add_argument("--val-windows", type=int, help=f"validation windows for the final ppl ({d.val_windows})")
    g.add_argument("--out", metavar="RUN_DIR", help="run directory (default runs/lm-PE-LTRAIN-sSEED)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p, "training and the final validation run")
    p.set_defaults(func=run_train)


def _only(option: str) -> str:
    """'ppl and last-segment only' and so on: the protocols that use an option (any other refuses it)."""
    from lengen.protocols.options import used_by

    return f"{used_by(option)} only"


def _add_eval(sub) -> None:
    from lengen.lm.evaluate import PROTOCOLS, LMEvalConfig

    d = LMEvalConfig()
    p = sub.add_parser("eval", help="perplexity / last-segment / passkey / ruler against context length",
                       description="Evaluate a trained LM run against context length.", epilog=EVAL_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `lengen lm train`")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods (default for RoPE runs: rope, pi, ntk, yarn with factor = "
                   "longest length / training length, rerope, self_extend; base otherwise)")
    p.add_argument("--lengths", type=parse_lengths, help="context lengths, comma-separated, 4096 or 4k "
                   "(default: 1, 2, 4, 8 x the training length)")
    p.add_argument("--protocol", default="ppl", choices=list(PROTOCOLS), help="(ppl)")
    p.add_argument("--segment", type=int, metavar="K", help=f"{_only('segment')}: scored tokens at the "
                   "end of each sequence (default: min(training length, shortest length))")
    p.add_argument("--docs", type=int, metavar="N", help=f"{_only('docs')}: validation sequences "
                   f"({d.docs})")
    p.add_argument("--trials", type=int, metavar="N", help=f"{_only('trials')}: prompts per length "
                   f"({d.trials})")
    p.add_argument("--seed", type=int, help=f"{_only('seed')}: prompt seed ({d.seed})")
    p.add_argument("--tasks", metavar="T,T", help=f"{_only('tasks')}: comma-separated tasks (default: all)")
    p.add_argument("--batch-size", type=int, metavar="B", help=f"{_only('batch_size')}: sequences per "
                   f"forward pass ({d.batch_size})")
    p.add_argument("--out", metavar="DIR", help="output directory (default RUN_DIR/eval-PROTOCOL)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p, "the evaluation runs")
    p.set_defaults(func=run_eval)


def config_from_args(args):
    from lengen.lm.options import LM_OPTIONS, lm_config_from_options

    given = {k: v for k, v in vars(args).items() if k in LM_OPTIONS and v is not None}
    if "pe_options" in given:
        given["pe_options"] = parse_key_values(given["pe_options"], "--pe-option")
    return lm_config_from_options(given)


def run_train(args) -> int:
    from lengen.lm.train import train_lm

    set_threads(args.threads)
    cfg = config_from_args(args)
    out = args.out or f"runs/lm-{cfg.model.pe}-L{cfg.train_length}-s{cfg.seed}"
    rec = train_lm(cfg, out, progress=not args.no_progress)
    print(f"\n{rec['corpus']}")
    print(f"{rec['parameters']:,} parameters, {rec['steps']} steps")
    print(f"validation perplexity at the training length {rec['train_length']}: {rec['val_ppl']:.3f} "
          f"(unigram baseline: {rec['unigram_ppl']:.3f}; {rec['val_tokens']:,} tokens)")
    print(f"run directory: {out}  (config.json, checkpoint.pt, metrics.jsonl, eval.json)")
    return 0


def run_eval(args) -> int:
    from lengen.lm.evaluate import LMEvalConfig, evaluate_lm
    from lengen.extrapolation import split_methods
    from lengen.protocols.options import check_protocol_options, split_tasks

    set_threads(args.threads)
    methods = split_methods(args.methods) if args.methods is not None else []
    # an option the protocol would ignore, or out of range: refused before the model is loaded
    given = {k: getattr(args, k) for k in ("segment", "docs", "trials", "seed", "batch_size")}
    given["tasks"] = split_tasks(args.tasks)
    check_protocol_options(args.protocol, **given)
    ecfg = LMEvalConfig(methods=methods, lengths=args.lengths or [], protocol=args.protocol,
                        device=args.device or "auto", precision=args.precision or "fp32",
                        **{k: v for k, v in given.items() if v is not None})
    res = evaluate_lm(args.run_dir, ecfg, args.out, progress=not args.no_progress)
    print(res["table"])
    notes = {r["note"] for r in res["rows"] if r.get("note")}
    for n in sorted(notes):
        print(f"note: {n}")
    print(f"wrote {res['out_dir']}/results.csv, results.json and the plot")
    return 0
