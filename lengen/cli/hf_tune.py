"""`lengen hf tune`: search the options of training-free RoPE extension methods for a local Hugging
Face model at one target length, on one slice of a text, and report the chosen setting on another."""

from __future__ import annotations

from lengen.cli.options import set_threads
from lengen.errors import LengenError
from lengen.extrapolation import split_methods
from lengen.hf.settings import TuneSettings
from lengen.hf.tune_report import format_result
from lengen.hf.tuning import tune


def run_tune(args) -> int:
    set_threads(args.threads)
    lengths = args.length
    if len(lengths) != 1:
        raise LengenError(f"--length takes one length, got {', '.join(map(str, lengths))}")
    if args.seed is not None and not args.passkey:
        raise LengenError("--seed applies to --passkey only (the passkey prompts' seed)")
    settings = TuneSettings(
        model_path=args.model_path, length=lengths[0], text=args.text, eval_text=args.eval_text,
        methods=[m for item in args.methods for m in split_methods(item)], budget=args.budget,
        segment=args.segment, tune_docs=args.tune_docs, eval_docs=args.eval_docs, margin=args.margin,
        passkey=args.passkey, seed=args.seed or 0, logn=not args.no_logn, refine=not args.no_refine,
        gguf_file=args.gguf_file, dtype=args.dtype, attn=args.attn, train_length=args.train_length,
        device=args.device, precision=args.precision)
    output = tune(settings, out=args.out, progress=not args.no_progress)
    print(format_result(output))
    print(f"wrote {args.out}/tune.json, tune.csv, tune_cache.json")
    return 0
