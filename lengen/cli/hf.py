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
from lengen.hf import exporting as ex
from lengen.hf import gguf_export as gx
from lengen.hf.arch import check_train_length
from lengen.hf.evaluate import load_result, result_table, run, save_result
from lengen.hf.identity import model_fingerprint
from lengen.hf.loading import load, load_tokenizer, read_config
from lengen.hf.methods import spec_with_options
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


def run_export(args) -> int:
    if args.list:
        if args.model_path or args.method or args.out:
            raise LengenError("lengen hf export: --list takes no MODEL_PATH, --method or --out")
        print(ex.support_matrix())
        return 0
    missing = [flag for flag, value in (("MODEL_PATH", args.model_path), ("--method", args.method),
                                        ("--out", args.out)) if not value]
    if missing:
        raise LengenError(f"lengen hf export: give {' and '.join(missing)} (or --list)")
    check_train_length(args.train_length)
    gguf = args.format == "gguf"
    if gguf and args.dtype != "float32":
        raise LengenError("lengen hf export: --dtype goes with --format transformers; --gguf-type sets the GGUF's")
    if args.gguf_type and not gguf:
        raise LengenError("lengen hf export: --gguf-type goes with --format gguf")
    if gguf:   # before anything loads
        gx.check_spec(args.method)
    else:
        ex.check_exportable(args.method, args.length)
    config = read_config(args.model_path, args.gguf_file)
    ex.check_causal_lm(config, args.model_path)
    if not gguf:
        ex.check_exportable(args.method, args.length, config.model_type)
    settings = EvalSettings(model_path=args.model_path, gguf_file=args.gguf_file, methods=["rope"],
                            lengths=[2], dtype=args.dtype)
    tokenizer = load_tokenizer(settings)
    fingerprint = model_fingerprint(args.model_path, args.gguf_file)
    source = {"path": str(Path(args.model_path).resolve()), "gguf_file": args.gguf_file, "fingerprint": fingerprint}
    if gguf:
        gx.check_source(config, tokenizer, source)
    out = Path(args.out)
    spec, gguf_type = spec_with_options(args.method, {}), args.gguf_type or "f32"
    done = gx.check_out(out, spec, fingerprint, gguf_type) if gguf else \
        ex.check_out(out, spec, fingerprint, ex.engine_of(spec))
    if done:   # before the model loads
        print(f"{out} already holds this export ({ex.RECORD}); nothing to do")
        return 0
    model, tokenizer = load(settings, tokenizer)
    if gguf:
        return _print_gguf(out, gx.export(model, args.method, out, tokenizer, length=args.length,
                                          train_length=args.train_length, check_length=args.check_length,
                                          source=source, gguf_type=gguf_type))
    record = ex.export(model, args.method, out, tokenizer, length=args.length, train_length=args.train_length,
                       check_length=args.check_length, source=source)
    check = record["verified"]
    written = (f"{ex.DCA_KEY} {record[ex.DCA_KEY]} for {record['engine']}" if ex.DCA_KEY in record
               else f"transformers rope_parameters {record['rope_parameters']}")
    print(f"wrote {out}: {record['spec']} as {written}, max_position_embeddings "
          f"{record['max_position_embeddings']}" + (" (weights dequantized from the GGUF file)" if args.gguf_file else ""))
    print(f"checked: plain transformers {check['transformers']} without lengen gives lengen.hf.extend's "
          f"logits at {check['tokens']} tokens (max |difference| {check['max_abs_diff']:.2g})")
    for engine, how in record.get("serve", {}).items():
        print(f"serve with {engine} {how}".replace("DIR", str(out)).replace("LENGTH", str(record["max_position_embeddings"])))
    return 0


def _print_gguf(out: Path, record: dict) -> int:
    keys = ", ".join(f"{k.split('.', 1)[1]} {v}" for k, v in record["gguf_keys"].items())
    print(f"wrote {out / record['file']}: {record['spec']} as {record['gguf_type']} GGUF for llama.cpp ({keys}"
          + (", a rope_freqs tensor" if record["rope_freqs"] else "") + ")")
    check = record["verified"]
    if check:
        print(f"checked: llama.cpp (llama-cpp-python {check['llama_cpp_python']}) gives lengen.hf.extend's logits "
              f"at {check['tokens']} tokens (max |difference| {check['max_abs_diff']:.2g}, tolerance "
              f"{check['tolerance']:.2g})")
    else:
        print(f"not checked: {record['unverified']}")
    if record.get("command"):
        print(f"run it with: {record['command'].replace(record['file'], str(out / record['file']))} "
              "(not checked by lengen)")
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
