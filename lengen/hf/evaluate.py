"""`lengen hf eval`'s engine: load a local Hugging Face model, apply each method in turn and run
one protocol of lengen.protocols at every length, on sequences from lengen.data (the corpus
tokenized with the model's tokenizer).

Device and precision: the model is loaded on the CPU in settings.dtype (its weights' storage
type), moved to settings.device, and every forward pass runs in settings.precision: "bf16"
autocasts the matmuls of float32 (or bfloat16) weights to bfloat16; "tf32" lets CUDA run float32
matmuls in TensorFloat-32. Token ids go to the model's device in nll_fn / greedy_fn."""

from __future__ import annotations

import hashlib
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lengen import io
from lengen.data import TextEncoder, load_documents, long_sequences, stdlib_root
from lengen.devices import check_precision, precision_context, resolve_device
from lengen.environment import run_environment
from lengen.errors import LengenError
from lengen.extrapolation import RopeSpec, check_window, is_plain
from lengen.hf import banded
from lengen.hf.arch import check_train_length, decoder_stack, inspect_model
from lengen.hf.identity import legacy_model, model_fingerprint
from lengen.hf.patch import extend, restore
from lengen.progress import progress_bar
from lengen.protocols import (last_segment_perplexity, passkey_accuracy, perplexity_vs_length, pivot_table,
                              plot_metric, ruler_accuracy, write_csv)
from lengen.protocols.fitting import check_prompts_fit
from lengen.protocols.options import USED_BY
from lengen.protocols.report import csv_disagreement
from lengen.protocols.ruler import check_tasks, ruler_table, task_means

# rows of earlier protocol code (a length of L tokens scored L - 1 targets, other documents and
# passkey prompts) are not comparable: resuming them is refused
PROTOCOLS_VERSION = "lengen.protocols"   # the method name that means: the model as trained
# "banded": sdpa with sliding-window layers computed in bands (lengen.hf.banded; long inputs)
ATTN_CHOICES = ("sdpa", "eager", "banded")
WEIGHT_DTYPES = ("float32", "bfloat16", "float16")
METRIC = {"ppl": "ppl", "last-segment": "ppl", "passkey": "accuracy", "ruler": "accuracy"}
RULER_COLUMNS = ("method", "task", "length", "accuracy", "correct", "trials", "mean_prompt_tokens", "note")


@dataclass
class EvalSettings:
    model_path: str
    methods: list[str]
    lengths: list[int]
    protocol: str = "ppl"
    gguf_file: str | None = None
    corpus: str | None = None        # None: the Python standard library's sources
    docs: int = 2                    # ppl / last-segment: corpus sequences
    segment: int | None = None       # last-segment: scored tokens (default min(lengths) // 2)
    trials: int = 10                 # passkey prompts per length; ruler: per task and length
    seed: int = 0                    # passkey / ruler prompts' keys, values and depths
    tasks: list[str] | None = None   # ruler: None = every task (lengen.protocols.ruler.TASKS)
    dtype: str = "float32"
    attn: str = "sdpa"
    train_length: int | None = None  # default: config.max_position_embeddings
    device: str = "auto"             # auto | cpu | cuda | cuda:N (lengen.devices)
    precision: str = "fp32"          # fp32 | tf32 | bf16: the forward passes' numeric mode

    def check(self) -> None:
        if self.protocol not in METRIC:
            raise LengenError(f"unknown protocol {self.protocol!r}; valid: {', '.join(METRIC)}")
        if not self.methods:
            raise LengenError("give at least one method (--methods rope yarn:factor=4 ...)")
        if not self.lengths or min(self.lengths) < 2:
            raise LengenError("lengths must be >= 2 tokens")
        if self.docs < 1 or self.trials < 1:
            raise LengenError("--docs and --trials must be >= 1")
        check_train_length(self.train_length)
        if self.protocol == "ruler":
            self.tasks = check_tasks(self.tasks)
        if self.protocol == "last-segment" and not 1 <= self.segment_tokens() <= min(self.lengths):
            raise LengenError(f"--segment must be in 1..{min(self.lengths)} (the shortest length)")
        if self.dtype not in WEIGHT_DTYPES:
            raise LengenError(f"--dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {self.dtype!r}")
        if self.attn not in ATTN_CHOICES:
            raise LengenError(f"--attn must be one of {', '.join(ATTN_CHOICES)}, got {self.attn!r}")
        check_precision(self.precision)
        if self.precision == "bf16" and self.dtype == "float16":
            raise LengenError("--precision bf16 autocasts to bfloat16, which float16 weights cannot mix "
                              "with; use --dtype bfloat16 or float32, or --precision fp32")
        self.check_model_path()
        self.check_methods()

    def segment_tokens(self) -> int:
        return self.segment or max(1, min(self.lengths) // 2)

    def check_methods(self) -> None:
        """Build every spec before the (slow) model load: for the trained length the run will use
        (the config's unless --train-length; a window past it is refused), a stand-in head size."""
        specs = [spec for spec in self.methods if not is_plain(spec)]
        if specs:
            L0 = self.train_length or int(read_config(self.model_path, self.gguf_file).max_position_embeddings)
            for spec in specs:
                check_window(spec, RopeSpec(rotary_dim=64, train_length=L0))

    def check_model_path(self) -> None:
        path = Path(self.model_path)
        if not path.is_dir():
            raise LengenError(f"MODEL_PATH {self.model_path!r} is not a local folder (lengen hf eval "
                              "loads local models only, nothing is downloaded)")
        if self.gguf_file and not (path / self.gguf_file).is_file():
            raise LengenError(f"--gguf-file {self.gguf_file!r} is not a file in {self.model_path}")
        if not self.gguf_file and not (path / "config.json").exists():
            raise LengenError(f"{path} is not a Hugging Face model folder (no config.json); give a folder "
                              "written by save_pretrained, or a GGUF file with --gguf-file")


_LOAD_ERRORS = (OSError, ValueError, KeyError, ImportError)


def _load_kwargs(settings: EvalSettings) -> dict:
    return {"local_files_only": True, **({"gguf_file": settings.gguf_file} if settings.gguf_file else {})}


def load_reason(e: Exception) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__   # the whole reason, on one line


def gguf_tokenizer_problem(tokenizer_class: str, transformers_version: str) -> str | None:
    """Why this transformers release reads a GGUF file's tokenizer wrongly, or None. Measured on
    Gemma 3 270M's GGUF (2026-11-28): 5.0-5.17 split text with other merges than the model's
    (perplexity 106 instead of 5.1 at 512 tokens), 5.18-5.22 add no BOS; 5.23 and 5.24 are right."""
    if "Gemma" not in tokenizer_class:
        return None
    version = tuple(int(p) for p in transformers_version.split(".")[:2] if p.isdigit())
    if version >= (5, 23):
        return None
    what = "splits text with other merges than the model's" if version < (5, 18) else "adds no BOS"
    return (f"transformers {transformers_version} reads a Gemma GGUF tokenizer wrongly (it {what}); "
            "GGUF Gemma models need transformers >= 5.23: pip install -U transformers")


def read_config(model_path: str, gguf_file: str | None = None):
    """The model's config alone (cheap: no weights), for checks before the model loads."""
    from transformers import AutoConfig   # optional (lengen[hf]): imported on use

    kwargs = {"local_files_only": True, **({"gguf_file": gguf_file} if gguf_file else {})}
    try:
        return AutoConfig.from_pretrained(model_path, **kwargs)
    except (OSError, ValueError, KeyError) as e:
        raise LengenError(f"cannot read the model config in {model_path}: {load_reason(e)}") from None


def load_tokenizer(settings: EvalSettings):
    """The model folder's tokenizer alone (cheap: for checks before the model loads); the folder
    is checked here."""
    settings.check_model_path()
    try:
        import transformers   # optional (lengen[hf]): imported on use
    except ImportError:
        raise LengenError("lengen hf needs transformers: pip install 'lengen[hf]'") from None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(settings.model_path, **_load_kwargs(settings))
    except _LOAD_ERRORS as e:
        raise LengenError(f"cannot load a tokenizer from {settings.model_path}: {load_reason(e)}") from None
    problem = settings.gguf_file and gguf_tokenizer_problem(type(tokenizer).__name__, transformers.__version__)
    if problem:
        raise LengenError(problem)
    return tokenizer


def load(settings: EvalSettings, tokenizer=None):
    """(model, tokenizer) from a local folder, offline; LengenError when it cannot be loaded.
    `tokenizer`: one already loaded by load_tokenizer."""
    try:
        from transformers import AutoModelForCausalLM   # optional (lengen[hf]): imported on use
    except ImportError:
        raise LengenError("lengen hf needs transformers: pip install 'lengen[hf]'") from None
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(settings)   # checks the folder
    try:
        model = AutoModelForCausalLM.from_pretrained(
            settings.model_path, dtype=getattr(torch, settings.dtype),
            attn_implementation="sdpa" if settings.attn == "banded" else settings.attn,
            **_load_kwargs(settings))
    except _LOAD_ERRORS as e:
        raise LengenError(f"cannot load a model from {settings.model_path}: {load_reason(e)}") from None
    if settings.attn == "banded":
        banded.use(model)
    return model.eval(), tokenizer


def output_logits(model):
    """hidden [B, T, D] -> float32 logits as the model's own forward gives them: the output head,
    then what a family does after it (Gemma 2/3: final-logit soft-capping; Granite: division by
    logits_scaling). Checked against each supported family's forward (tests/test_hf_families.py)."""
    head, config = model.get_output_embeddings(), model.config.get_text_config()
    cap = getattr(config, "final_logit_softcapping", None)
    scaling = getattr(config, "logits_scaling", None)   # Granite and its MoE variants

    def logits(hidden: torch.Tensor) -> torch.Tensor:
        out = head(hidden)
        if scaling is not None:
            out = out / scaling
        if cap is not None:
            out = torch.tanh(out / cap) * cap
        return out.float()

    return logits


def nll_fn(model, chunk: int = 1024):
    """lengen.protocols.NllFn (ids [B, T], last -> [B, last]) for a causal LM: the decoder runs
    once over the context ids[:, :-1], the output head in chunks of `chunk` positions (a 16k x
    49k-vocab logits tensor would need 3 GB)."""
    decoder, logits_of = decoder_stack(model), output_logits(model)
    device = next(model.parameters()).device

    @torch.inference_mode()
    def nll(ids: torch.Tensor, last: int) -> torch.Tensor:
        ids = ids.to(device)
        hidden = decoder(input_ids=ids[:, :-1], use_cache=False).last_hidden_state[:, -last:]
        targets = ids[:, -last:]
        return torch.cat([F.cross_entropy(logits_of(h).transpose(1, 2), t, reduction="none")
                          for h, t in zip(hidden.split(chunk, dim=1), targets.split(chunk, dim=1))],
                         dim=1).cpu()

    return nll


def banded_hint(model, attn: str, longest: int) -> str | None:
    """A line suggesting --attn banded where sdpa would build T x T masks for sliding-window
    layers at inputs well beyond their window (4x or more), else None."""
    if attn != "sdpa" or not longest:
        return None
    try:
        layers = inspect_model(model, require_attention=False).layers
    except LengenError:
        return None
    windows = sorted({layer.window for layer in layers if layer.kind == "sliding" and layer.window})
    sliding = sum(layer.kind == "sliding" for layer in layers)
    if not windows or longest < 4 * windows[0]:
        return None
    return (f"note: {sliding} of {len(layers)} layers attend within a sliding window of "
            f"{windows[0]:,} tokens; with --attn sdpa they get a {longest:,} x {longest:,} mask "
            f"and each scores every pair. --attn banded computes them in bands (equal up to "
            f"rounding; docs/huggingface.md)")


def math_kernel_hint(config, attn: str, longest: int, device: torch.device, dtype: torch.dtype) -> str | None:
    """A line suggesting --attn banded where transformers' sdpa would score a grouped-query model
    on the math kernel (CUDA, float32; lengen.hf.banded.gqa_falls_to_math) with 1 GiB or more of
    scores per layer, else None."""
    config = config.get_text_config()
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    gib = heads * longest ** 2 * 4 / 2 ** 30
    if attn != "sdpa" or gib < 1 or not banded.gqa_falls_to_math(device.type, dtype, heads, kv_heads):
        return None
    return (f"note: on CUDA in float32, transformers' sdpa runs this model's grouped-query layers "
            f"({heads} query, {kv_heads} key/value heads) on PyTorch's math kernel, which holds "
            f"{heads} x {longest:,} x {longest:,} scores ({gib:,.0f} GiB) a layer; --attn banded repeats "
            f"the keys and values so that the memory-efficient kernel takes them (or --dtype bfloat16)")


def attention_hints(model, attn: str, longest: int, device: torch.device, precision: str = "fp32") -> list[str]:
    """The notes `lengen hf eval` and `hf tune` print before the work: where another --attn
    would avoid T x T memory at these lengths (bf16 precision: autocast, so attention in bfloat16)."""
    dtype = torch.bfloat16 if precision == "bf16" else next(model.parameters()).dtype
    hints = (banded_hint(model, attn, longest), math_kernel_hint(model.config, attn, longest, device, dtype))
    return [h for h in hints if h]


def greedy_fn(model, pad_token_id: int):
    device = next(model.parameters()).device

    @torch.inference_mode()
    def greedy(ids: list[int], max_new_tokens: int) -> list[int]:
        x = torch.tensor([ids], device=device)
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=pad_token_id, temperature=None,
                             top_p=None, top_k=None)
        return out[0, x.shape[1]:].tolist()

    return greedy


# settings that change what a (method, length) row means: rows are reused only if they agree
# (device is not one: a row measured on the CPU and on a GPU agree within rounding)
# (the corpus is not one: rows follow the token sequences they were scored on, sequences_digest)
SAME_RESULTS = ("gguf_file", "protocol", "docs", "segment", "trials", "seed",
                "tasks", "dtype", "attn", "train_length", "precision")


def run(settings: EvalSettings, progress: bool = True, previous: dict | None = None,
        on_row=None, on_resume=None) -> dict:
    """Evaluate every method at every length; returns {"meta": ..., "rows": [...]}.

    `previous` (an earlier result of the same settings, e.g. an interrupted run) supplies rows
    that are not computed again; its other rows are kept. `on_resume(n)` is called once its n rows
    have passed every check (settings, BOS, the sequences' digest), before the model loads;
    `on_row(result)` after each new row, so a caller can save progress."""
    settings.check()
    device = resolve_device(settings.device)  # a missing GPU fails before the model is loaded
    # the tokenizer first: what it refuses, and what it says about the rows, before the model loads
    tokenizer = load_tokenizer(settings)
    key = comparable(settings)   # reads the weights once: a damaged file is refused here
    if previous is not None:
        old = {"precision": "fp32", **(previous["meta"].get("settings") or {})}  # older results: fp32
        old = legacy_model(old, key, settings.model_path)
        if any(old.get(k) != v for k, v in key.items()):
            raise LengenError(f"the output folder holds results of other settings "
                              f"({_difference(old, key)}); use another --out")
    rows = list(previous["rows"]) if previous else []
    done = {(r["method"], r["length"]) for r in rows}
    # length-major: an interrupted run has every method at the shorter lengths
    todo = [(m, n) for n in settings.lengths for m in settings.methods if (m, n) not in done]
    seq_tokens = _sequence_tokens(settings, previous)
    started = time.time()
    if settings.protocol in ("passkey", "ruler") and todo:
        # lengths where no prompt fits the tokenizer
        check_prompts_fit(settings.protocol, tokenizer.encode, sorted({n for _, n in todo}),
                          settings.tasks or (), settings.seed)
    prefix = None   # perplexity: the BOS its sequences begin with (bos_prefix)
    if settings.protocol in ("ppl", "last-segment"):
        prefix = bos_prefix(tokenizer)
        before = (previous or {}).get("meta", {}).get("sequence_prefix", [])   # older results: none
        if rows and before != prefix:
            raise LengenError(f"the results in this output folder were scored on sequences beginning "
                              f"with {before or 'no BOS'}, this tokenizer's begin with {prefix or 'no BOS'} "
                              "(lengen before 2026-11-28 never added it): use another --out")
    seqs, digest = None, None   # perplexity: built before the model loads
    # rows to reuse are checked against this corpus's sequences even when nothing is left to score:
    # they are printed and relabelled with this corpus
    if seq_tokens and (todo or rows):
        seqs, digest = _checked_sequences(settings, tokenizer, seq_tokens, previous)
    if rows and on_resume is not None:
        on_resume(len(rows))
    model, tokenizer = load(settings, tokenizer)
    model.to(device)
    if any(not is_plain(m) for m in settings.methods):
        inspect_model(model)   # an unsupported model fails now, not after the first method
    for hint in attention_hints(model, settings.attn, max(n for _, n in todo) if todo else 0, device,
                                settings.precision):
        print(hint, file=sys.stderr)
    train_length = settings.train_length or int(model.config.max_position_embeddings)
    import transformers   # optional, imported on use; loaded by now, for its version

    meta = {**asdict(settings), "settings": key, "metric": METRIC[settings.protocol],
            "train_length": train_length, "model_type": model.config.model_type,
            "segment": settings.segment_tokens() if settings.protocol == "last-segment" else None,
            "corpus": settings.corpus or str(stdlib_root()), "sequence_tokens": seq_tokens,
            "sequence_prefix": prefix,
            "sequences_digest": digest,
            "device": str(device), "transformers": transformers.__version__,
            "environment": run_environment(device)}
    meta.pop("methods"), meta.pop("lengths")
    result = {"meta": meta, "rows": rows}
    bar = progress_bar(len(todo), "hf eval", disable=not progress or not todo, unit="length")
    for method, length in todo:
        bar.set_description(f"{method} @ {length}")
        if not is_plain(method):
            extend(model, method, train_length=train_length)
        try:
            t0 = time.time()
            answers: list[dict] = []   # passkey: each prompt's key and generated text
            with precision_context(settings.precision, device):
                if settings.protocol == "ruler":
                    task_rows = _ruler_rows(settings, model, tokenizer, length, bar)
                else:
                    value = _score(settings, model, tokenizer, seqs, length, bar, answers, prefix or [])
        finally:
            if not is_plain(method):
                restore(model)
        if settings.protocol == "ruler":   # one row per task, all of a (method, length) at once
            seconds = round(time.time() - t0, 1)
            rows += [{"method": method, **r, "seconds": seconds} for r in task_rows]
        else:
            rows.append({"method": method, "length": length, meta["metric"]: value,
                         "seconds": round(time.time() - t0, 1), **({"answers": answers} if answers else {})})
        if on_row is not None:
            on_row(result)
    bar.close()
    # the methods asked for first, in that order, then earlier rows' other methods
    order = {m: i for i, m in enumerate(dict.fromkeys([*settings.methods, *(r["method"] for r in rows)]))}
    rows.sort(key=lambda r: (order[r["method"]], r["length"]))
    meta["seconds"] = round(time.time() - started, 1)
    return result


def comparable(settings: EvalSettings) -> dict:
    """The settings a row depends on: those the protocol uses (lengen.protocols.options.USED_BY)."""
    unused = {k for k, protocols in USED_BY.items() if settings.protocol not in protocols}
    out = {k: getattr(settings, k) for k in SAME_RESULTS if k not in unused}
    out["model"] = model_fingerprint(settings.model_path, settings.gguf_file)
    if "segment" in out:
        out["segment"] = settings.segment_tokens() if settings.protocol == "last-segment" else None
    out["protocols"] = PROTOCOLS_VERSION
    return out


def _sequence_tokens(settings: EvalSettings, previous: dict | None) -> int | None:
    """Tokens per corpus sequence (None for passkey): max(lengths) + 1, or what the rows being
    resumed were measured on. Longer sequences would come from other documents (and move the
    last segment), so a length beyond the earlier ones is refused rather than silently mixed."""
    if settings.protocol in ("passkey", "ruler"):
        return None
    need = max(settings.lengths) + 1
    before = (previous or {}).get("meta", {}).get("sequence_tokens")
    if before is None or not previous.get("rows"):
        return need
    if need > before:
        raise LengenError(f"the results in this output folder were measured on sequences of {before} "
                          f"tokens (lengths up to {before - 1}); length {need - 1} needs longer "
                          "sequences, which changes the documents and targets: use another --out")
    return before


def sequences_digest(seqs: list[np.ndarray]) -> str:
    """What perplexity rows (and hf tune's slices) were scored on: the token ids of every
    sequence, hashed."""
    h = hashlib.sha256()
    for s in seqs:
        h.update(np.ascontiguousarray(s, dtype=np.int64).tobytes())
    return h.hexdigest()[:20]


def _checked_sequences(settings: EvalSettings, tokenizer, need: int,
                       previous: dict | None) -> tuple[list[np.ndarray], str]:
    """The corpus sequences and their digest, refused if the rows being resumed were scored on
    others: another corpus, another Python's standard library, another tokenization. A copy of
    the same text at another path is the same sequences."""
    seqs = sequences(settings, tokenizer, need)
    digest = sequences_digest(seqs)
    if not previous or not previous.get("rows"):
        return seqs, digest
    before = previous["meta"].get("sequences_digest")
    if before is None:   # results written before 2026-11-28 name the corpus by the path given
        old = (previous["meta"].get("settings") or {}).get("corpus")
        if old != settings.corpus:
            raise LengenError(f"the output folder holds results of other settings (corpus: {old!r} there, "
                              f"{settings.corpus!r} now); use another --out")
    elif before != digest:
        raise LengenError("the results in this output folder were scored on other token sequences (another "
                          "corpus, another Python's standard library or another tokenization); use another --out")
    return seqs, digest


def _difference(old: dict, new: dict) -> str:
    return ", ".join(f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in new.items()
                     if old.get(k) != v)


def corpus_encoder(tokenizer) -> TextEncoder:
    """The model's tokenizer as a lengen.data tokenizer; its cache name hashes the tokenizer's
    full definition (or vocabulary), so another tokenizer never reuses cached tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    name = f"hf-{type(tokenizer).__name__}-{hashlib.sha256(spec.encode()).hexdigest()[:16]}"

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    eos = tokenizer.eos_token_id
    if eos is None:   # documents are then joined by a newline
        eos = (encode("\n") or [0])[-1]
    return TextEncoder(encode, name, int(eos))


def bos_prefix(tokenizer) -> list[int]:
    """[BOS] when the tokenizer begins every text it encodes with it (Gemma, Llama: their models
    were trained so, and Gemma degrades without it), else []. Scored sequences begin with it."""
    bos = tokenizer.bos_token_id
    ids = tokenizer("a")["input_ids"]
    return [int(bos)] if bos is not None and ids and ids[0] == bos else []


def sequences(settings: EvalSettings, tokenizer, need: int | None = None) -> list[np.ndarray]:
    """settings.docs sequences of `need` (default max(lengths) + 1) tokens: a context of L tokens
    and one more target, from the corpus by lengen.data.long_sequences, deterministic; each
    begins with the tokenizer's BOS where it adds one (bos_prefix), then the text."""
    need = need or max(settings.lengths) + 1
    docs = load_documents(settings.corpus, corpus_encoder(tokenizer))
    prefix = np.array(bos_prefix(tokenizer), dtype=np.int64)
    seqs = [np.concatenate([prefix, s]) for s in long_sequences(docs.docs, need - len(prefix), settings.docs,
                                                                 docs.eos)]
    if len(seqs) < settings.docs:
        raise LengenError(f"the corpus {docs.source} gives only {len(seqs)} sequences of {need} tokens, "
                          f"{settings.docs} needed: use a larger --corpus or fewer --docs")
    return seqs


def _score(settings: EvalSettings, model, tokenizer, seqs, length: int, progress,
           answers: list | None = None, prefix: list[int] = ()) -> float:
    """One row's value; `prefix`: the BOS the sequences begin with (bos_prefix), kept in every window."""
    if settings.protocol == "ppl":
        return perplexity_vs_length(nll_fn(model), seqs, [length], progress=progress)[0].ppl
    if settings.protocol == "last-segment":
        return last_segment_perplexity(nll_fn(model), seqs, [length], settings.segment_tokens(),
                                       progress=progress, prefix=prefix)[0].ppl
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return passkey_accuracy(greedy_fn(model, pad if pad is not None else 0), tokenizer.encode,
                            tokenizer.decode, [length], settings.trials, settings.seed,
                            progress=progress, records=answers)[0].accuracy


def _ruler_rows(settings: EvalSettings, model, tokenizer, length: int, progress) -> list[dict]:
    """One row per task at this length (task, length, accuracy, correct, trials, mean_prompt_tokens,
    note, answers); a task whose prompt does not fit the length is a row with accuracy None and a note."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    generate = greedy_fn(model, pad if pad is not None else 0)
    out = []
    for task in settings.tasks:
        records: list[dict] = []
        try:
            (point,) = ruler_accuracy(generate, tokenizer.encode, tokenizer.decode, [length], [task],
                                      settings.trials, settings.seed, records=records)
            row = {**point.row(), "note": ""}
        except LengenError as e:
            row = {"task": task, "length": length, "accuracy": None, "correct": None,
                   "trials": settings.trials, "mean_prompt_tokens": None, "note": str(e)}
        out.append({**row, "answers": records})
    if progress is not None:
        progress.update(1)
    return out


# --- results: OUT/results.csv, results.json, plot.png -------------------------------------------

def result_table(result: dict) -> str:
    """Methods as rows, lengths as columns."""
    metric = result["meta"]["metric"]
    if result["meta"]["protocol"] == "ruler":
        return ruler_table(result["rows"])
    return pivot_table(result["rows"], metric, "{:.2f}" if metric == "accuracy" else "{:.3f}")


def save_result(result: dict, out: Path, plot_too: bool = True) -> list[Path]:
    """results.csv (method,length,METRIC), results.json ({"meta", "rows"}) and, with plot_too,
    plot.png (the trained length marked)."""
    out = Path(out)
    paths = [out / "results.csv", out / "results.json"]
    io.write_json(paths[1], result)   # the record first: a CSV is never ahead of it
    write_csv(paths[0], csv_rows(result))
    if plot_too:
        paths.append(plot_result(result, out / "plot.png"))
    return paths


def plot_result(result: dict, path: Path) -> Path:
    """The metric against length, a line per method (RULER: the mean over tasks), the trained
    length marked; log scale for perplexity."""
    meta, rows = result["meta"], result["rows"]
    metric = meta["metric"]
    name = Path(meta["gguf_file"]).stem if meta.get("gguf_file") else Path(meta["model_path"]).name
    title = f"{name}: {meta['protocol']}" + (
        f" (last {meta['segment']} tokens)" if meta["protocol"] == "last-segment" else "")
    if meta["protocol"] == "ruler":   # one line per method: the mean accuracy over tasks
        rows, title = task_means(rows), f"{title}, mean accuracy over tasks"
    finite = [r for r in rows if r[metric] is not None and math.isfinite(r[metric])]
    plot_metric(finite, metric, meta["train_length"], path, title, log_y=metric != "accuracy")
    return path


def csv_rows(result: dict) -> list[dict]:
    """results.csv's rows: method,length,METRIC (ruler: RULER_COLUMNS)."""
    if result["meta"]["protocol"] == "ruler":
        return [{k: r.get(k) for k in RULER_COLUMNS} for r in result["rows"]]
    metric = result["meta"]["metric"]
    return [{"method": r["method"], "length": r["length"], metric: r[metric]} for r in result["rows"]]


def load_result(out: Path) -> dict | None:
    """An earlier result in `out`, or None where there is none. A results.json that is not a
    whole record (damaged, truncated, another file) or a results.csv without its results.json
    is refused (LengenError): its rows could not be checked, and starting over would drop them.
    A results.csv that disagrees with results.json is named on stderr; the caller writes it again."""
    path, table = Path(out) / "results.json", Path(out) / "results.csv"
    if not path.is_file():
        if table.is_file() and table.stat().st_size:
            raise LengenError(f"{table} holds results but {path.name}, which says what they were measured on, "
                              f"is missing: restore it, or use another --out (delete {table.name} to start over)")
        return None
    try:
        result = io.read_json(path)
        problem = _record_problem(result)
    except (ValueError, OSError) as e:
        problem = f"not JSON: {load_reason(e)}"
    if problem:
        raise LengenError(f"{path} is damaged ({problem}); its rows cannot be checked against these settings: "
                          "restore it, or use another --out (or move this folder away to start over)")
    disagreement = csv_disagreement(table, csv_rows(result))
    if disagreement:
        print(f"note: {table} disagrees with {path.name} ({disagreement}); it is written again from "
              f"{path.name}", file=sys.stderr)
    return result


def _record_problem(result) -> str | None:
    """What makes `result` not a whole hf eval record ({"meta", "rows"}), in words; None if it is one."""
    if not isinstance(result, dict) or not isinstance(result.get("meta"), dict) \
            or not isinstance(result.get("rows"), list):
        return "not a lengen hf eval record"
    meta = result["meta"]
    if meta.get("protocol") not in METRIC or meta.get("metric") != METRIC[meta["protocol"]] \
            or not isinstance(meta.get("settings"), dict):
        return "its meta is incomplete"
    metric = meta["metric"]
    for i, row in enumerate(result["rows"]):
        value = row.get(metric, False) if isinstance(row, dict) else False
        if not (isinstance(row, dict) and isinstance(row.get("method"), str)
                and type(row.get("length")) is int and row["length"] >= 1
                and (value is None or type(value) in (int, float))
                and (meta["protocol"] != "ruler" or isinstance(row.get("task"), str))):
            return f"row {i + 1} is not a result row"
        if value is None and meta["protocol"] != "ruler":
            return f"row {i + 1} has no {metric}"
    return None
