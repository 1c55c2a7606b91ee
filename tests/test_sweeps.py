"""Sweeps: grid expansion, run identity, invalid files, failures, kill-and-resume, backends."""

import csv
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from lengen.cli import main
from lengen.errors import LengenError
from lengen.sweeps import SweepOptions, expand, load_spec, parse_spec, run_id, run_sweep
from lengen.sweeps import runner
from lengen.sweeps.presets import preset_names
from lengen.sweeps.results import ResultsWriter, varying_columns
from lengen.sweeps.spec import count_points
from lengen.sweeps.sweep_dir import SweepDir
from lengen.che import loop
from lengen.che.config import TrainConfig
from lengen.che.loop import TrainingDiverged, train
from lengen.che.options import config_from_options
from test_lm_sweeps import TINY as TINY_LM

TINY = {"task": "parity_check", "steps": 20, "batch_size": 8, "train_length": 3, "max_length": 5,
        "eval_samples": 8, "layers": 1, "heads": 2, "d_model": 8, "d_ff": 16, "checkpoint_every": 5,
        "log_every": 5}

TIMING = {"seconds", "train_seconds", "eval_seconds"}


def write_spec(path: Path, grid: dict, fixed: dict | None = None, **top) -> Path:
    path.write_text(yaml.safe_dump({"name": "t", "grid": grid, "fixed": {**TINY, **(fixed or {})}, **top},
                                   sort_keys=False))
    return path


def read_csv(path: Path, drop=frozenset()) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


# -- expansion and identity ---------------------------------------------------------------------

def test_grid_is_the_cross_product_minus_exclusions_in_grid_order():
    spec = parse_spec({"grid": {"pe": ["none", "rope", "learned"], "positions": ["standard", "randomized"],
                                "seed": [0, 1]},
                       "fixed": TINY,
                       "exclude": [{"pe": "none", "positions": "randomized"},
                                   {"pe": ["rope", "learned"], "positions": "randomized", "seed": 1}]})
    runs = expand(spec)
    points = [tuple(r.point.values()) for r in runs]
    expected = [(pe, pos, s) for pe in ("none", "rope", "learned") for pos in ("standard", "randomized")
                for s in (0, 1)
                if not (pe == "none" and pos == "randomized") and not (pe != "none" and pos == "randomized" and s == 1)]
    assert points == expected  # 12 - 2 - 2 = 8, first key slowest
    assert len(points) == 8
    for r in runs:  # every grid value and fixed value reached the config
        assert (r.config.model.pe, r.config.positions, r.config.seed) == tuple(r.point.values())
        assert r.config.model.d_model == 8 and r.config.steps == 20


def test_variants_are_one_more_axis_with_the_runs_of_the_equivalent_grid():
    """`variants:` bundles options; the runs (ids, configs, order) are those of the grid that
    spells the same combinations out, the variant axis after the grid's keys."""
    spec = parse_spec({"grid": {"seed": [0, 1]}, "fixed": {**TINY, "pe": "rope"},
                       "variants": {"rope": {}, "r_rope": {"positions": "randomized"}, "nope": {"pe": "none"},
                                    "rnope": {"layer_pe": "rope,none", "layers": 2}},
                       "exclude": [{"variant": "nope", "seed": 1}]})
    runs = expand(spec)
    assert [tuple(r.point.values()) for r in runs] == [
        (0, "rope"), (0, "r_rope"), (0, "nope"), (0, "rnope"), (1, "rope"), (1, "r_rope"), (1, "rnope")]
    by_hand = {  # the same runs from plain grids, one per variant
        "rope": {"fixed": {**TINY, "pe": "rope"}},
        "r_rope": {"fixed": {**TINY, "pe": "rope", "positions": "randomized"}},
        "nope": {"fixed": {**TINY, "pe": "none"}},
        "rnope": {"fixed": {**TINY, "pe": "rope", "layer_pe": "rope,none", "layers": 2}},
    }
    for r in runs:
        plain = expand(parse_spec({"grid": {"seed": [r.point["seed"]]}, **by_hand[r.point["variant"]]}))
        assert [p.run_id for p in plain] == [r.run_id]
    configs = {r.point["variant"]: r.config for r in runs if r.point["seed"] == 0}
    assert configs["r_rope"].positions == "randomized" and configs["rope"].positions == "standard"
    assert configs["nope"].model.pe == "none" and configs["rnope"].model.layer_pe == ["rope", "none"]
    assert count_points(spec) == len(runs)
    assert parse_spec({**spec.to_dict(), "fixed": spec.fixed}).variants == spec.variants  # saved and read back


VARIANT_PROBLEMS = {
    "a grid option": ({"grid": {"pe": ["rope"]}, "variants": {"a": {"pe": "none"}}},
                      "variants.a.pe: also a `grid` option"),
    "an unknown option": ({"variants": {"a": {"pee": "none"}}}, "variants.a.pee: unknown `lengen train` option"),
    "a list value": ({"variants": {"a": {"lr": [1e-3, 1e-4]}}}, "variants.a.lr: a list belongs under `grid`"),
    "two alike": ({"variants": {"a": {"pe": "none"}, "b": {"pe": "none"}}}, "variants.b: the same options"),
    "an unknown variant excluded": ({"variants": {"a": {"pe": "none"}}, "exclude": [{"variant": "b"}]},
                                    "exclude[0].variant: 'b' is not a variant"),
    "not a mapping": ({"variants": ["rope", "nope"]}, "variants: must map variant names to options"),
}


@pytest.mark.parametrize("case", sorted(VARIANT_PROBLEMS))
def test_a_bad_variants_section_is_named(case):
    data, message = VARIANT_PROBLEMS[case]
    with pytest.raises(LengenError, match=re.escape(message)):
        parse_spec({"grid": {"seed": [0]}, "fixed": TINY, **data})


def test_same_config_same_id_whatever_the_key_order(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("name: a\ngrid:\n  seed: [0, 1]\n  pe: [rope, alibi]\nfixed:\n  task: parity_check\n  lr: 1e-3\n"
                 "  steps: 20\n")
    b = tmp_path / "b.yaml"
    b.write_text("fixed:\n  steps: 20\n  lr: 0.001\n  task: parity_check\ngrid:\n  pe: [alibi, rope]\n"
                 "  seed: [1, 0]\nname: b\n")
    ids_a = {(r.config.model.pe, r.config.seed): r.run_id for r in expand(load_spec(a))}
    ids_b = {(r.config.model.pe, r.config.seed): r.run_id for r in expand(load_spec(b))}
    assert ids_a == ids_b
    assert len(set(ids_a.values())) == 4


def test_any_changed_field_changes_the_id_but_the_device_does_not():
    base = TrainConfig()
    ids = {run_id(base)}
    changes = {"task": "bucket_sort", "positions": "randomized", "steps": 10001, "batch_size": 64,
               "train_length": 41, "max_length": 499, "eval_samples": 500, "eval_seed": 1, "lr": 2e-4,
               "grad_clip": 0.5, "seed": 1, "checkpoint_every": 499, "log_every": 49, "precision": "bf16",
               "position_options": {"x": 1}, "test_positions": "uniform"}
    for key, value in changes.items():
        cfg = TrainConfig(**{key: value})
        ids.add(run_id(cfg))
    for key, value in {"pe": "alibi", "num_layers": 4, "d_model": 32, "dropout": 0.0, "key_norm": True,
                       "logit_scale": "log_n", "max_position": 1024, "pe_options": {"base": 500}}.items():
        cfg = TrainConfig()
        setattr(cfg.model, key, value)
        ids.add(run_id(cfg))
    assert len(ids) == 1 + len(changes) + 8
    moved = TrainConfig(device="cuda:3")
    assert run_id(moved) == run_id(base)


def test_a_field_added_later_keeps_old_run_ids_while_it_has_its_default(monkeypatch):
    # the id an older lengen gave: the SHA-256 of the config without the new field, computed here
    cfg = TrainConfig()
    old = cfg.to_dict()
    del old["device"], old["model"]["norm"]
    expected = hashlib.sha256(json.dumps(old, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    monkeypatch.setattr(TrainConfig, "ADDED_FIELDS", {"model.norm": "post"})
    assert run_id(cfg) == expected
    cfg.model.norm = "pre"                     # a non-default value is part of the identity
    assert run_id(cfg) != expected


def test_yaml_scientific_notation_is_a_number(tmp_path):
    # YAML 1.1 reads 1e-4 (no dot) as a string; a sweep file means the number
    spec = write_spec(tmp_path / "s.yaml", {"seed": [0]}, {"lr": "1e-4"})
    (run,) = expand(load_spec(spec))
    assert run.config.lr == 0.0001 and isinstance(run.config.lr, float)


def test_rope_variants_are_grid_values():
    # head dim 8 (TINY's d_model 8 over 2 heads would leave p-RoPE's p = 0.25 no pair to rotate) and
    # 9 training tokens (FoPE keeps the frequencies with a period within them: none of TINY's 4)
    spec = parse_spec({"grid": {"pe": ["rope", "p_rope", "fope"], "pe_options": [{}, {"base": 500}]},
                       "fixed": {**TINY, "d_model": 16, "train_length": 8, "max_length": 10}})
    runs = expand(spec)
    assert sorted({r.config.model.pe for r in runs}) == ["fope", "p_rope", "rope"] and len(runs) == 6


def test_varying_columns_name_what_differs_and_flatten_options():
    spec = parse_spec({"grid": {"pe_options": [{"base": 500}, {"base": 10000}], "dropout": [0.0, 0.1],
                                "seed": [0, 1]}, "fixed": TINY})
    cols = varying_columns(expand(spec), spec.kind)
    assert cols == ["pe_options.base", "dropout"]  # option order; seed is a base column; fixed ones not shown


# -- invalid files ------------------------------------------------------------------------------

BAD_FILES = {
    "unknown option": ({"grid": {"sed": [0, 1]}}, "unknown `lengen train` option 'sed' (did you mean 'seed'?)"),
    "wrong type": ({"grid": {"steps": [10, "many"]}}, "grid.steps[1]: steps must be an integer"),
    "float for int": ({"grid": {"seed": [0]}, "fixed": {"steps": 2.5}}, "steps must be an integer"),
    "learned with float positions": (
        {"grid": {"pe": ["rope", "learned"], "positions": ["equal_mean"]}},
        "grid point {pe: learned, positions: equal_mean}"),
    "impossible value": ({"grid": {"lr": [1e-3, -1.0]}}, "grid point {lr: -1.0}: lr must be > 0"),
    "unknown task": ({"grid": {"task": ["parity_check", "parity"]}}, "grid point {task: parity}"),
    "in grid and fixed": ({"grid": {"seed": [0, 1]}, "fixed": {"seed": 3}}, "fixed.seed: also in `grid`"),
    "top-level key": ({"grid": {"seed": [0]}, "seeds": [1]}, "unknown top-level key 'seeds'"),
    "scalar in grid": ({"grid": {"seed": 3}}, "grid.seed: must be a non-empty list"),
    "exclude on a non-grid key": ({"grid": {"seed": [0, 1]}, "exclude": [{"pe": "none"}]},
                                  "exclude[0].pe: not a grid option"),
    "all excluded": ({"grid": {"seed": [0, 1]}, "exclude": [{"seed": [0, 1]}]}, "every grid point is excluded"),
    "device in the file": ({"grid": {"seed": [0]}, "fixed": {"device": "cuda"}}, "give --device to"),
    "not a mapping": ([1, 2], "the top level must be a mapping"),
    "exclude matching nothing": ({"grid": {"pe": ["rope", "alibi"]}, "exclude": [{"pe": "ropee"}]},
                                 "exclude[0].pe: 'ropee' is not one of grid.pe's values (rope, alibi)"),
    "duplicate grid value": ({"grid": {"seed": [0, 1, 0]}}, "grid.seed[2]: 0 is listed twice"),
    "nan in the grid": ({"grid": {"lr": [float("nan"), 1e-3]}}, "grid.lr[0]: lr must be a finite number, got nan"),
    "nan as text": ({"grid": {"lr": ["nan"]}}, "grid.lr[0]: lr must be a finite number, got nan"),
    "inf fixed": ({"grid": {"seed": [0]}, "fixed": {"grad_clip": float("inf")}},
                  "fixed.grad_clip: grad_clip must be a finite number, got inf"),
    "zero steps": ({"grid": {"seed": [0]}, "fixed": {"steps": 0}}, "fixed.steps: 0 steps trains nothing"),
    "p-RoPE fraction out of range": ({"grid": {"pe_options": [{"fraction": 0.5}, {"fraction": 1.5}]}},
                                     "rope option fraction must be in (0, 1]"),
    "frequency option on a non-RoPE encoding": ({"grid": {"pe": ["alibi"]}, "fixed": {"pe_options": {"fraction": 0.5}}},
                                                "unexpected keyword argument 'fraction'"),
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_invalid_sweep_file_one_message_exit_2_nothing_written(kind, tmp_path, capsys):
    data, message = BAD_FILES[kind]
    if isinstance(data, dict):  # the tiny model, less what the case puts in its grid
        fixed = {k: v for k, v in TINY.items() if k not in data["grid"]}
        data = {**data, "fixed": {**fixed, **data.get("fixed", {})}}
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(data))
    out = tmp_path / "sweep"
    assert main(["sweep", "run", str(spec), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lengen: error:") and message in err, err
    assert "Traceback" not in err
    assert not out.exists()


def test_bad_yaml_and_missing_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: {seed: [0, 1]\n")
    assert main(["sweep", "run", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["sweep", "run", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file, and not a sweep preset" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_every_problem_is_reported_at_once(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yaml", {"sed": [0], "steps": ["x"]})
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown `lengen train` option 'sed'" in err and "steps must be an integer" in err


def test_problems_of_names_types_and_values_come_in_one_round(tmp_path, capsys):
    """A key error, a type error, a duplicate and a value only a built config refuses (an unknown
    sampler): one message with all four, not one round per kind of problem."""
    spec = write_spec(tmp_path / "s.yaml", {"layres": [1], "lr": ["fast"], "seed": [0, 0],
                                            "positions": ["standard", "randomised"]})
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("lengen: error:") and len(err) == 4, err
    text = "\n".join(err)
    assert "grid.layres: unknown" in text and "grid.lr[0]:" in text and "grid.seed[1]: 0 is listed twice" in text
    assert "grid point {lr: " not in text   # the bad lr is not tried as a value
    assert "positions: randomised}" in text and "unknown position sampler 'randomised'" in text
    assert not (tmp_path / "o").exists()


def test_a_folder_that_is_not_a_sweep_is_refused(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yaml", {"seed": [0]})
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["sweep", "run", str(spec), "--out", str(out), "--no-progress"]) == 2
    assert "holds no lengen sweep" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["notes.txt"]


def test_presets_expand_to_the_papers_sizes():
    assert len(expand(load_spec("ruoss2023"))) == 15 * 11 * 3 * 10
    full = expand(load_spec("ruoss2023"))[0].config
    assert (full.steps, full.batch_size, full.train_length, full.max_length, full.eval_samples,
            full.model.max_position) == (2_000_000, 128, 40, 500, 500, 2048)
    assert len(expand(load_spec("ruoss2023-mini"))) == 90
    assert len(expand(load_spec("su2023"))) == 6 * (3 * 2 * 2 + 2 * 3 * 2) * 3 * 5
    # the GPU-sized studies (issue 25): Su's question and a paper slice at N = 40, M = 500
    gpu = expand(load_spec("su2023-gpu"))
    assert len(gpu) == 4 * 3 * 3 * 2 * 5 and {r.config.max_length for r in gpu} == {500}
    assert {(r.config.model.pe, r.config.positions, r.config.model.logit_scale) for r in gpu} == {
        (pe, pos, ls) for pe in ("rope", "sincos", "fire") for pos in ("standard", "randomized", "equal_mean")
        for ls in ("none", "log_n")}
    sliced = expand(load_spec("ruoss2023-slice"))
    assert len(sliced) == 4 * 4 * 3 * 3 and {r.config.lr for r in sliced} == {1e-4, 3e-4, 5e-4}
    assert {(r.config.train_length, r.config.max_length, r.config.eval_samples) for r in sliced} == {(40, 500, 500)}


def test_presets_listing_counts_are_their_run_counts():
    # `lengen sweep presets` counts grid points without building configs: for the presets that
    # must be the number of runs (no two points with one config, every point valid)
    for name in preset_names():
        spec = load_spec(name)
        assert count_points(spec) == len(expand(spec)), name


# -- running ------------------------------------------------------------------------------------

def test_in_process_sweep_results_and_rerun_is_identical(tmp_path):
    spec = load_spec(write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"], "seed": [0, 1]}))
    out = tmp_path / "sweep"
    counts = run_sweep(spec, out, SweepOptions(device="cpu", workers=1, progress=False))
    assert counts["done"] == 4 and counts["failed"] == 0
    rows = read_csv(out / "results.csv")
    assert [r["pe"] for r in rows] == ["rope", "rope", "alibi", "alibi"]
    for r in rows:
        ev = json.loads((out / "runs" / r["run_id"] / "eval.json").read_text())
        assert float(r["score"]) == pytest.approx(ev["score"])
        assert r["test_positions"] == "standard" and r["steps"] == "20" and r["device"] == "cpu"
    acc = read_csv(out / "accuracy_by_length.csv")
    assert len(acc) == 4 * 5 and {a["length"] for a in acc} == {"1", "2", "3", "4", "5"}
    before = (out / "results.csv").read_bytes(), (out / "accuracy_by_length.csv").read_bytes()
    counts = run_sweep(spec, out, SweepOptions(device="cpu", workers=1, progress=False))
    assert counts["done"] == 4
    assert ((out / "results.csv").read_bytes(), (out / "accuracy_by_length.csv").read_bytes()) == before


def test_a_failed_run_does_not_stop_the_sweep_and_is_retried(tmp_path, monkeypatch, capsys):
    real = loop.train

    def flaky(cfg, out, **kw):
        if cfg.seed == 1:
            raise FloatingPointError("planted failure")
        return real(cfg, out, **kw)

    monkeypatch.setattr(loop, "train", flaky)
    spec = write_spec(tmp_path / "s.yaml", {"seed": [0, 1, 2]})
    out = tmp_path / "sweep"
    assert main(["sweep", "run", str(spec), "--out", str(out), "--workers", "1", "--device", "cpu", "--group-size", "1",
                 "--no-progress"]) == 1
    assert len(read_csv(out / "results.csv")) == 2
    capsys.readouterr()
    assert main(["sweep", "status", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 done, 0 running, 1 failed, 0 pending" in text
    assert "FloatingPointError: planted failure" in text
    log = next(line for line in text.splitlines() if "log:" in line).split("log:")[1].strip()
    assert "planted failure" in Path(log).read_text()
    monkeypatch.setattr(loop, "train", real)
    assert main(["sweep", "run", str(spec), "--out", str(out), "--workers", "1", "--device", "cpu", "--group-size", "1",
                 "--no-progress"]) == 0
    assert len(read_csv(out / "results.csv")) == 3
    capsys.readouterr()
    main(["sweep", "status", str(out)])
    assert "3 done, 0 running, 0 failed, 0 pending" in capsys.readouterr().out


def test_diverged_training_is_a_failure_that_keeps_the_last_checkpoint(tmp_path):
    cfg = config_from_options({**TINY, "lr": 1e30, "grad_clip": 1e30, "steps": 40, "device": "cpu"})
    with pytest.raises(TrainingDiverged, match="diverged at step"):
        train(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "eval.json").exists()


CLI = [sys.executable, "-c", "import sys; from lengen.cli import main; sys.exit(main())"]


def _sweep_cmd(spec, out, *extra):
    return CLI + ["sweep", "run", str(spec), "--out", str(out), "--device", "cpu", "--no-progress", *extra]


def test_killed_sweep_reruns_to_the_uninterrupted_results(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"], "positions": ["standard", "randomized"]},
                      {"steps": 300, "checkpoint_every": 20, "log_every": 10, "d_model": 16, "heads": 4})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ref = tmp_path / "ref"
    subprocess.run(_sweep_cmd(spec, ref, "--workers", "2"), check=True, env=env, capture_output=True, timeout=600)

    out = tmp_path / "killed"
    proc = subprocess.Popen(_sweep_cmd(spec, out, "--workers", "2"), env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    runs = out / "runs"

    def checkpointed_step(run: Path) -> int:
        try:
            return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"]
        except (OSError, IndexError, ValueError):
            return 0

    # kill once a run is part-way through training (checkpointed, not finished)
    while time.time() < deadline:
        dirs = list(runs.glob("*")) if runs.exists() else []
        done = [d for d in dirs if (d / "eval.json").exists()]
        if any(0 < checkpointed_step(d) < 300 for d in dirs):
            break
        time.sleep(0.02)
    else:
        pytest.fail("the sweep never reached a part-finished state")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(done) < 4

    subprocess.run(_sweep_cmd(spec, out, "--workers", "2"), check=True, env=env, capture_output=True, timeout=600)
    logs = sorted((out / "logs").glob("*.log"))
    assert len(logs) == 4
    for log in logs:
        assert log.read_text().count("finished:") == 1, log.read_text()
    assert any("resume" in log.read_text() for log in logs)
    assert read_csv(out / "results.csv", TIMING) == read_csv(ref / "results.csv", TIMING)
    assert (out / "accuracy_by_length.csv").read_bytes() == (ref / "accuracy_by_length.csv").read_bytes()
    for run in (ref / "runs").iterdir():  # the resumed runs end with the uninterrupted weights
        a = torch.load(run / "checkpoint.pt", weights_only=False)["model"]
        b = torch.load(out / "runs" / run.name / "checkpoint.pt", weights_only=False)["model"]
        assert all(torch.equal(a[k], b[k]) for k in a), run.name


def test_ray_backend_gives_the_local_rows(tmp_path):
    ray = pytest.importorskip("ray")
    spec = load_spec(write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"], "seed": [0, 1]}))
    run_sweep(spec, tmp_path / "local", SweepOptions(device="cpu", workers=1, progress=False))
    try:
        counts = run_sweep(spec, tmp_path / "ray", SweepOptions(backend="ray", device="cpu", progress=False))
    finally:
        ray.shutdown()
    assert counts["done"] == 4
    assert read_csv(tmp_path / "ray" / "results.csv", TIMING) == read_csv(tmp_path / "local" / "results.csv", TIMING)


def test_precision_flag_sets_every_run_and_conflicts_are_refused(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yaml", {"seed": [0, 1]})
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "o"), "--precision", "bf16", "--dry-run"]) == 0
    ids_bf16 = capsys.readouterr().out
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    ids_fp32 = capsys.readouterr().out
    assert ids_bf16 != ids_fp32  # precision is part of a run's identity
    both = write_spec(tmp_path / "b.yaml", {"seed": [0]}, {"precision": "tf32"})
    assert main(["sweep", "run", str(both), "--out", str(tmp_path / "o"), "--precision", "bf16"]) == 2
    assert "already sets precision" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_presets_command_lists_and_shows(capsys):
    assert main(["sweep", "presets"]) == 0
    out = capsys.readouterr().out
    assert "ruoss2023  (4,950 runs)" in out and "ruoss2023-mini  (90 runs)" in out and "su2023  (2,160 runs)" in out
    assert main(["sweep", "presets", "--show", "ruoss2023-mini"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["grid"]["task"] == ["even_pairs", "cycle_navigation", "bucket_sort"]
    assert main(["sweep", "presets", "--show", "nope"]) == 2
    assert "unknown sweep preset 'nope'" in capsys.readouterr().err


def test_a_preset_name_is_the_preset_even_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    # `lengen sweep run ruoss2023-mini --out ruoss2023-mini`, rerun from the same folder to resume
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ruoss2023-mini").mkdir()
    assert len(expand(load_spec("ruoss2023-mini"))) == 90
    (tmp_path / "mine").mkdir()
    with pytest.raises(LengenError, match="mine is a directory; give a sweep file"):
        load_spec("mine")


def test_an_edited_sweep_file_keeps_the_old_one_and_names_the_runs_it_leaves_out(tmp_path, capsys):
    out = tmp_path / "o"
    first = write_spec(tmp_path / "a.yaml", {"seed": [0, 1]})
    run = ["sweep", "run", None, "--out", str(out), "--no-progress", "--workers", "1", "--device", "cpu"]
    assert main([*run[:2], str(first), *run[3:]]) == 0
    old_ids = sorted(p.name for p in (out / "runs").iterdir())
    capsys.readouterr()
    edited = write_spec(tmp_path / "b.yaml", {"seed": [0, 1]}, {"steps": 25})
    assert main([*run[:2], str(edited), *run[3:]]) == 0
    said = capsys.readouterr().out
    kept = list((out / "history").iterdir())
    assert len(kept) == 1 and f"the previous one is kept in {kept[0]}" in said
    assert (kept[0] / "sweep.yaml").read_text() == first.read_text()
    assert json.loads((kept[0] / "sweep.json").read_text())["spec"]["fixed"]["steps"] == 20
    assert f"2 runs in {out / 'runs'} (2 finished) are not in this grid" in said
    assert main(["sweep", "status", str(out)]) == 0
    status = capsys.readouterr().out
    assert "2 runs outside the grid (2 finished" in status and all(rid in status for rid in old_ids)
    assert len(read_csv(out / "results.csv")) == 2   # only the grid's runs
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    assert f"2 runs in {out / 'runs'} are not in the sweep's grid" in capsys.readouterr().out

    assert main([*run[:2], str(edited), *run[3:]]) == 0   # the same file again: nothing to keep
    assert len(list((out / "history").iterdir())) == 1 and "kept in" not in capsys.readouterr().out

    assert main(["sweep", "prune", str(out)]) == 0   # without --yes: a list, nothing deleted
    listed = capsys.readouterr().out
    assert all(rid in listed for rid in old_ids)
    assert all((out / "runs" / rid).exists() for rid in old_ids)
    assert main(["sweep", "prune", str(out), "--yes"]) == 0
    assert "deleted 2 runs outside the grid" in capsys.readouterr().out
    assert not any((out / "runs" / rid).exists() or (out / "logs" / f"{rid}.log").exists() for rid in old_ids)
    assert len(list((out / "runs").iterdir())) == 2
    assert main(["sweep", "status", str(out)]) == 0
    assert "outside the grid" not in capsys.readouterr().out


def test_dry_run_makes_the_real_runs_checks_and_writes_nothing(tmp_path, capsys, no_gpu):
    spec = write_spec(tmp_path / "s.yaml", {"seed": [0, 1]})
    out = tmp_path / "o"
    assert main(["sweep", "run", str(spec), "--out", str(out), "--dry-run", "--device", "cuda"]) == 2
    assert "torch sees no CUDA GPU" in capsys.readouterr().err and not out.exists()
    held = SweepDir(out).claim_runner()   # another runner holds the folder
    try:
        assert main(["sweep", "run", str(spec), "--out", str(out), "--dry-run", "--device", "cpu"]) == 2
        assert f"pid {os.getpid()} on" in capsys.readouterr().err
    finally:
        held.release()
    assert main(["sweep", "run", str(spec), "--out", str(out), "--dry-run", "--device", "cpu"]) == 0
    assert "sweep t: 2 runs" in capsys.readouterr().out
    assert sorted(os.listdir(out)) == ["runner.lock"]   # only what the test's own claim made


def test_the_docs_preset_table_lists_every_preset_with_its_run_count():
    text = (Path(__file__).resolve().parent.parent / "docs" / "sweeps.md").read_text()
    table = text[text.index("## Presets"):]
    listed = {name: int(runs.replace(",", "")) for name, runs in
              re.findall(r"^\| `([a-z0-9-]+)` \| ([\d,]+) \|", table, re.M)}
    assert listed == {name: count_points(load_spec(name)) for name in preset_names()}


#: per sweep kind: a sweep of 3 runs whose long table holds lengths of one and more digits, its
#: long table and the lengths each run has there, in order
LENGTHS_PAST_9 = {
    "train": ({"grid": {"seed": [0, 1, 2]}, "fixed": {**TINY, "max_length": 12}}, "accuracy_by_length.csv",
              list(range(1, 13))),
    "lm": ({"command": "lm", "grid": {"seed": [0, 1, 2]}, "fixed": TINY_LM,
            "eval": {"lengths": [100, 4, 8, 12, 16], "methods": ["rope"], "docs": 2}}, "ppl_by_length.csv",
           [4, 8, 12, 16, 100]),
}


@pytest.mark.parametrize("command", sorted(LENGTHS_PAST_9))
def test_tables_rebuilt_every_tick_hold_every_run_with_numeric_lengths(command, tmp_path, monkeypatch):
    """The results writer rebuilds while runs are unfinished (after every run here): a run must not
    be remembered as unfinished, and lengths past 9 must sort as numbers (1, 2, ..., 10, not 1, 10, 2)."""
    monkeypatch.setattr(runner, "REBUILD_EVERY_S", 0.0)
    sweep, by_length, lengths = LENGTHS_PAST_9[command]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "t", **sweep}, sort_keys=False))
    spec = load_spec(tmp_path / "s.yaml")
    counts = run_sweep(spec, tmp_path / "o", SweepOptions(device="cpu", workers=1, group_size=1, progress=False))
    assert counts["done"] == 3 and counts["results"] == 3
    assert len(read_csv(tmp_path / "o" / "results.csv")) == 3
    by_run: dict = {}
    for row in read_csv(tmp_path / "o" / by_length):
        by_run.setdefault(row["run_id"], []).append(row["length"])
    assert len(by_run) == 3
    assert all(written == [str(n) for n in lengths] for written in by_run.values()), by_run
    # a run is a row once its done file is written, and not before (an LM run's eval.json is older)
    folder = SweepDir(tmp_path / "o", spec.kind.done_file(spec.evaluation))
    done_file = folder.run_path(next(iter(by_run))) / folder.done_file
    kept = done_file.read_bytes()
    done_file.unlink()
    writer = ResultsWriter(folder, expand(spec), spec.kind, spec.evaluation)
    assert writer.write() == 2 and len(read_csv(tmp_path / "o" / by_length)) == 2 * len(lengths)
    done_file.write_bytes(kept)
    assert writer.write() == 3 and len(read_csv(tmp_path / "o" / by_length)) == 3 * len(lengths)


# -- methods2025 presets (issue 27) --------------------------------------------------------------

#: what each variant must train with, written out here (not read from the preset): encoding,
#: per-layer pattern, logit scaling, position sampler and its options
METHODS2025 = {
    "rope": ("rope", None, "none", "standard", {}),
    "r_rope": ("rope", None, "none", "randomized", {}),
    "nope": ("none", None, "none", "standard", {}),
    "fire": ("fire", None, "none", "standard", {}),
    "p_rope": ("p_rope", None, "none", "standard", {}),
    "fope": ("fope", None, "none", "standard", {}),
    "cope": ("cope", None, "none", "standard", {}),
    "rnope": ("rope", ["rope", "rope", "rope", "none"], "none", "standard", {}),
    "rnope_temperature": ("rope", ["rope", "rope", "rope", "none"], "llama4_temperature", "standard", {}),
    "ssmax": ("rope", None, "ssmax", "standard", {}),
}


@pytest.mark.parametrize("name, pose_target, seeds, tasks", [
    ("methods2025-mini", 128, 3, ["cycle_navigation", "reverse_string", "bucket_sort"]),
    ("methods2025-lm-mini", 1024, 3, [None]),
])
def test_methods2025_presets_train_each_method_as_named(name, pose_target, seeds, tasks):
    runs = expand(load_spec(name))
    expected = {**METHODS2025, "pose": ("rope", None, "none", "pose", {"target": pose_target})}
    assert len(runs) == len(expected) * seeds * len(tasks)
    seen = set()
    for run in runs:
        cfg = run.config
        got = (cfg.model.pe, cfg.model.layer_pe, cfg.model.logit_scale, cfg.positions, cfg.position_options)
        assert got == expected[run.point["variant"]], run.point
        assert cfg.model.pe_options == {} and cfg.steps == (1000 if tasks[0] else 600)
        seen.add((run.point["variant"], run.point["seed"], getattr(cfg, "task", None)))
    assert seen == {(v, s, t) for v in expected for s in range(seeds) for t in tasks}
    if tasks == [None]:   # the LM study's RoPE, NoPE and FIRE runs are fire2024-mini's own
        fire = {(r.point["pe"], r.point["seed"]): r.run_id for r in expand(load_spec("fire2024-mini"))}
        for run in runs:
            if run.point["variant"] in ("rope", "nope", "fire"):
                assert run.run_id == fire[(expected[run.point["variant"]][0], run.point["seed"])]
