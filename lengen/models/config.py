"""Model configuration: one dataclass, saved with every run and checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field

from lengen.errors import LengenError, unknown_name
from lengen.options import check_finite_fields

#: the CHE benchmark's architectures (Deletang et al. 2023): the Transformer and its recurrent baselines
ARCHITECTURES = ("transformer", "rnn", "lstm", "stack_rnn", "tape_rnn")
#: the names tables print
ARCHITECTURE_LABELS = {"transformer": "Transformer", "rnn": "RNN", "lstm": "LSTM", "stack_rnn": "Stack-RNN",
                       "tape_rnn": "Tape-RNN"}
#: recurrent models with an external memory (stack or tape)
MEMORY_ARCHITECTURES = ("stack_rnn", "tape_rnn")
#: fields only the Transformer reads (train_tokens is filled in by the run setup for every model)
TRANSFORMER_FIELDS = ("num_layers", "num_heads", "d_model", "d_ff", "dropout", "norm", "causal", "pe", "pe_options",
                      "layer_pe", "max_position", "embed_scale", "logit_scale", "logit_scale_options", "key_norm")
#: fields only the recurrent models read (the memory ones only the Stack-RNN and Tape-RNN)
RECURRENT_FIELDS = ("hidden_size", "memory_cell_size", "memory_size")
MEMORY_FIELDS = ("memory_cell_size", "memory_size")


def not_applicable(architecture: str, names) -> str:
    """The one message for settings the architecture does not read."""
    names = list(names)
    verb = "does" if len(names) == 1 else "do"
    if architecture == "transformer":
        why = "only the recurrent models read " + ("it" if len(names) == 1 else "them")
    elif {n.lstrip("-").replace("-", "_") for n in names} <= set(MEMORY_FIELDS):
        why = "only the Stack-RNN and Tape-RNN have a memory"
    else:
        why = "a recurrent model reads one-hot tokens, with no positions and no Transformer layers"
    return (f"{', '.join(names)} {verb} not apply to model {architecture!r} ({why}); "
            f"leave {'it' if len(names) == 1 else 'them'} out")


@dataclass
class ModelConfig:
    """A Transformer stack (defaults: the seed paper's CHE encoder, about 250k parameters), or one
    of the CHE benchmark's recurrent baselines (`architecture`; lengen.models.recurrent)."""

    architecture: str = "transformer"  # a name in ARCHITECTURES
    num_layers: int = 5
    num_heads: int = 8
    d_model: int = 64
    d_ff: int = 256
    dropout: float = 0.1
    norm: str = "post"          # "post" (x = LN(x + f(x)), the seed paper) or "pre"
    causal: bool = False        # encoder (False) or decoder (True)
    pe: str = "rope"            # positional encoding, a name in lengen.encodings.ENCODINGS
    pe_options: dict = field(default_factory=dict)  # encoding-specific options (of `pe` only)
    # per-layer encodings, repeated cyclically over the layers (["rope", "rope", "rope", "none"]:
    # RoPE with every 4th layer NoPE, as Llama 4 / SmolLM3 / RNoPE); None: every layer uses `pe`.
    # `pe` must be one of them; pe_options apply to it, the other names take their defaults
    layer_pe: list[str] | None = None
    max_position: int = 2048    # positions live in [0, max_position): learned-table size, randomized range
    embed_scale: bool = True    # token embedding x sqrt(d_model)
    logit_scale: str = "none"   # attention logit scaling variant (see lengen.models.logit_scaling)
    logit_scale_options: dict = field(default_factory=dict)  # its options (ssmax: s_init; llama4_temperature: ...)
    key_norm: bool = False      # L2-normalise keys (see lengen.models.attention)
    # tokens in the longest training sequence: m of log-n scaling, FIRE's initial threshold and the
    # L0 of RoPE methods. Not TrainConfig.train_length (N, the CHE input length): for a CHE model
    # it is N plus the answer slots, for an LM the window length.
    train_tokens: int | None = None
    # recurrent models (architecture != "transformer"); defaults: the CHE benchmark's sizes
    hidden_size: int = 256              # controller / RNN / LSTM state width
    memory_cell_size: int = 8           # width of a stack or tape cell
    memory_size: int | None = None      # stack depth / tape length; None: L + T of each forward call

    #: keys an older lengen wrote, and what they are called now
    RENAMED = {"train_length": "train_tokens"}

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """A ModelConfig from a saved dict, older key names included (TypeError for unknown keys)."""
        d = {cls.RENAMED.get(k, k): v for k, v in d.items()}
        return cls(**d)

    def __post_init__(self):
        if isinstance(self.layer_pe, str):  # "rope,rope,rope,none", as the command line and sweep files write it
            self.layer_pe = [x.strip() for x in self.layer_pe.split(",")]
        elif isinstance(self.layer_pe, tuple):
            self.layer_pe = list(self.layer_pe)

    def layer_encoding(self, layer: int) -> str:
        """The encoding name of block `layer` (0-based): `layer_pe` repeated, or `pe`."""
        return self.layer_pe[layer % len(self.layer_pe)] if self.layer_pe else self.pe

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def recurrent(self) -> bool:
        return self.architecture != "transformer"

    def fields_not_read(self) -> tuple[str, ...]:
        """The fields this architecture ignores."""
        if self.architecture == "transformer":
            return RECURRENT_FIELDS
        if self.architecture in MEMORY_ARCHITECTURES:
            return TRANSFORMER_FIELDS
        return TRANSFORMER_FIELDS + MEMORY_FIELDS

    def inapplicable_fields(self) -> list[str]:
        """Fields set away from their default that this architecture does not read."""
        default = ModelConfig()
        return [n for n in self.fields_not_read() if getattr(self, n) != getattr(default, n)]

    def validate(self) -> None:
        check_finite_fields(self)  # dropout, pe_options
        if self.architecture not in ARCHITECTURES:
            raise LengenError(unknown_name("model", self.architecture, ARCHITECTURES))
        extra = self.inapplicable_fields()
        if extra:
            raise LengenError(not_applicable(self.architecture, extra))
        for name in ("hidden_size", "memory_cell_size"):
            if getattr(self, name) < 1:
                raise LengenError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.memory_size is not None and self.memory_size < 1:
            raise LengenError(f"memory_size must be >= 1, got {self.memory_size}")
        if self.d_model % self.num_heads:
            raise LengenError(f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}")
        for name in ("num_layers", "num_heads", "d_model", "d_ff", "max_position"):
            if getattr(self, name) < 1:
                raise LengenError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise LengenError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.norm not in ("post", "pre"):
            raise LengenError(f"norm must be 'post' or 'pre', got {self.norm!r}")
        if self.layer_pe is not None:
            pattern = self.layer_pe
            if not pattern or not all(isinstance(x, str) and x for x in pattern):
                raise LengenError(f"layer-pe must list encoding names separated by commas, got {pattern!r}")
            if len(pattern) > self.num_layers:
                raise LengenError(f"layer-pe lists {len(pattern)} layers but the model has {self.num_layers}")
            if self.pe not in pattern:
                raise LengenError(f"layer-pe {','.join(pattern)} must include the model's pe {self.pe!r}, "
                                  "whose pe options it carries (the other names take their defaults)")


#: messages for a key that marks another kind of run directory
CHE_RUN = "this is a CHE run: use `lengen eval` (or `lengen train`)"
LM_RUN = "this is a language-model run: use `lengen lm eval` (or `lengen lm train`)"
MLM_RUN = "this is a masked-LM run: use `lengen mlm eval` (or `lengen mlm train`)"
ARITH_RUN = "this is an arithmetic run: use `lengen arith eval` (or `lengen arith train`)"
#: the config key only an arithmetic run has (it also has `task`, so it is checked before CHE's)
ARITH_KEY = "train_digits"


def _options_text(options: dict) -> str:
    return f"({','.join(f'{k}={v}' for k, v in options.items())})" if options else ""


def model_label(cfg: ModelConfig, pe: str | None = None) -> str:
    """The one label of a model in summaries, eval records and figure titles: every setting that
    changes what the attention reads of positions, as the flags spell it: `pe=rope`,
    `pe=rope(base=500)  layer-pe=rope,none  logit-scale=llama4_temperature  key-norm`; a
    recurrent model by its architecture (`model=lstm`). `pe`: the run's own name for it, when the
    run has one (arithmetic's `abacus+rope`)."""
    if cfg.recurrent:
        return f"model={cfg.architecture}"
    parts = [f"pe={pe or cfg.pe}{_options_text(cfg.pe_options)}"]
    if cfg.layer_pe:
        parts.append(f"layer-pe={','.join(cfg.layer_pe)}")
    if cfg.logit_scale != "none":
        parts.append(f"logit-scale={cfg.logit_scale}{_options_text(cfg.logit_scale_options)}")
    if cfg.key_norm:
        parts.append("key-norm")
    return "  ".join(parts)


def run_config_from_dict(cls, d: dict, where: str | None = None, foreign: dict[str, str] | None = None,
                         unknown_hint: str = ""):
    """A run config `cls` (TrainConfig, LMConfig, MLMConfig: a dataclass with a `model` field) from
    a saved dict, older ModelConfig key names included. LengenError, prefixed with the run
    directory `where`, for a key of another kind of run (`foreign`: key -> message) or any other
    unknown key."""
    prefix = f"{where}: " if where else ""
    d = dict(d)
    unknown = set(d) - set(cls.__dataclass_fields__)
    for key, message in (foreign or {}).items():
        if key in unknown:
            raise LengenError(prefix + message)
    if unknown:
        raise LengenError(f"{prefix}unknown config keys {sorted(unknown)}{unknown_hint}")
    try:
        model = ModelConfig.from_dict(d.pop("model", {}))
    except TypeError as e:
        raise LengenError(f"{prefix}bad model config: {e}") from None
    return cls(model=model, **d)
