"""`lengen report`: one path for every sweep kind. The sweep folder is read (lengen.reports.load:
every planned run and its results, through the sweep's results writer), then the kind's report
writes its tables, figures and index.html (REPORTS, by the sweep file's `command:`): the seed
paper's for CHE sweeps (lengen.reports.che), the FIRE paper's for language models
(lengen.reports.lm), Su's MLM table for masked LMs (lengen.reports.mlm), the arithmetic heat maps (lengen.reports.arith)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lengen.reports import arith, che, lm, mlm
from lengen.reports.load import SweepData, load_sweep
from lengen.sweeps.kinds.arith import ARITH
from lengen.sweeps.kinds.che import CHE
from lengen.sweeps.kinds.lm import LM
from lengen.sweeps.kinds.mlm import MLM


@dataclass(frozen=True)
class KindReport:
    """The part of a report that depends on the sweep kind."""

    build: Callable[[SweepData, Path], dict]  # writes into the folder; returns what it made (done, planned, ...)
    summary: Callable[[dict], list[str]]      # what `lengen report` prints of it, one print each


#: the report of each sweep kind (lengen.sweeps.kinds), by the kind's name
REPORTS: dict[str, KindReport] = {CHE.name: KindReport(che.build, che.summary),
                                  LM.name: KindReport(lm.build, lm.summary),
                                  MLM.name: KindReport(mlm.build, mlm.summary),
                                  ARITH.name: KindReport(arith.build, arith.summary)}


def build_report(sweep_path, out) -> dict:
    """The report of the sweep in folder `sweep_path`, written into `out`. Returns what the kind's
    report made, with `summary`: the lines `lengen report` prints."""
    data = load_sweep(sweep_path)
    report = REPORTS[data.kind]
    made = report.build(data, Path(out))
    # a run whose results cannot be read back is not counted: say which, and why, rather than a quiet gap
    damaged = [f"not counted: run {rid}: {why}; `lengen sweep run` evaluates it again"
               for rid, why in data.damaged.items()]
    return {**made, "summary": [*report.summary(made), *damaged]}
