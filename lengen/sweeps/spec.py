"""Sweep files: a YAML mapping whose `grid` lists values of `lengen train` options (the sweep is
their cross product), `fixed` sets single values, and `exclude` drops combinations. With
`command: lm` the options are `lengen lm train`'s and an `eval:` section holds `lengen lm eval`
options (lengen.sweeps.kinds.lm).

    name: ruoss-mini
    grid:
      task: [parity_check, bucket_sort]
      pe: [none, rope, learned]
      positions: [standard, randomized]
      lr: [1e-4, 3e-4]
      seed: [0, 1, 2]
    fixed: {steps: 2000, train_length: 20, max_length: 60}
    exclude:
      - {pe: none, positions: randomized}     # no positions to randomize

Methods that are settings of several options at once (RoPE with randomized positions, NoPE layers
with a temperature) go under `variants:`, named bundles of options; the variants are one more axis
of the grid, after the `grid:` keys (so it varies fastest), and a variant's options override `fixed`:

    grid: {seed: [0, 1, 2], task: [bucket_sort]}
    variants:
      rope: {pe: rope}
      r_rope: {pe: rope, positions: randomized}
      rnope: {pe: rope, layer_pe: "rope,rope,rope,none"}
    exclude:
      - {variant: r_rope, task: bucket_sort}

A variant may start from another variant's trained run of the same grid point (`init_from:`, the
other variant's name; `command: lm` only): DroPE's recalibration of a RoPE run, which must be
finished first. The runner runs such runs after the ones they start from; the source variant may
not itself start from another.

    grid: {seed: [0, 1, 2]}
    variants:
      rope: {}
      drope: {pe: none, init_from: rope, steps: 60, warmup: 6}

Every grid point becomes a config (TrainConfig, LMConfig); its run id is a hash of that whole config (less where it
runs: the device), so the same run gets the same id from any file, in any key order. Every
problem of a file (unknown option, wrong type, impossible combination) is found before anything
runs and reported together, each with the grid point that causes it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lengen.errors import LengenError, unknown_name
from lengen.options import check_finite
from lengen.sweeps.kinds import KINDS, SweepKind, get_kind
from lengen.sweeps.presets import preset_names, preset_path
from lengen.training.run_dir import run_id  # noqa: F401 - the sweeps import it from here

TOP_LEVEL = ("name", "description", "command", "grid", "fixed", "variants", "exclude", "eval")
#: the grid axis `variants:` adds (a grid point's `variant` is the variant's name)
VARIANT = "variant"


class SweepSpecError(LengenError):
    """A sweep file that cannot run; the message lists every problem found."""


#: the key of a variant that names the variant whose run it starts from
INIT_FROM = "init_from"


@dataclass
class SweepRun:
    run_id: str
    point: dict           # this run's grid values, option -> value, in grid order
    config: object        # TrainConfig (command: train) or LMConfig (command: lm)
    after: str | None = None   # the run it starts from (a variant's init_from), which must finish first


@dataclass
class SweepSpec:
    name: str
    grid: dict[str, list]
    fixed: dict = field(default_factory=dict)
    exclude: list[dict] = field(default_factory=list)
    description: str = ""
    source: str = ""      # the YAML text, kept with the results
    command: str = "train"                # lengen.sweeps.kinds
    evaluation: dict | None = None        # command: lm: the `eval:` section (lengen lm eval options)
    #: `variants:`: name -> options; one more grid axis after `grid`'s keys
    variants: dict[str, dict] = field(default_factory=dict)
    #: variant -> the variant whose run of the same grid point it starts from (`init_from:`)
    sources: dict[str, str] = field(default_factory=dict)

    def axes(self) -> dict[str, list]:
        """The grid's axes in order: `grid`'s keys, then `variant` (the variants' names)."""
        return {**self.grid, **({VARIANT: list(self.variants)} if self.variants else {})}

    def options_of(self, point: dict) -> dict:
        """The options of a grid point: `fixed`, overridden by its variant's, and the grid's."""
        point = dict(point)
        variant = self.variants.get(point.pop(VARIANT, None), {})
        return {**self.fixed, **variant, **point}

    def own_options(self, point: dict) -> frozenset:
        """The options a grid point sets itself, its variant's included (not `fixed`'s): a kind
        may treat those differently (a recurrent model drops the fixed options it does not read)."""
        return frozenset(set(point) - {VARIANT} | set(self.variants.get(point.get(VARIANT), {})))

    @property
    def kind(self) -> SweepKind:
        return KINDS[self.command]

    def to_dict(self) -> dict:
        d = {"name": self.name, "description": self.description, "grid": self.grid, "fixed": self.fixed,
             "exclude": self.exclude}
        if self.variants:
            d["variants"] = {name: {**options, **({INIT_FROM: self.sources[name]} if name in self.sources else {})}
                             for name, options in self.variants.items()}
        if self.command != "train":
            d.update(command=self.command, eval=self.evaluation)
        return d


#: run_id (lengen.training.run_dir): 12 hex digits of the SHA-256 of the config (runtime fields
#: left out), keys sorted. A field added after sweeps existed (`cfg.ADDED_FIELDS`, dotted path ->
#: its default) is hashed only when it differs from that default, so existing sweep folders keep
#: their run ids and resume.


def _option_name(kind: SweepKind, key, where: str, errors: list[str]) -> str | None:
    name = str(key).replace("-", "_")
    if name == "device":
        errors.append(f"{where}: 'device' is where a sweep runs, not what it computes: give "
                      "--device to `lengen sweep run`")
        return None
    valid = kind.options()
    if name not in valid:
        errors.append(f"{where}: {unknown_name(f'`{kind.command}` option', key, valid, listed=False)}")
        return None
    return name


_INVALID = object()   # a value that failed its check: left out of the grid the values are tried on


def _coerce(kind: SweepKind, name: str, value, where: str, errors: list[str]):
    try:
        check_finite(name, value)   # before and after: "nan" as text becomes a float NaN
        coerced = kind.coerce(name, value)
        check_finite(name, coerced)
        return coerced
    except LengenError as e:
        errors.append(f"{where}: {e}")
        return _INVALID


def parse_spec(data, source: str = "", where: str = "sweep file") -> SweepSpec:
    """Check the file's structure, option names and value types (all problems at once)."""
    if not isinstance(data, dict):
        raise SweepSpecError(f"{where}: the top level must be a mapping with `grid:` (and `fixed:`, "
                             f"`exclude:`), got {type(data).__name__}")
    errors: list[str] = []
    for key in data:
        if key not in TOP_LEVEL:
            errors.append(f"{where}: {unknown_name('top-level key', key, TOP_LEVEL)} "
                          "(options go under `grid:` or `fixed:`)")
    command = data.get("command", "train")
    kind = get_kind(command)
    if kind is None:
        errors.append(f"{where}: command {command!r} is not supported; valid: {', '.join(KINDS)}")
        kind = KINDS["train"]
    evaluation = kind.parse_eval(data.get("eval"), errors)
    grid_in, fixed_in = data.get("grid") or {}, data.get("fixed") or {}
    if not isinstance(grid_in, dict):
        errors.append(f"{where}: `grid` must map options to lists of values")
        grid_in = {}
    if not isinstance(fixed_in, dict):
        errors.append(f"{where}: `fixed` must map options to single values")
        fixed_in = {}
    grid: dict[str, list] = {}
    for key, values in grid_in.items():
        name = _option_name(kind, key, f"grid.{key}", errors)
        if name is None:
            continue
        if not isinstance(values, list) or not values:
            errors.append(f"grid.{key}: must be a non-empty list (a single value goes under `fixed`)")
            continue
        kept = []
        for i, raw in enumerate(values):
            v = _coerce(kind, name, raw, f"grid.{key}[{i}]", errors)
            if v is not _INVALID and v in kept:
                errors.append(f"grid.{key}[{i}]: {raw!r} is listed twice (the same run twice)")
            elif v is not _INVALID:
                kept.append(v)
        if kept:
            grid[name] = kept
    fixed = _single_values(kind, fixed_in, "fixed", grid, errors, "also in `grid`; give it in one place",
                           "fixed values are single")
    sources = _parse_sources(kind, data.get("variants"), errors)
    variants = _parse_variants(kind, data.get("variants"), grid, errors)
    # `lengen train --steps 0` evaluates an untrained model; in a sweep it is a forgotten value
    for where_, value in [*((f"grid.steps[{i}]", v) for i, v in enumerate(grid.get("steps", []))),
                          *([("fixed.steps", fixed["steps"])] if "steps" in fixed else [])]:
        if isinstance(value, int) and value < 1:
            errors.append(f"{where_}: {value} steps trains nothing; a sweep's runs need steps >= 1")
    exclude = []
    rules = data.get("exclude") or []
    if not isinstance(rules, list):
        errors.append("exclude: must be a list of mappings, e.g. - {pe: none, positions: randomized}")
        rules = []
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or not rule:
            errors.append(f"exclude[{i}]: must be a non-empty mapping of option: value (or list of values)")
            continue
        parsed = {}
        for key, value in rule.items():
            name = str(key).replace("-", "_")
            if name == VARIANT and variants:
                names = [str(v) for v in (value if isinstance(value, list) else [value])]
                for v in names:
                    if v not in variants:
                        errors.append(f"exclude[{i}].variant: {v!r} is not a variant ({', '.join(variants)}), "
                                      "so it excludes nothing")
                parsed[VARIANT] = names
                continue
            if name not in grid:
                errors.append(f"exclude[{i}].{key}: not a grid option, so the rule can never apply; "
                              f"grid options: {', '.join(grid) or 'none'}")
                continue
            values = value if isinstance(value, list) else [value]
            parsed[name] = [_coerce(kind, name, v, f"exclude[{i}].{key}", errors) for v in values]
            for raw, v in zip(values, parsed[name]):
                if v is not _INVALID and v not in grid[name]:
                    errors.append(f"exclude[{i}].{key}: {raw!r} is not one of grid.{key}'s values "
                                  f"({', '.join(map(str, grid[name]))}), so it excludes nothing")
        exclude.append(parsed)
    if not grid and not errors:
        errors.append(f"{where}: `grid` is empty; list at least one option's values "
                      f"(for a single run use `{kind.command}`)")
    name = data.get("name") or "sweep"
    spec = SweepSpec(name=str(name), grid=grid, fixed=fixed, exclude=exclude,
                     description=str(data.get("description") or ""), source=source, command=command,
                     evaluation=evaluation, variants=variants, sources=sources)
    if errors:
        if grid and command in KINDS:   # every problem in one round: what could be read is built too
            try:
                expand(spec)
            except SweepSpecError as e:
                errors.extend(line for line in str(e).splitlines() if "every grid point is excluded" not in line)
        raise SweepSpecError("\n".join(errors))
    return spec


def _single_values(kind: SweepKind, options: dict, where: str, grid: dict, errors: list[str], in_grid: str,
                   single: str) -> dict:
    """Options with one value each (`fixed`, a variant), checked and coerced; none of them a
    `grid` option (`in_grid`: why not) and no list (`single`: why not)."""
    values = {}
    for key, value in options.items():
        name = _option_name(kind, key, f"{where}.{key}", errors)
        if name is None:
            continue
        if name in grid:
            errors.append(f"{where}.{key}: {in_grid}")
            continue
        if isinstance(value, list):
            errors.append(f"{where}.{key}: a list belongs under `grid` ({single})")
            continue
        value = _coerce(kind, name, value, f"{where}.{key}", errors)
        if value is not _INVALID:
            values[name] = value
    return values


def _parse_sources(kind: SweepKind, raw, errors: list[str]) -> dict[str, str]:
    """The variants' `init_from:` keys (variant -> source variant), checked: another variant of
    the file, which does not start from one itself; a kind that can start runs from others' only."""
    if not isinstance(raw, dict):
        return {}
    sources = {str(name): options[INIT_FROM] for name, options in raw.items()
               if isinstance(options, dict) and INIT_FROM in options}
    for name, source in sources.items():
        where = f"variants.{name}.{INIT_FROM}"
        if not kind.starts_from_runs:
            errors.append(f"{where}: `command: {kind.name}` runs cannot start from another run's weights")
        elif not isinstance(source, str) or source not in raw or source == name:
            errors.append(f"{where}: must name another variant ({', '.join(str(v) for v in raw if v != name)}), "
                          f"got {source!r}")
        elif source in sources:
            errors.append(f"{where}: {source!r} starts from {sources[source]!r} itself; a run starts from a "
                          "run trained from scratch")
    return {k: v for k, v in sources.items() if isinstance(v, str)}


def _parse_variants(kind: SweepKind, raw, grid: dict, errors: list[str]) -> dict[str, dict]:
    """`variants:` checked: a mapping of names to mappings of options (each option checked as in
    `fixed`; none of them a `grid` option, which would make the grid's value meaningless)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        errors.append("variants: must map variant names to options, e.g. r_rope: {pe: rope, positions: randomized}")
        return {}
    variants: dict[str, dict] = {}
    for label, options in raw.items():
        where = f"variants.{label}"
        if options is None:
            options = {}
        if isinstance(options, dict):
            options = {k: v for k, v in options.items() if k != INIT_FROM}   # _parse_sources'
        if not isinstance(options, dict):
            errors.append(f"{where}: must be a mapping of options (or empty for the defaults)")
            continue
        parsed = _single_values(kind, options, where, grid, errors,
                                "also a `grid` option; a variant cannot set what the grid varies",
                                "a variant's values are single")
        if parsed in variants.values():
            errors.append(f"{where}: the same options as another variant (the same runs twice)")
        variants[str(label)] = parsed
    if VARIANT in grid:
        errors.append("grid.variant: `variant` names the `variants:` axis; it is not an option")
    return variants


def load_spec(source: str | Path) -> SweepSpec:
    """A sweep from a YAML file, or the shipped preset of that name (`lengen sweep presets`)."""
    path = Path(source)
    if not path.exists() or (path.is_dir() and preset_path(str(source)) is not None):
        # a folder named like a preset (often the preset's own sweep folder) is not a sweep file
        preset = preset_path(str(source))
        if preset is None:
            raise SweepSpecError(f"{source}: no such file, and not a sweep preset "
                                 f"({', '.join(preset_names())})")
        path = preset
    if path.is_dir():
        raise SweepSpecError(f"{path} is a directory; give a sweep file (YAML)")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SweepSpecError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    return parse_spec(data, source=text, where=str(path))


def _excluded(point: dict, rules: list[dict]) -> bool:
    return any(all(point[k] in values for k, values in rule.items()) for rule in rules)


def _short(point: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in point.items()) + "}"


def count_points(spec: SweepSpec) -> int:
    """The grid points left after `exclude`, without building or checking a config: what a
    listing needs (expand builds and validates every config, seconds for thousands of runs).
    Equals len(expand(spec)) unless two points give one config or some cannot run."""
    axes = spec.axes()
    keys = list(axes)
    return sum(1 for values in itertools.product(*(axes[k] for k in keys))
               if not _excluded(dict(zip(keys, values)), spec.exclude))


def expand(spec: SweepSpec) -> list[SweepRun]:
    """The runs of a sweep, in grid order (the first grid key varies slowest), duplicates dropped;
    SweepSpecError listing every point that cannot run."""
    kind = spec.kind
    axes = spec.axes()
    keys = list(axes)
    runs: list[SweepRun] = []
    seen: set[str] = set()
    problems: dict[str, list[dict]] = {}
    built: dict[str, str | None] = {}  # structural key -> None (builds) or the error
    for values in itertools.product(*(axes[k] for k in keys)):
        point = dict(zip(keys, values))
        if _excluded(point, spec.exclude):
            continue
        try:
            cfg = kind.config(spec.options_of(point), spec.own_options(point))
            after = None
            source = spec.sources.get(point.get(VARIANT))
            if source is not None:
                source_point = {**point, VARIANT: source}
                if _excluded(source_point, spec.exclude):
                    raise LengenError(f"it starts from variant {source!r}'s run, which `exclude` drops")
                source_cfg = kind.config(spec.options_of(source_point), spec.own_options(source_point))
                kind.start_from(cfg, source_cfg)
                after = run_id(source_cfg)
            structural = kind.structural_key(cfg)
            if structural not in built:
                try:
                    kind.check(cfg, spec.evaluation)
                    built[structural] = None
                except LengenError as e:
                    built[structural] = str(e)
            if built[structural] is not None:
                raise LengenError(built[structural])
        except LengenError as e:
            problems.setdefault(str(e), []).append(point)
            continue
        rid = run_id(cfg)
        if rid not in seen:
            seen.add(rid)
            runs.append(SweepRun(rid, point, cfg, after))
    if problems:
        lines = []
        for message, points in problems.items():
            more = f" (and {len(points) - 1} more grid points)" if len(points) > 1 else ""
            lines.append(f"grid point {_short(points[0])}{more}: {message}")
        raise SweepSpecError("\n".join(lines))
    if not runs:
        raise SweepSpecError(f"sweep {spec.name!r}: every grid point is excluded; nothing to run")
    return runs
