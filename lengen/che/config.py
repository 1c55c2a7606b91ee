"""The configuration of one CHE run: a dataclass saved as config.json in the run directory."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lengen.devices import check_precision
from lengen.errors import LengenError
from lengen.models.config import ARCHITECTURES, ARITH_KEY, ARITH_RUN, LM_RUN, ModelConfig, not_applicable, run_config_from_dict
from lengen.options import check_finite_fields, get_path


@dataclass
class TrainConfig:
    task: str = "reverse_string"
    model: ModelConfig = field(default_factory=ModelConfig)
    positions: str = "standard"          # training position sampler
    position_options: dict = field(default_factory=dict)
    test_positions: str | None = None    # random | uniform | standard; None = the sampler's default
    steps: int = 10000
    batch_size: int = 128
    train_length: int = 40               # N: each step draws one length from U{1..N}
    max_length: int = 500                # M: evaluate lengths 1..M
    eval_samples: int = 512              # per length
    eval_seed: int = 1234                # fixed: every run sees the same evaluation data
    eval_tokens: int = 65536             # evaluation batch = eval_tokens // sequence length
    lr: float = 1e-4
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 500
    log_every: int = 50
    device: str = "auto"                 # auto | cpu | cuda | cuda:N (lengen.devices)
    precision: str = "fp32"              # fp32 | tf32 | bf16 (lengen.devices)

    #: keys that define what the checkpoint is; the others may change when a run is resumed
    IDENTITY = ["task", "model", "positions", "position_options", "batch_size", "train_length",
                "lr", "grad_clip", "seed", "log_every"]
    #: where a run executes, not what it computes: left out of a sweep run's identity hash
    RUNTIME = ["device"]
    #: fields added after sweeps existed, with their defaults: a sweep run id leaves them out while
    #: they keep that default (lengen.sweeps.spec.run_id), so old sweep folders resume
    ADDED_FIELDS = {"model.architecture": "transformer", "model.hidden_size": 256, "model.memory_cell_size": 8,
                    "model.memory_size": None, "model.layer_pe": None, "model.logit_scale_options": {}}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str | None = None) -> "TrainConfig":
        """`where` (a run directory) prefixes the error messages."""
        return run_config_from_dict(cls, d, where, {ARITH_KEY: ARITH_RUN, "corpus": LM_RUN})

    def validate(self) -> None:
        check_finite_fields(self)  # first: NaN passes every range check below (nan <= 0 is False)
        for name in ("batch_size", "train_length", "max_length", "eval_samples", "checkpoint_every",
                     "log_every", "eval_tokens"):
            if getattr(self, name) < 1:
                raise LengenError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0:
            raise LengenError(f"steps must be >= 0, got {self.steps}")
        if self.seed < 0:
            raise LengenError(f"seed must be >= 0, got {self.seed}")
        if self.max_length < self.train_length:
            raise LengenError(f"max-length {self.max_length} < train-length {self.train_length}: the "
                              "evaluation must cover the training lengths (and usually go beyond them)")
        if self.lr <= 0:
            raise LengenError(f"lr must be > 0, got {self.lr}")
        if not self.grad_clip > 0:
            raise LengenError(f"grad-clip must be > 0, got {self.grad_clip}")
        check_precision(self.precision)
        if self.model.architecture in ARCHITECTURES:
            unread = inapplicable_options(self)
            if unread:
                raise LengenError(not_applicable(self.model.architecture, [n.replace("_", "-") for n in unread]))
        self.model.validate()


# option name (the flag without dashes, underscores) -> TrainConfig path ("model." = ModelConfig)
TRAIN_OPTIONS = {
    "task": "task", "pe": "model.pe", "pe_options": "model.pe_options", "positions": "positions",
    "position_options": "position_options", "test_positions": "test_positions", "steps": "steps",
    "batch_size": "batch_size", "train_length": "train_length", "max_length": "max_length",
    "eval_samples": "eval_samples", "lr": "lr", "seed": "seed", "checkpoint_every": "checkpoint_every",
    "log_every": "log_every", "max_position": "model.max_position", "layers": "model.num_layers",
    "heads": "model.num_heads", "d_model": "model.d_model", "d_ff": "model.d_ff",
    "dropout": "model.dropout", "norm": "model.norm", "logit_scale": "model.logit_scale",
    "logit_scale_options": "model.logit_scale_options", "layer_pe": "model.layer_pe", "key_norm": "model.key_norm", "grad_clip": "grad_clip", "device": "device", "precision": "precision",
    "model": "model.architecture", "hidden_size": "model.hidden_size",
    "memory_cell_size": "model.memory_cell_size", "memory_size": "model.memory_size",
}
#: the run's options that set the Transformer's positions (no recurrent model reads them)
_POSITION_OPTIONS = ("positions", "position_options", "test_positions")


def options_not_read(architecture: str) -> list[str]:
    """The options (TRAIN_OPTIONS names) that a model of `architecture` ignores: the Transformer's
    and its positions' for a recurrent model, the recurrent sizes for the Transformer."""
    cfg = ModelConfig(architecture=architecture)
    model_fields = cfg.fields_not_read()
    return [name for name, path in TRAIN_OPTIONS.items()
            if (path.startswith("model.") and path[6:] in model_fields)
            or (cfg.recurrent and name in _POSITION_OPTIONS)]


def inapplicable_options(cfg: TrainConfig) -> list[str]:
    """Options of `cfg` set away from their default that its model does not read (positions
    "standard" and test positions "standard" count as the default: they change nothing)."""
    default = TrainConfig().to_dict()
    d = cfg.to_dict()
    harmless = {"test_positions": (None, "standard")}
    out = []
    for name in options_not_read(cfg.model.architecture):
        value, path = get_path(d, TRAIN_OPTIONS[name]), TRAIN_OPTIONS[name]
        if value != get_path(default, path) and value not in harmless.get(name, ()):
            out.append(name)
    return out
