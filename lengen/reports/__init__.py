"""Reports: the seed paper's tables and figures from a sweep folder, beside the published numbers
(Markdown, CSV, PNG/SVG, one offline HTML page). See docs/reports.md."""

from lengen.reports.build import build_report
from lengen.reports.load import load_sweep

__all__ = ["build_report", "load_sweep"]
