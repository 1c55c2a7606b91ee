"""The configuration of one arithmetic run, saved as config.json in its run directory.

`pe` names what the model knows of positions: an attention encoding of lengen.encodings (`rope`,
`fire`, `learned`, `none` = NoPE, ...), `abacus` (Abacus embeddings with NoPE, McLeish et al.'s
best), or `abacus+ENCODING` (both: `abacus+fire`, `abacus+rope`). `positions` is where the
encoding's positions come from (lengen.arith.coupling: `standard` or `coupled`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lengen.arith import ARITH_TASKS, ArithTask, get_arith_task
from lengen.arith.abacus import ABACUS_ROWS
from lengen.arith.formats import FORMATS
from lengen.arith.coupling import ARITH_POSITIONS
from lengen.devices import check_precision
from lengen.encodings import ENCODINGS
from lengen.errors import LengenError, did_you_mean, unknown_name
from lengen.models.config import CHE_RUN, LM_RUN, ModelConfig, run_config_from_dict
from lengen.options import check_finite_fields

ABACUS = "abacus"


def default_arith_model() -> ModelConfig:
    """A small causal decoder (4 x 128, pre-LN, about 0.8M parameters) for CPU-sized studies."""
    return ModelConfig(num_layers=4, num_heads=4, d_model=128, d_ff=512, dropout=0.0, norm="pre",
                       causal=True, pe="none", embed_scale=False, max_position=64)


def split_pe(spec: str) -> tuple[bool, str]:
    """'abacus+rope' -> (True, 'rope'); 'abacus' -> (True, 'none'); 'fire' -> (False, 'fire')."""
    parts = [p.strip() for p in str(spec).split("+")]
    abacus = ABACUS in parts
    rest = [p for p in parts if p != ABACUS]
    if len(rest) > 1 or parts.count(ABACUS) > 1 or "" in parts:
        raise LengenError(f"pe {spec!r}: give one encoding, `abacus`, or `abacus+ENCODING` (e.g. abacus+fire)")
    encoding = rest[0] if rest else "none"
    if encoding not in ENCODINGS:  # named as --pe takes it here: abacus, abacus+ENCODING or ENCODING
        names = ENCODINGS.names()
        valid = [ABACUS, *names, *(f"{ABACUS}+{e}" for e in names)]
        guess = did_you_mean(spec, valid, {**ENCODINGS.hints, **{f"{ABACUS}+{k}": f"{ABACUS}+{v}"
                                                                 for k, v in ENCODINGS.hints.items()}})
        raise LengenError(f"unknown pe {spec!r}" + (f" (did you mean {guess!r}?)" if guess else "")
                          + f"; valid: abacus, abacus+ENCODING or ENCODING, an encoding being one of "
                          f"{', '.join(names)}")
    return abacus, encoding


@dataclass
class ArithConfig:
    model: ModelConfig = field(default_factory=default_arith_model)
    task: str = "addition"             # lengen.arith.ARITH_TASKS
    format: str = "reversed"           # reversed | padded | plain (lengen.arith.formats)
    pe: str = "abacus"                 # ENCODING, abacus or abacus+ENCODING
    positions: str = "standard"        # standard | coupled (lengen.arith.coupling)
    abacus_k: int = 99                 # Abacus training offset: k ~ U{0..abacus_k}
    train_digits: int = 5              # operands of 1..N digits in training
    test_digits: int = 8               # the evaluation grid: 1..M digits
    max_operands: int = 3              # multi_addition: 2..max_operands operands
    b_digits: int | None = None        # multiplication: the second operand's digits capped (1: n x 1)
    steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-3                   # peak AdamW learning rate (linear warmup, cosine decay to 10%)
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 500
    log_every: int = 50
    eval_samples: int = 100            # problems per heat-map cell (McLeish et al.: 100)
    eval_seed: int = 1234
    eval_batch: int = 512              # problems per forward pass while decoding
    device: str = "auto"
    precision: str = "fp32"

    #: what defines the checkpoint; evaluation settings may change on resume
    IDENTITY = ["model", "task", "format", "pe", "positions", "abacus_k", "train_digits", "max_operands", "b_digits",
                "steps", "batch_size", "lr", "warmup", "weight_decay", "grad_clip", "seed", "log_every"]
    RUNTIME = ["device"]
    ADDED_FIELDS = {"model.layer_pe": None, "model.logit_scale_options": {}}

    def __post_init__(self):
        try:
            _, self.model.pe = split_pe(self.pe)  # the attention encoding, for the model stack
        except LengenError:
            pass  # validate() says what is wrong
        self.model.train_tokens = self.train_length

    @property
    def abacus(self) -> bool:
        return split_pe(self.pe)[0]

    def build_task(self) -> ArithTask:
        options = {"multi_addition": {"max_operands": self.max_operands},
                   "multiplication": {"b_digits": self.b_digits}}.get(self.task, {})
        return get_arith_task(self.task, **options)

    def sequence_tokens(self, digits: int) -> int:
        """Tokens of the longest sequence with operands of up to `digits` digits: BOS, the
        operands and their operators, '=', the widest answer, EOS."""
        task = self.build_task()
        count = max(len(task.operand_digits_of_widest(c)) for c in task.cells(digits))
        return 1 + task.longest_prompt_digits(digits) + count + task.longest_answer(digits) + 1

    @property
    def train_length(self) -> int:
        """Tokens of the longest training sequence (the LM loop's token count, m of log-n)."""
        try:
            return self.sequence_tokens(self.train_digits)
        except (LengenError, ValueError):  # no task by that name, no cells: validate() says which
            return 1

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str | None = None) -> ArithConfig:
        return run_config_from_dict(cls, d, where, {"corpus": LM_RUN, "train_length": CHE_RUN})

    def validate(self, training: bool = True) -> None:
        """Every check that needs no model: one LengenError naming the option. `training` False
        (`lengen arith eval`): a grid smaller than the training digits is allowed, a look at the
        cells trained on."""
        check_finite_fields(self)
        ARITH_TASKS.get(self.task)
        for name in ("train_digits", "test_digits", "steps", "batch_size", "checkpoint_every", "log_every",
                     "eval_samples", "eval_batch"):
            if getattr(self, name) < (0 if name == "steps" else 1):
                raise LengenError(f"{name.replace('_', '-')} must be >= {0 if name == 'steps' else 1}, "
                                  f"got {getattr(self, name)}")
        if training and self.test_digits < self.train_digits:  # as `lengen train` refuses max-length < train-length
            raise LengenError(f"test-digits {self.test_digits} < train-digits {self.train_digits}: the evaluation "
                              "must cover the training digits (and usually go beyond them)")
        if self.format not in FORMATS:
            raise LengenError(unknown_name("format", self.format, FORMATS))
        abacus, encoding = split_pe(self.pe)
        ARITH_POSITIONS.get(self.positions)
        if self.task != "multi_addition" and self.max_operands != 3:
            raise LengenError(f"max-operands applies to task multi_addition only, not {self.task!r}")
        if self.task == "multi_addition" and self.max_operands < 2:
            raise LengenError(f"max-operands must be >= 2, got {self.max_operands}")
        if self.b_digits is not None and self.task != "multiplication":
            raise LengenError(f"b-digits applies to task multiplication only, not {self.task!r}")
        if self.b_digits is not None and self.b_digits < 1:
            raise LengenError(f"b-digits must be >= 1, got {self.b_digits}")
        if self.abacus_k < 0:
            raise LengenError(f"abacus-k must be >= 0, got {self.abacus_k}")
        for name in ("lr", "grad_clip"):
            if not getattr(self, name) > 0:
                raise LengenError(f"{name.replace('_', '-')} must be > 0, got {getattr(self, name)}")
        for name in ("warmup", "weight_decay", "seed", "eval_seed"):  # each by its own flag's name
            if getattr(self, name) < 0:
                raise LengenError(f"{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        check_precision(self.precision)
        self.model.validate()
        if not self.model.causal:
            raise LengenError("an arithmetic model is a causal decoder: causal must be true")
        self._check_positions(abacus, encoding)

    def _check_positions(self, abacus: bool, encoding: str) -> None:
        task = self.build_task()
        if self.positions == "coupled":
            if encoding == "none":
                raise LengenError(f"--positions coupled gives ids to a positional encoding, and pe {self.pe!r} has "
                                  "none that reads them (NoPE); use --pe learned (Cho et al.'s), rope, fire, ...")
            past_only = [e for e in dict.fromkeys(self.model.layer_pe or [encoding])
                          if ENCODINGS.get(e).causal_past_only]
            if past_only:
                raise LengenError(f"--positions coupled gives keys larger ids than their query, and the causal form "
                                  f"of {', '.join(past_only)} assumes they never are (docs/arithmetic.md); use --pe "
                                  "learned (Cho et al.'s) or rope, which read both signs")
            if self.format == "plain":
                raise LengenError("--positions coupled needs the answer's significance before it is decoded: use "
                                  "--format padded (Cho et al.'s) or reversed, not plain")
            need = 2 + max(task.longest_answer(self.test_digits), task.longest_answer(self.train_digits))
            if self.model.max_position < need:
                raise LengenError(f"coupled ids of answers up to {need - 2} digits need max-position >= {need} "
                                  f"(got {self.model.max_position}; Cho et al. use 1 + the test answer's digits "
                                  "or more)")
        elif encoding == "learned":
            need = self.sequence_tokens(max(self.test_digits, self.train_digits))
            if self.model.max_position < need:
                raise LengenError(f"the learned position table has {self.model.max_position} rows (max-position), "
                                  f"but test sequences reach {need} tokens; raise --max-position")
        if abacus:
            top = max(task.longest_answer(self.train_digits) + self.abacus_k, task.longest_answer(self.test_digits))
            if top >= ABACUS_ROWS:
                raise LengenError(f"abacus ids reach {top} (digits + abacus-k), past the table's {ABACUS_ROWS} rows; "
                                  "lower --abacus-k")
