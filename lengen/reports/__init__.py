"""Reports: the seed papers' tables and figures from a sweep folder, beside the published numbers
(Markdown, CSV, PNG/SVG, one offline HTML page). See docs/reports.md."""

from __future__ import annotations

from pathlib import Path

from lengen.errors import LengenError
from lengen.reports.build import build_report
from lengen.reports.load import load_sweep


def _open(path):
    from lengen.sweeps.spec import expand, parse_spec
    from lengen.sweeps.sweep_dir import SweepDir

    if not Path(path).is_dir():
        raise LengenError(f"{path} is not a folder; give a folder written by `lengen sweep run`")
    index = SweepDir(path).read_index()
    try:
        spec = parse_spec(index["spec"], where=str(Path(path) / SweepDir.INDEX))
        runs = expand(spec)
    except LengenError as e:
        raise LengenError(f"{path}: its sweep no longer expands with this lengen ({e})") from None
    return SweepDir(path, spec.kind.done_file(spec.evaluation)), spec, runs


def sweep_command(path) -> str:
    """The `command:` of the sweep in folder `path` (train or lm)."""
    from lengen.sweeps.sweep_dir import SweepDir

    if not Path(path).is_dir():
        raise LengenError(f"{path} is not a folder; give a folder written by `lengen sweep run`")
    spec = SweepDir(path).read_index()["spec"]
    return spec.get("command", "train") if isinstance(spec, dict) else "train"


def build_lm_sweep_report(path, out) -> dict:
    """The report of a language-model sweep folder (lengen.reports.lm_build) into `out`."""
    from lengen.reports.lm_build import build_lm_report
    from lengen.reports.lm_load import load_lm_sweep

    data = load_lm_sweep(*_open(path))
    return build_lm_report(data.name, data.runs, data.values, data.metric, data.protocol, data.spec_text, Path(out))


__all__ = ["build_lm_sweep_report", "build_report", "load_sweep", "sweep_command"]
