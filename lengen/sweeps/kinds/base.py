"""The interface every sweep kind implements (lengen.sweeps.kinds)."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from lengen import io
from lengen.errors import LengenError, reason
from lengen.training.run_dir import RunDir, config_digest, record_mismatch

#: what reading a results record back can raise when the file is not whole or not what it should be
_NOT_WHOLE = (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError)


class SweepKind:
    name: str = ""                  # the sweep file's `command:`
    command: str = ""               # the command whose options the grid holds, for messages
    #: config fields that cannot make a run invalid in a way only a model build finds
    cheap_fields: tuple[str, ...] = ()
    #: whether a run may start from another run's weights (a variant's `init_from:`, start_from)
    starts_from_runs: bool = False

    # -- its results tables (lengen.sweeps.results writes them) --
    #: (one row per finished run, its values by length in long form): the files in the sweep folder
    tables: tuple[str, str] = ("", "")
    #: the per-run table's first columns; every other option that varies in the sweep follows them,
    #: then `trailing_columns`
    leading_columns: tuple[str, ...] = ()
    trailing_columns: tuple[str, ...] = ()
    #: the leading columns that are options, read from a run's config (finished or not)
    config_columns: tuple[str, ...] = ()

    def trailing_for(self, evaluation: dict | None) -> tuple[str, ...]:
        """The per-run table's last columns for a sweep with this `eval:` section (default:
        trailing_columns; a kind may add what only some evaluations give)."""
        return self.trailing_columns

    def options(self) -> list[str]:
        """Option names a sweep file may set (in `grid` and `fixed`)."""
        raise NotImplementedError

    def option_values(self, cfg) -> dict:
        """Every option's value in a config, by option name, in the option table's order."""
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

    def start_from(self, cfg, source_cfg) -> None:
        """Make `cfg` start from the weights of run `source_cfg` (checked; LengenError), for kinds
        with starts_from_runs."""
        raise NotImplementedError

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

    def records(self, cfg, done_file: str, evaluation: dict | None) -> dict[str, dict]:
        """The files of a finished run that its results are read from, each with what it must say
        of run `cfg` (field -> value, lengen.training.run_dir.record_mismatch)."""
        raise NotImplementedError

    def settled(self, cfg):
        """`cfg` as its run directory records it: what a run fills in from the rest (a copy)."""
        return copy.deepcopy(cfg)

    def done_problem(self, path: Path, done_file: str, evaluation: dict | None, cfg=None) -> str | None:
        """Why the results of the run in `path` (of config `cfg`, the sweep's; default: its own
        config.json), whose done file is there, cannot be counted: its config.json, or a file its
        results are read from, damaged (not whole, fields missing) or another run's or another
        evaluation's; None when they can. One line naming the file."""
        config = Path(path) / RunDir.CONFIG
        try:
            saved = self.config_from_dict(RunDir(path).read_config())
        except LengenError as e:
            return str(e).split(";")[0]
        except _NOT_WHOLE as e:
            return f"{config} is damaged ({reason(e)})"
        cfg = saved if cfg is None else self.settled(cfg)
        if config_digest(saved) != config_digest(cfg):
            return f"{config} is another run's (its settings digest differs)"
        for name, expected in self.records(cfg, done_file, evaluation).items():
            why = record_problem(Path(path) / name, expected)
            if why is not None:
                return why
        try:
            self.rows_of(path, io.read_json(Path(path) / done_file), evaluation)
        except _NOT_WHOLE as e:
            return f"{Path(path) / done_file} is damaged ({reason(e)})"
        return None

    def by_length_columns(self, evaluation: dict | None) -> list[str]:
        """The header of the long table: run_id, the columns that group a run's values, length,
        the value."""
        raise NotImplementedError

    def rows_of(self, path: Path, done: dict, evaluation: dict | None) -> tuple[dict, list[tuple]]:
        """What a finished run in `path` gives (`done`: its done file, read): its result columns
        (train_seconds and eval_seconds among them), and its rows of the long table less the
        run_id. OSError or ValueError when a file it reads is missing or not whole."""
        raise NotImplementedError


def record_problem(file: Path, expected: dict) -> str | None:
    """Why the record in `file` cannot be read back as the one `expected` (field -> value)
    describes: "FILE is missing", "FILE is damaged (...)", "FILE is another run's ..."; or None."""
    try:
        why = record_mismatch(io.read_json(file), expected)
    except FileNotFoundError:
        return f"{file} is missing"
    except (OSError, ValueError) as e:
        return f"{file} is damaged ({reason(e)})"
    return None if why is None else f"{file} is {why}"


def settings_of(evaluation: dict | None) -> dict:
    """A sweep's `eval:` section as its done files record it (JSON's lists, not tuples)."""
    return json.loads(json.dumps(evaluation or {}))


def trained_and_evaluated(cfg, training_file: str, done_file: str, evaluation: dict | None) -> dict[str, dict]:
    """`records` of a kind that trains (writing `training_file`) and then evaluates into its done
    file (language models): both carry the run's config digest; the done file, the `eval:` section."""
    digest = config_digest(cfg)
    return {training_file: {"config_digest": digest, "steps": cfg.steps},
            done_file: {"config_digest": digest, "settings": settings_of(evaluation)}}


def hashed_done_file(evaluation: dict | None) -> str:
    """`sweep-eval-<hash>.json`, `<hash>` that of a sweep's `eval:` section: the done file of a kind
    whose evaluation is not part of a run's id, so an edited section re-evaluates trained runs
    without retraining them."""
    blob = json.dumps(evaluation or {}, sort_keys=True, separators=(",", ":"))
    return f"sweep-eval-{hashlib.sha256(blob.encode()).hexdigest()[:8]}.json"
