"""Language-model sweeps (`command: lm`): expansion, the `eval:` section, results tables, resume
after a kill or a failed evaluation, and the report on a finished sweep."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lengen.cli import main
from lengen.sweeps import SweepOptions, expand, load_spec, run_sweep
from tiny_lm import CORPUS

TINY = {"corpus": CORPUS, "train_length": 16, "layers": 1, "heads": 2, "d_model": 16, "d_ff": 32, "batch_size": 4,
        "warmup": 2, "steps": 6, "checkpoint_every": 3, "log_every": 2, "val_windows": 4}
EVAL = {"lengths": [16, 32, 64], "methods": ["rope", "yarn:factor=4"], "docs": 2}
TIMING = {"seconds", "train_seconds", "eval_seconds"}


def write_spec(path: Path, grid: dict, fixed: dict | None = None, evaluation: dict | None = EVAL) -> Path:
    data = {"name": "lm", "command": "lm", "grid": grid, "fixed": {**TINY, **(fixed or {})}}
    if evaluation is not None:
        data["eval"] = evaluation
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def read_csv(path: Path, drop=frozenset()) -> list[dict]:
    with open(path) as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def sweep(spec, out):
    return run_sweep(load_spec(spec), out, SweepOptions(device="cpu", workers=1, progress=False))


def test_expansion_gives_lm_configs_and_the_ids_ignore_the_eval_section(tmp_path):
    runs = expand(load_spec(write_spec(tmp_path / "a.yaml", {"pe": ["rope", "alibi"], "seed": [0, 1]})))
    assert [(r.config.model.pe, r.config.seed) for r in runs] == [("rope", 0), ("rope", 1), ("alibi", 0),
                                                                   ("alibi", 1)]
    assert all(r.config.train_length == 16 and r.config.model.d_model == 16 for r in runs)
    assert len({r.run_id for r in runs}) == 4
    other = expand(load_spec(write_spec(tmp_path / "b.yaml", {"pe": ["rope", "alibi"], "seed": [0, 1]},
                                        evaluation={"lengths": [16, 128]})))
    assert [r.run_id for r in other] == [r.run_id for r in runs]  # the evaluation is not the run


def test_rope_variants_expand_and_pass_the_model_check(tmp_path):
    # expand() runs the kind's check: each model built on the meta device (FoPE's kept frequencies
    # are a shape, computed on the CPU), methods on p-RoPE only, plain evaluation of FoPE
    runs = expand(load_spec(write_spec(tmp_path / "a.yaml", {"pe": ["p_rope", "fope"]}, {"d_model": 32})))
    assert [r.config.model.pe for r in runs] == ["p_rope", "fope"]


BAD = {
    "p-RoPE fraction out of range": ({"grid": {"pe": ["rope"], "pe_options": [{"fraction": 2}]}}, "(0, 1]"),
    "frequency option on FoPE": ({"grid": {"pe": ["fope"], "pe_options": [{"fraction": 0.5}]}},
                                 "unexpected keyword argument 'fraction'"),
    "unknown eval option": ({"eval": {**EVAL, "lenghts": [16]}}, "eval.lenghts: unknown `lengen lm eval` option"),
    "option the protocol ignores": ({"eval": {**EVAL, "trials": 5}}, "eval: trials applies to protocol passkey"),
    "bad method": ({"eval": {**EVAL, "methods": ["yarn:factr=4"]}}, "factr"),
    "unknown lm option": ({"grid": {"pe": ["rope"], "task": ["reverse_string"]}},
                          "unknown `lengen lm train` option 'task'"),
    "eval in a CHE sweep": ({"command": "train", "grid": {"seed": [0]}, "fixed": {}},
                            "eval: applies to `command: lm` sweeps only"),
    "unknown command": ({"command": "clm"}, "command 'clm' is not supported; valid: train, lm, mlm"),
    "lengths type": ({"eval": {"lengths": ["long"]}}, "lengths[0] must be an integer"),
}


@pytest.mark.parametrize("kind", list(BAD))
def test_bad_lm_sweep_file_one_message_exit_2_nothing_written(kind, tmp_path, capsys):
    change, message = BAD[kind]
    data = {"name": "lm", "command": "lm", "grid": {"pe": ["rope", "alibi"]}, "fixed": TINY, "eval": EVAL}
    data.update(change)
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "sweep"
    assert main(["sweep", "run", str(spec), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lengen: error:") and message in err, err
    assert "Traceback" not in err and not out.exists()


def test_tables_rope_methods_on_rope_runs_only_and_values_match_lm_eval(tmp_path, capsys):
    out = tmp_path / "sweep"
    counts = sweep(write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"], "seed": [0, 1]}), out)
    assert counts["done"] == 4 and counts["failed"] == 0
    rows = read_csv(out / "results.csv")
    assert [(r["pe"], r["seed"]) for r in rows] == [("rope", "0"), ("rope", "1"), ("alibi", "0"), ("alibi", "1")]
    values = read_csv(out / "ppl_by_length.csv")
    assert list(values[0]) == ["run_id", "method", "length", "ppl"]
    for r in rows:
        run = out / "runs" / r["run_id"]
        last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
        assert float(r["train_loss"]) == pytest.approx(last["loss"])  # the final training loss
        mine = [(v["method"], int(v["length"])) for v in values if v["run_id"] == r["run_id"]]
        methods = ["rope", "yarn:factor=4"] if r["pe"] == "rope" else ["base"]
        assert mine == [(m, n) for m in methods for n in (16, 32, 64)]
    # the same numbers as evaluating the run on its own with `lengen lm eval`
    rope = rows[0]["run_id"]
    assert main(["lm", "eval", str(out / "runs" / rope), "--lengths", "16,32,64", "--methods", "rope,yarn:factor=4",
                 "--docs", "2", "--out", str(tmp_path / "alone"), "--no-progress"]) == 0
    alone = {(r["method"], r["length"]): float(r["ppl"]) for r in read_csv(tmp_path / "alone" / "results.csv")}
    swept = {(v["method"], v["length"]): float(v["ppl"]) for v in values if v["run_id"] == rope}
    assert swept.keys() == alone.keys()
    assert all(swept[k] == pytest.approx(alone[k], rel=1e-9) for k in alone)


def test_a_failed_evaluation_is_retried_without_retraining(tmp_path, monkeypatch):
    from lengen.lm import evaluate

    real = evaluate.evaluate_lm

    def broken(*a, **kw):
        raise RuntimeError("planted evaluation failure")

    spec = write_spec(tmp_path / "s.yaml", {"pe": ["rope"], "seed": [0]})
    out = tmp_path / "sweep"
    monkeypatch.setattr(evaluate, "evaluate_lm", broken)
    assert sweep(spec, out)["failed"] == 1
    (run,) = (out / "runs").iterdir()
    trained = (run / "checkpoint.pt").read_bytes(), (run / "metrics.jsonl").read_bytes()
    assert (run / "eval.json").exists() and not list(run.glob("sweep-eval-*.json"))
    monkeypatch.setattr(evaluate, "evaluate_lm", real)
    assert sweep(spec, out)["done"] == 1
    assert ((run / "checkpoint.pt").read_bytes(), (run / "metrics.jsonl").read_bytes()) == trained
    assert len(read_csv(out / "ppl_by_length.csv")) == 2 * 3


def test_a_changed_eval_section_re_evaluates_the_trained_runs(tmp_path):
    out = tmp_path / "sweep"
    sweep(write_spec(tmp_path / "a.yaml", {"pe": ["rope"], "seed": [0]}), out)
    (run,) = (out / "runs").iterdir()
    trained = (run / "checkpoint.pt").read_bytes()
    longer = {**EVAL, "lengths": [16, 128], "methods": ["rope"]}
    assert sweep(write_spec(tmp_path / "b.yaml", {"pe": ["rope"], "seed": [0]}, evaluation=longer), out)["done"] == 1
    assert (run / "checkpoint.pt").read_bytes() == trained
    values = read_csv(out / "ppl_by_length.csv")
    assert [(v["method"], v["length"]) for v in values] == [("rope", "16"), ("rope", "128")]


CLI = [sys.executable, "-c", "import sys; from lengen.cli import main; sys.exit(main())"]


def test_killed_lm_sweep_reruns_to_the_uninterrupted_tables(tmp_path):
    steps = 150
    spec = write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"]},
                      {"steps": steps, "checkpoint_every": 10, "log_every": 5})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def cmd(out):
        return CLI + ["sweep", "run", str(spec), "--out", str(out), "--device", "cpu", "--workers", "1",
                      "--no-progress"]

    ref = tmp_path / "ref"
    subprocess.run(cmd(ref), check=True, env=env, capture_output=True, timeout=600)
    out = tmp_path / "killed"
    proc = subprocess.Popen(cmd(out), env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def logged_step(run: Path) -> int:
        try:
            return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"]
        except (OSError, IndexError, ValueError):
            return 0

    deadline = time.time() + 300
    while time.time() < deadline:  # kill while a run is part-way through its training
        dirs = list((out / "runs").glob("*")) if (out / "runs").exists() else []
        if any(0 < logged_step(d) < steps for d in dirs):
            break
        time.sleep(0.01)
    else:
        pytest.fail("the sweep never reached a part-trained state")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "ppl_by_length.csv").exists() or len(read_csv(out / "ppl_by_length.csv")) < 2 * 3 + 3
    subprocess.run(cmd(out), check=True, env=env, capture_output=True, timeout=600)
    for log in (out / "logs").glob("*.log"):
        assert log.read_text().count("finished:") == 1, log.read_text()
    assert any("resume" in log.read_text() for log in (out / "logs").glob("*.log"))
    assert (out / "ppl_by_length.csv").read_bytes() == (ref / "ppl_by_length.csv").read_bytes()
    assert read_csv(out / "results.csv", TIMING) == read_csv(ref / "results.csv", TIMING)


def test_report_of_an_lm_sweep_averages_log_ppl_over_seeds(tmp_path, capsys):
    out = tmp_path / "sweep"
    sweep(write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"], "seed": [0, 1]}), out)
    assert main(["report", str(out)]) == 0
    assert "| RoPE + yarn:factor=4 |" in capsys.readouterr().out
    import pandas as pd

    runs = pd.read_csv(out / "results.csv")
    values = pd.read_csv(out / "ppl_by_length.csv").merge(runs[["run_id", "pe"]], on="run_id")
    table = pd.read_csv(out / "report" / "lm_table.csv")
    for (pe, method, length), group in values.groupby(["pe", "method", "length"]):
        logs = [math.log(p) for p in group["ppl"]]
        mean = sum(logs) / len(logs)
        std = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))   # the sample std (ddof 1)
        label = {"rope": "RoPE", "alibi": "ALiBi"}[pe] + ("" if method in ("rope", "base") else f" + {method}")
        cell = table[(table["variant"] == label) & (table["length"] == length)]
        assert len(cell) == 1 and cell["mean"].item() == pytest.approx(mean) and cell["std"].item() == pytest.approx(std)
        assert cell["n"].item() == 2
    assert (out / "report" / "index.html").exists() and (out / "report" / "ppl_vs_length.png").stat().st_size > 0

    # --versus: ALiBi - RoPE in log ppl, paired by seed, per length, from the CSV by hand
    capsys.readouterr()
    assert main(["report", str(out), "--versus", "RoPE"]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    headers = lines[0].strip("| ").split(" | ")[1:]
    assert headers[-1] == "validation (end of training)"
    lengths = [int(h.split()[0]) for h in headers[:-1]]
    alibi = next(line for line in lines if line.startswith("| ALiBi |")).strip("| ").split(" | ")[1:]
    by = {(r.pe, r.seed, r.length): math.log(r.ppl) for r in values.merge(runs[["run_id", "seed"]], on="run_id")
          .query("method in ['rope', 'base']").itertuples()}
    for length, text in zip(lengths, alibi):
        diffs = [by[("alibi", s, length)] - by[("rope", s, length)] for s in (0, 1)]
        assert text.startswith(f"{sum(diffs) / 2:+.3f} ["), (length, text)
    val = {(r.pe, r.seed): math.log(r.val_ppl) for r in runs.itertuples()}   # each run's own validation
    diffs = [val[("alibi", s)] - val[("rope", s)] for s in (0, 1)]
    assert alibi[-1].startswith(f"{sum(diffs) / 2:+.3f} ["), alibi[-1]
    assert "a win is a lower perplexity" in printed


def test_ray_backend_gives_the_local_tables(tmp_path):
    ray = pytest.importorskip("ray")
    spec = load_spec(write_spec(tmp_path / "s.yaml", {"pe": ["rope", "alibi"]}))
    run_sweep(spec, tmp_path / "local", SweepOptions(device="cpu", workers=1, progress=False))
    try:
        counts = run_sweep(spec, tmp_path / "ray", SweepOptions(backend="ray", device="cpu", progress=False))
    finally:
        ray.shutdown()
    assert counts["done"] == 2
    assert read_csv(tmp_path / "ray" / "results.csv", TIMING) == read_csv(tmp_path / "local" / "results.csv", TIMING)
    assert (tmp_path / "ray" / "ppl_by_length.csv").read_bytes() == (tmp_path / "local" / "ppl_by_length.csv").read_bytes()


def test_ruler_sweep_keeps_tasks_apart_and_the_report_averages_them(tmp_path):
    evaluation = {"protocol": "ruler", "lengths": [400], "methods": ["rope"], "trials": 2,
                  "tasks": ["niah_single", "vt"]}
    out = tmp_path / "sweep"
    assert sweep(write_spec(tmp_path / "s.yaml", {"pe": ["rope"], "seed": [0, 1]}, evaluation=evaluation),
                 out)["done"] == 2
    values = read_csv(out / "ppl_by_length.csv")
    assert list(values[0]) == ["run_id", "method", "task", "length", "accuracy"]
    assert sorted({v["task"] for v in values}) == ["niah_single", "vt"] and len(values) == 2 * 2
    assert all(v["accuracy"] != "" for v in values)  # 400 tokens hold every prompt
    assert main(["report", str(out)]) == 0
    import pandas as pd

    cell = pd.read_csv(out / "report" / "lm_table.csv")
    per_run = {}
    for v in values:
        per_run.setdefault(v["run_id"], []).append(float(v["accuracy"]))
    means = [sum(a) / len(a) for a in per_run.values()]
    assert cell["mean"].item() == pytest.approx(sum(means) / 2) and cell["n"].item() == 2


def test_an_unknown_ruler_task_is_refused_before_anything_runs(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yaml", {"pe": ["rope"]}, evaluation={"protocol": "ruler", "tasks": ["nope"]})
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "nope" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_reuse_copies_the_runs_of_the_same_configuration_from_another_sweep(tmp_path, capsys):
    first = tmp_path / "first"
    assert sweep(write_spec(tmp_path / "a.yaml", {"pe": ["rope"]}), first)["done"] == 1
    spec = write_spec(tmp_path / "b.yaml", {"pe": ["rope", "alibi"]}, evaluation={"lengths": [16, 32]})
    rope = next(r.run_id for r in expand(load_spec(spec)) if r.config.model.pe == "rope")
    (first / "runs" / rope / "marker").write_text("from the first sweep")
    trained_at = (first / "runs" / rope / "checkpoint.pt").stat().st_mtime_ns
    second = tmp_path / "second"
    counts = run_sweep(load_spec(spec), second, SweepOptions(device="cpu", workers=1, progress=False,
                                                             reuse=str(first)))
    assert counts["done"] == 2
    assert "--reuse: 1 runs of the same configuration copied" in capsys.readouterr().out
    # copied, not trained again (training the same seed anew would give the same numbers): the
    # first sweep's marker is there and the checkpoint was not rewritten
    assert (second / "runs" / rope / "marker").read_text() == "from the first sweep"
    assert (second / "runs" / rope / "checkpoint.pt").stat().st_mtime_ns == trained_at
    rows = {r["pe"]: r for r in read_csv(second / "results.csv")}
    assert rows["rope"]["train_loss"] == read_csv(first / "results.csv")[0]["train_loss"]
    lengths = {r["length"] for r in read_csv(second / "ppl_by_length.csv") if r["run_id"] == rope}
    assert lengths == {"16", "32"}   # evaluated with this sweep's eval section
    # a folder that is not a sweep: one line, exit 2, nothing written
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "third"), "--device", "cpu",
                 "--reuse", str(tmp_path / "nowhere"), "--no-progress"]) == 2
    assert "--reuse" in capsys.readouterr().err and not (tmp_path / "third").exists()
