"""`lengen hf eval`: training-free context extension of a local Hugging Face model (Llama, Mistral,
Phi-3, Qwen2/3 layout; Gemma 2/3, SmolLM3, Llama 4, OLMo 2/3, Granite, Qwen3-MoE per layer, see
`lengen hf methods`), evaluated at several lengths: perplexity, last-segment perplexity, passkey
retrieval or RULER-style tasks, for plain RoPE and any lengen extrapolation method."""

from __future__ import annotations

from pathlib import Path

from lengen.cli.options import set_threads
from lengen.extrapolation import split_methods
from lengen.errors import LengenError
from lengen.hf import describe
from lengen.hf.evaluate import load_result, result_table, run, save_result
from lengen.hf.settings import EvalSettings
from lengen.io import check_writable
from lengen.protocols.options import check_protocol_options, split_tasks


def run_methods(args) -> int:
    if args.list == (args.model is not None):
        raise LengenError("lengen hf methods: give a MODEL or --list (one of them)")
    if args.list and args.gguf_file:
        raise LengenError("lengen hf methods: --gguf-file goes with a MODEL folder, not --list")
    if args.list:
        print(describe.supported_list())
    else:
        print(describe.describe_source(args.model, args.train_length, args.gguf_file))
    return 0


def run_eval(args) -> int:
    set_threads(args.threads)
    # an option the protocol would ignore, or out of range: refused before the model is loaded
    given = {k: getattr(args, k) for k in ("corpus", "docs", "segment", "trials", "seed")}
    given["tasks"] = split_tasks(args.tasks)
    check_protocol_options(args.protocol, **given)
    settings = EvalSettings(
        model_path=args.model_path, gguf_file=args.gguf_file,
        methods=[m for item in args.methods for m in split_methods(item)],
        lengths=sorted({n for item in args.lengths for n in item}), protocol=args.protocol,
        dtype=args.dtype, attn=args.attn, train_length=args.train_length, device=args.device,
        precision=args.precision, **{k: v for k, v in given.items() if v is not None})
    out = Path(args.out)
    settings.check()  # the cheap checks (methods, model folder) before the output folder's
    check_writable(out)  # before the model is loaded
    previous = load_result(out)

    def resuming(n: int) -> None:   # said once the earlier rows are checked, not before
        if not args.no_progress:
            print(f"resuming: {n} results already in {out / 'results.json'}")

    result = run(settings, progress=not args.no_progress, previous=previous,
                 on_row=lambda partial: save_result(partial, out, plot_too=False), on_resume=resuming)
    print(result_table(result))
    paths = save_result(result, out)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
