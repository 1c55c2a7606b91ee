"""What `lengen hf eval` and `hf tune` are given (EvalSettings, TuneSettings), and every check of it
that needs no weights, made before the model loads: the protocol's or the search's options, the
weights' dtype, the attention implementation, the precision, the model folder, the texts, and the
trained length and each method's spec against it (for which the config alone is read)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from lengen.data.sources import resolve_source
from lengen.devices import check_precision
from lengen.errors import LengenError
from lengen.extrapolation import RopeSpec, check_window, is_plain
from lengen.hf.arch import check_train_length
from lengen.hf.loading import read_config
from lengen.hf.search import DEFAULT_METHODS, SPACES
from lengen.protocols.ruler import check_tasks

# "banded": sdpa with sliding-window layers computed in bands (lengen.hf.banded; long inputs)
ATTN_CHOICES = ("sdpa", "eager", "banded")
WEIGHT_DTYPES = ("float32", "bfloat16", "float16")
METRIC = {"ppl": "ppl", "last-segment": "ppl", "passkey": "accuracy", "ruler": "accuracy"}


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
        (the config's unless --train-length; a window past it is refused) and the config's head
        size (DPE's groups and topk count its frequency pairs)."""
        specs = [spec for spec in self.methods if not is_plain(spec)]
        if specs:
            config = read_config(self.model_path, self.gguf_file)
            config = getattr(config, "text_config", None) or config
            L0 = self.train_length or int(config.max_position_embeddings)
            head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
            for spec in specs:
                check_window(spec, RopeSpec(rotary_dim=int(head_dim), train_length=L0))

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


@dataclass
class TuneSettings:
    model_path: str
    length: int                       # target context length L
    text: str | None = None           # file, folder or glob; None: the standard library's sources
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    budget: float = 60.0              # minutes of search (the evaluation slice comes after)
    eval_text: str | None = None      # the evaluation slice from another text
    tune_docs: int = 2                # sequences in the tune slice
    eval_docs: int = 2                # sequences in the evaluation slice
    segment: int | None = None        # scored final tokens (default L // 2)
    logn: bool = True                 # also try every setting with +logn
    margin: float = 0.5               # early stopping: nats worse than the best finished setting
    refine: bool = True
    passkey: int = 0                  # passkey prompts per finalist (0: perplexity only)
    seed: int = 0                     # passkey prompts: seed for choosing; seed + 1 for the report
    gguf_file: str | None = None
    dtype: str = "float32"
    attn: str = "sdpa"
    train_length: int | None = None   # default: the config's (original_)max_position_embeddings
    device: str = "auto"
    precision: str = "fp32"

    def segment_tokens(self) -> int:
        return max(1, self.length // 2) if self.segment is None else self.segment

    def eval_settings(self) -> EvalSettings:
        return EvalSettings(self.model_path, ["rope"], [self.length], protocol="last-segment",
                            gguf_file=self.gguf_file, corpus=self.text, docs=self.tune_docs,
                            segment=self.segment_tokens(), dtype=self.dtype, attn=self.attn,
                            train_length=self.train_length, device=self.device, precision=self.precision)

    def check(self) -> None:
        """Every check that needs no model weights (the config is read for L0)."""
        bad = [m for m in self.methods if m not in SPACES]
        if not self.methods or bad:
            raise LengenError(f"lengen hf tune searches the methods {', '.join(SPACES)}; "
                              + (f"got {bad[0]!r}" if bad else "give at least one"))
        if len(set(self.methods)) != len(self.methods):
            raise LengenError("a method is given twice in --methods")
        if not (isinstance(self.budget, (int, float)) and math.isfinite(self.budget) and self.budget > 0):
            raise LengenError(f"--budget must be > 0 minutes, got {self.budget}")
        if self.tune_docs < 1 or self.eval_docs < 1:
            raise LengenError("--tune-docs and --eval-docs must be >= 1")
        if not 1 <= self.segment_tokens() <= self.length:
            raise LengenError(f"--segment must be in 1..{self.length} (the length)")
        if self.passkey < 0 or self.seed < 0:
            raise LengenError("--passkey and --seed must be >= 0")
        if not self.margin > 0:
            raise LengenError(f"--margin must be > 0 nats, got {self.margin}")
        self.eval_settings().check()        # --train-length, dtype, attn, precision, model folder, --gguf-file
        for text in (self.text, self.eval_text):
            resolve_source(text)            # a missing text file fails here
        L0 = self.trained_length()
        if self.length <= L0:
            raise LengenError(f"--length {self.length} is not beyond the trained length {L0}: "
                              "there is nothing to extend (plain RoPE is the model as trained)")

    def trained_length(self) -> int:
        if self.train_length:
            return self.train_length
        config = read_config(self.model_path, self.gguf_file)
        return int(getattr(config, "original_max_position_embeddings", None) or config.max_position_embeddings)
