"""Model configuration: one dataclass, saved with every run and checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field

from lengen.errors import LengenError


@dataclass
class ModelConfig:
    """A Transformer stack. Defaults are the seed paper's CHE encoder (about 250k parameters)."""

    num_layers: int = 5
    num_heads: int = 8
    d_model: int = 64
    d_ff: int = 256
    dropout: float = 0.1
    norm: str = "post"          # "post" (x = LN(x + f(x)), the seed paper) or "pre"
    causal: bool = False        # encoder (False) or decoder (True)
    pe: str = "rope"            # positional encoding, a name in lengen.encodings.ENCODINGS
    pe_options: dict = field(default_factory=dict)  # encoding-specific options
    max_position: int = 2048    # positions live in [0, max_position): learned-table size, randomized range
    embed_scale: bool = True    # token embedding x sqrt(d_model)
    logit_scale: str = "none"   # attention logit scaling variant (see lengen.models.attention)
    key_norm: bool = False      # L2-normalise keys (see lengen.models.attention)
    # tokens in the longest training sequence: m of log-n scaling, FIRE's initial threshold and the
    # L0 of RoPE methods. Not TrainConfig.train_length (N, the CHE input length): for a CHE model
    # it is N plus the answer slots, for an LM the window length.
    train_tokens: int | None = None

    #: keys an older lengen wrote, and what they are called now
    RENAMED = {"train_length": "train_tokens"}

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """A ModelConfig from a saved dict, older key names included (TypeError for unknown keys)."""
        d = {cls.RENAMED.get(k, k): v for k, v in d.items()}
        return cls(**d)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def validate(self) -> None:
        if self.d_model % self.num_heads:
            raise LengenError(f"d_model {self.d_model} is not divisible by num_heads {self.num_heads}")
        for name in ("num_layers", "num_heads", "d_model", "d_ff", "max_position"):
            if getattr(self, name) < 1:
                raise LengenError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise LengenError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.norm not in ("post", "pre"):
            raise LengenError(f"norm must be 'post' or 'pre', got {self.norm!r}")
