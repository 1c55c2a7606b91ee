"""What a sweep runs, by its file's `command:`: `train` (CHE runs, `lengen train` options), `lm`
(language models, `lengen lm train` options plus an `eval:` section of `lengen lm eval` options),
`mlm` (masked LMs, `lengen mlm train` options plus an `eval:` section of `lengen mlm eval` options)
or `arith` (arithmetic, `lengen arith train` options).
A kind knows its options, how a grid point becomes a config and is checked, how one run is
executed, when it is done and how its results tables are written. Adding a kind is one module and
one line here."""

from __future__ import annotations

from lengen.sweeps.kinds.arith import ARITH
from lengen.sweeps.kinds.base import SweepKind
from lengen.sweeps.kinds.che import CHE
from lengen.sweeps.kinds.lm import LM
from lengen.sweeps.kinds.mlm import MLM

KINDS: dict[str, SweepKind] = {CHE.name: CHE, LM.name: LM, MLM.name: MLM, ARITH.name: ARITH}


def get_kind(command) -> SweepKind | None:
    return KINDS.get(command) if isinstance(command, str) else None


__all__ = ["KINDS", "SweepKind", "get_kind"]
