"""`lengen hf lm-eval`: lm-evaluation-harness tasks on a local model extended with a lengen method
(lengen.hf.harness). Every check that needs no weights runs first: lm-eval installed, the method,
the model folder, the output folder, the task names; then the model loads."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

from lengen.cli.options import set_threads
from lengen.devices import precision_context, resolve_device
from lengen.environment import run_environment
from lengen.errors import LengenError
from lengen.extrapolation import is_plain
from lengen.hf.identity import model_fingerprint
from lengen.hf.loading import load, load_tokenizer
from lengen.hf.settings import EvalSettings
from lengen.io import check_writable


def check_installed() -> None:
    """lm-eval and accelerate (lm-eval's HFLM imports it) are the `lmeval` extra."""
    missing = [name for name in ("lm_eval", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise LengenError(f"lengen hf lm-eval needs {' and '.join(missing)}: pip install 'lengen[lmeval]'")


def parse_metadata(text: str | None) -> dict:
    if not text:
        return {}
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as e:
        raise LengenError(f"--metadata is not JSON: {e}") from None
    if not isinstance(metadata, dict):
        raise LengenError("--metadata must be a JSON object, e.g. '{\"max_seq_lengths\": [8192]}'")
    return metadata


def run_lmeval(args) -> int:
    set_threads(args.threads)
    check_installed()
    max_length = args.max_length[-1] if args.max_length else None
    if len(args.max_length or []) > 1:
        raise LengenError("--max-length takes one length (run once per length)")
    if max_length is None and not is_plain(args.method):
        raise LengenError(f"--method {args.method} needs --max-length: the context lm-eval gives the model "
                          "(without it lm-eval uses the trained length, where the method changes little)")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        raise LengenError("--tasks: give at least one lm-eval task")
    if args.limit is not None and args.limit <= 0:
        raise LengenError("--limit must be > 0")
    metadata = parse_metadata(args.metadata)
    settings = EvalSettings(model_path=args.model_path, gguf_file=args.gguf_file, methods=[args.method],
                            lengths=[max_length or 2], dtype=args.dtype, attn=args.attn,
                            train_length=args.train_length, device=args.device, precision=args.precision)
    settings.check()   # the method (built for the trained length), the model folder, dtype, attn
    out = Path(args.out)
    check_writable(out)
    tokenizer = load_tokenizer(settings)
    with tempfile.TemporaryDirectory(prefix="lengen-lmeval-tok-") as tmp:
        # tasks that size prompts in tokens (RULER, lengen_passkey) load the tokenizer by path:
        # the model folder's own, or the GGUF file's saved as a folder
        if args.gguf_file:
            tokenizer.save_pretrained(tmp)
        metadata = {"tokenizer": tmp if args.gguf_file else str(Path(args.model_path).resolve()),
                    **({"max_length": max_length} if max_length else {}), **metadata}
        from lengen.hf import harness   # lm-eval: imported only now (its import takes seconds)

        manager = harness.task_manager(tasks, args.include_path, metadata)   # before the model loads
        model, tokenizer = load(settings, tokenizer)
        device = resolve_device(args.device)
        lm = harness.LengenLM(model.to(device), tokenizer=tokenizer, method=args.method,
                              train_length=args.train_length, max_length=max_length, batch_size=args.batch_size)
        start = time.perf_counter()
        with precision_context(args.precision, device):
            results = harness.evaluate(lm, tasks, manager, limit=args.limit, num_fewshot=args.num_fewshot,
                                       seed=args.seed, log_samples=args.log_samples)
        seconds = time.perf_counter() - start
    record = {"model": str(Path(args.model_path).resolve()), "gguf_file": args.gguf_file,
              "fingerprint": model_fingerprint(args.model_path, args.gguf_file), "method": args.method,
              "max_length": lm.max_length, "train_length": args.train_length, "tasks": tasks,
              "metadata": {k: v for k, v in metadata.items() if k != "tokenizer"},
              "command": "lengen " + " ".join(sys.argv[1:]), "seconds": round(seconds, 1),
              "lm_eval": results.get("lm_eval_version") or importlib.metadata.version("lm_eval"),
              "environment": run_environment(device)}
    rows = harness.result_rows(results, args.method, lm.max_length)
    for row in rows:
        stderr = f" +- {row['stderr']:.4g}" if row["stderr"] is not None else ""
        print(f"{row['task']:<24} {row['metric']:<18} {row['value']:.6g}{stderr}  (n={row['n']})")
    paths = harness.save(results, out, record, args.method, lm.max_length)
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0
