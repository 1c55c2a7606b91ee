"""Reports: the seed papers' tables and figures from a sweep folder, beside the published numbers
(Markdown, CSV, PNG/SVG, one offline HTML page). One path for every sweep kind: load
(lengen.reports.load), then the kind's report (lengen.reports.build.REPORTS). See docs/reports.md."""

from __future__ import annotations

from lengen.reports.build import REPORTS, build_report
from lengen.reports.load import SweepData, load_sweep, sweep_command

__all__ = ["REPORTS", "SweepData", "build_report", "load_sweep", "sweep_command"]
