"""The interface every sweep kind implements (lengen.sweeps.kinds)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable


class SweepKind:
    name: str = ""                  # the sweep file's `command:`
    command: str = ""               # the command whose options the grid holds, for messages
    tables: tuple[str, ...] = ()    # the results tables it writes into the sweep folder
    #: config fields that cannot make a run invalid in a way only a model build finds
    cheap_fields: tuple[str, ...] = ()

    def options(self) -> list[str]:
        """Option names a sweep file may set (in `grid` and `fixed`)."""
        raise NotImplementedError

    def coerce(self, name: str, value):
        """`value` as option `name` takes it, or LengenError."""
        raise NotImplementedError

    def config(self, options: dict, grid_keys: frozenset = frozenset()):
        """A validated config from a grid point's options, or LengenError. `grid_keys`: the
        options that came from the grid point itself (the others from `fixed`)."""
        raise NotImplementedError

    def config_from_dict(self, d: dict):
        raise NotImplementedError

    def parse_eval(self, raw, errors: list[str]) -> dict | None:
        """The file's `eval:` section, checked; problems are appended to `errors`."""
        if raw is not None:
            errors.append(f"eval: applies to `command: lm` sweeps only, not `command: {self.name}`")
        return None

    def check(self, cfg, evaluation: dict | None) -> None:
        """Build what the run builds (its model, its evaluation) so a bad combination fails now,
        before anything runs; LengenError."""
        raise NotImplementedError

    def structural_key(self, cfg) -> str:
        d = {k: v for k, v in copy.deepcopy(cfg).to_dict().items() if k not in self.cheap_fields}
        return json.dumps(d, sort_keys=True)

    def done_file(self, evaluation: dict | None) -> str:
        """The file in a run directory whose presence means the run is done, written last."""
        raise NotImplementedError

    def execute(self, path, cfg, evaluation: dict | None, done_file: str,
                on_log: Callable[[int, dict], None]) -> str:
        """Train (or resume) and evaluate the run in `path`; returns a one-line summary."""
        raise NotImplementedError

    def results_writer(self, sweep, runs, evaluation: dict | None):
        """An object with write() -> finished runs, and rows() -> (row or None, values or None) per run."""
        raise NotImplementedError
