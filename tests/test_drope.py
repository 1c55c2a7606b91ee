"""DroPE (Gelberg et al. 2025): `lengen lm train --init-from` (a finished RoPE run's weights, the
encoding dropped, a fresh optimiser), the logit scale beta = 1 + c ln(T / L) for NoPE models, its
fit on held-out text (`lengen lm eval --drope-scale`), and sweeps whose variants start from others'
runs (`init_from:`)."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from guards import refused
from lengen.cli import main
from lengen.lm.evaluate import fit_drope_scale, load_run, minimise_1d
from lengen.models.attention import AttentionContext, SelfAttention
from lengen.models.config import ModelConfig
from lengen.models.logit_scaling import logit_scale_factor
from lengen.encodings.none import NoEncoding
from lengen.sweeps import SweepOptions, expand, load_spec, run_sweep
from lengen.sweeps.spec import SweepSpecError
from tiny_lm import CORPUS, TINY

CLI = [sys.executable, "-c", "import sys; from lengen.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A finished tiny RoPE run (6 steps)."""
    out = tmp_path_factory.mktemp("drope") / "rope"
    assert main(["lm", "train", "--pe", "rope", "--steps", "6", "--out", str(out), *TINY]) == 0
    return out


def drope(source: Path, out: Path, *extra) -> list[str]:
    # TINY repeats the shape flags: given, they must equal the source's (they do)
    return ["lm", "train", "--init-from", str(source), "--pe", "none", "--steps", "4", "--out", str(out), *TINY, *extra]


# -- the logit scale ---------------------------------------------------------------------------
def nope_cfg(c=None, m=8) -> ModelConfig:
    cfg = ModelConfig(num_layers=1, num_heads=2, d_model=8, d_ff=16, causal=True, pe="none", train_tokens=m)
    if c is not None:
        cfg.logit_scale, cfg.logit_scale_options = "drope", {"c": c}
    return cfg


@pytest.mark.parametrize("n, expected", [(8, 1.0), (4, 1.0), (1, 1.0), (16, 1 + 0.3 * math.log(2)),
                                         (64, 1 + 0.3 * math.log(8))])
def test_beta_is_one_plus_c_log_of_the_length_ratio_and_one_up_to_the_training_length(n, expected):
    pos = torch.arange(n)[None]
    assert logit_scale_factor(nope_cfg(0.3), pos, n) == pytest.approx(expected, abs=1e-12)
    # a padded stack member's key count (a 0-d tensor) gives the same
    assert float(logit_scale_factor(nope_cfg(0.3), pos, torch.tensor(n))) == pytest.approx(expected, abs=1e-6)


def test_c_equal_to_one_over_log_m_is_log_n_clipped_and_the_default():
    # ln n / ln m = 1 + ln(n / m) / ln m: the log-n scaling is the scale at c = 1 / ln m
    m = 8
    log_n = ModelConfig(num_layers=1, num_heads=2, d_model=8, d_ff=16, causal=True, pe="none", train_tokens=m,
                        logit_scale="log_n_clipped")
    default = nope_cfg(m=m)
    default.logit_scale = "drope"
    for n in (3, 8, 40):
        pos = torch.arange(n)[None]
        want = max(1.0, math.log(n) / math.log(m))
        assert logit_scale_factor(nope_cfg(1 / math.log(m), m), pos, n) == pytest.approx(want, abs=1e-12)
        assert logit_scale_factor(default, pos, n) == pytest.approx(want, abs=1e-12)
        assert logit_scale_factor(log_n, pos, n) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("c, T", [(0.0, 24), (0.7, 24), (0.7, 8), (0.7, 5)])
def test_beta_multiplies_q_dot_k_exactly(c, T):
    # the attention probabilities against softmax(beta q.k / sqrt(d) + causal mask) written out
    torch.manual_seed(0)
    cfg = nope_cfg(c, m=8)
    attn = SelfAttention(cfg, 0, NoEncoding(cfg))
    q, k = torch.randn(1, 2, T, 4), torch.randn(1, 2, T, 4)
    pos = torch.arange(T)[None]
    ctx = AttentionContext(pe_state=None, pos_q=pos, pos_k=pos, causal=True)
    beta = 1 + c * math.log(T / 8) if T > 8 else 1.0
    for h in range(2):
        for i in range(T):
            logits = [beta * float(q[0, h, i] @ k[0, h, j]) / 2.0 for j in range(i + 1)]  # sqrt(4) = 2
            top = max(logits)
            z = sum(math.exp(x - top) for x in logits)
            want = [math.exp(x - top) / z for x in logits] + [0.0] * (T - i - 1)
            got = attn.attention_probs(q, k, ctx)[0, h, i].tolist()
            assert got == pytest.approx(want, abs=1e-6)


def test_a_negative_coefficient_is_refused(tmp_path, capsys):
    err = refused(["lm", "train", "--pe", "none", "--logit-scale", "drope", "--logit-scale-option", "c=-0.1",
                   "--steps", "1", "--out", str(tmp_path / "r"), *TINY], capsys)
    assert "c must be >= 0" in err and not (tmp_path / "r").exists()


# -- the fit -----------------------------------------------------------------------------------
@pytest.mark.parametrize("best", [0.337, 0.0, 1.0, 0.9])
def test_the_1d_search_finds_the_minimum_of_a_parabola_in_range(best):
    calls = []

    def f(x):
        calls.append(x)
        return (x - best) ** 2

    x = minimise_1d(f, 0.0, 1.0)
    assert abs(x - best) < 0.005 and len(calls) == len(set(calls)) <= 11 + 2 + 8


def test_the_search_keeps_the_best_grid_point_of_a_curve_with_two_dips():
    # a narrow dip at 0.8 deeper than a wide one at 0.2: the grid sees both
    def f(x):
        return min((x - 0.2) ** 2 + 0.01, 10 * (x - 0.8) ** 2)

    assert abs(minimise_1d(f, 0.0, 1.0) - 0.8) < 0.01


# -- --init-from ---------------------------------------------------------------------------------
def test_init_from_starts_from_the_source_weights_without_its_encoding(source, tmp_path):
    out = tmp_path / "d0"
    argv = drope(source, out)
    argv[argv.index("--steps") + 1] = "0"   # the weights at step 0
    assert main(argv) == 0
    src = torch.load(source / "checkpoint.pt", weights_only=False)
    got = torch.load(out / "checkpoint.pt", weights_only=False)
    assert got["step"] == 0
    assert set(got["model"]) <= set(src["model"])
    for k, v in got["model"].items():
        assert torch.equal(v, src["model"][k]), k
    dropped = set(src["model"]) - set(got["model"])   # the RoPE encoding's own state, if any
    assert all(k.startswith("decoder.pe.") for k in dropped)
    cfg = json.loads((out / "config.json").read_text())
    src_cfg = json.loads((source / "config.json").read_text())
    assert cfg["init_from"]["step"] == 6 and cfg["init_from"]["pe"] == "rope"
    assert len(cfg["init_from"]["run_id"]) == 12
    assert cfg["model"]["pe"] == "none" and cfg["train_length"] == src_cfg["train_length"] == 16
    assert got["optimizer"]["state"] == {}   # a fresh optimiser: no moments carried over


def test_init_from_takes_the_shape_and_data_from_the_source(source, tmp_path):
    out = tmp_path / "d"
    assert main(["lm", "train", "--init-from", str(source), "--pe", "none", "--steps", "2", "--batch-size", "4",
                 "--warmup", "1", "--val-windows", "4", "--out", str(out), "--no-progress"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["model"]["num_layers"], cfg["model"]["d_model"], cfg["train_length"], cfg["corpus"]) == (1, 16, 16, CORPUS)


@pytest.mark.parametrize("extra, says", [(["--layers", "2"], "num_layers 1 -> 2"),
                                         (["--train-length", "32"], "train_length 16 -> 32")])
def test_a_shape_other_than_the_source_s_is_refused_before_training(source, tmp_path, capsys, extra, says):
    out = tmp_path / "d"
    err = refused(drope(source, out, *extra), capsys)
    assert says in err and not out.exists()


def test_init_from_needs_pe_none(source, tmp_path, capsys):
    argv = drope(source, tmp_path / "d")
    argv[argv.index("none")] = "alibi"
    assert "give --pe none" in refused(argv, capsys)


def test_a_source_that_is_not_a_finished_rope_run_is_refused(source, tmp_path, capsys):
    alibi = tmp_path / "alibi"
    assert main(["lm", "train", "--pe", "alibi", "--steps", "2", "--out", str(alibi), *TINY]) == 0
    assert "DroPE drops RoPE" in refused(drope(alibi, tmp_path / "a"), capsys)
    (tmp_path / "empty").mkdir()
    assert "not a lengen run directory" in refused(drope(tmp_path / "empty", tmp_path / "b"), capsys)
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "config.json").write_text("{not json")
    assert "damaged" in refused(drope(damaged, tmp_path / "c"), capsys)
    # another run's checkpoint copied in
    foreign = tmp_path / "foreign"
    assert main(["lm", "train", "--pe", "rope", "--steps", "2", "--seed", "3", "--out", str(foreign), *TINY]) == 0
    (foreign / "checkpoint.pt").write_bytes((source / "checkpoint.pt").read_bytes())
    assert "another run's checkpoint" in refused(drope(foreign, tmp_path / "e"), capsys)
    (foreign / "checkpoint.pt").write_bytes(b"truncated")
    assert "damaged" in refused(drope(foreign, tmp_path / "f"), capsys)
    # a recalibrated run is not a source in turn
    assert main(drope(source, tmp_path / "once")) == 0
    assert "itself a recalibrated run" in refused(drope(tmp_path / "once", tmp_path / "g"), capsys)
    for name in "abcefg":
        assert not (tmp_path / name).exists()


def test_an_unfinished_source_is_refused(source, tmp_path, capsys):
    part = tmp_path / "part"
    assert main(["lm", "train", "--pe", "rope", "--steps", "3", "--out", str(part), *TINY]) == 0
    cfg = json.loads((part / "config.json").read_text())
    cfg["steps"] = 9  # as if the run had been started for 9 steps and stopped at its checkpoint of step 3
    (part / "config.json").write_text(json.dumps(cfg))
    ckpt = torch.load(part / "checkpoint.pt", weights_only=False)
    ckpt["config"]["steps"] = 9
    torch.save(ckpt, part / "checkpoint.pt")
    assert "not finished (step 3 of 9)" in refused(drope(part, tmp_path / "d"), capsys)


def test_a_recalibration_killed_mid_run_resumes_to_the_uninterrupted_weights(source, tmp_path):
    steps = 300
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = drope(source, tmp_path / "ref", "--checkpoint-every", "5")
    argv[argv.index("--steps") + 1] = str(steps)
    ref = tmp_path / "ref"
    subprocess.run(CLI + argv, check=True, env=env, capture_output=True, timeout=600)
    out = tmp_path / "killed"
    argv[argv.index("--out") + 1] = str(out)
    proc = subprocess.Popen(CLI + argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:   # kill after a checkpoint, before the end
        try:
            step = torch.load(out / "checkpoint.pt", weights_only=False)["step"]
        except Exception:  # noqa: BLE001 - not written yet, or mid-write
            step = 0
        if 0 < step < steps - 20:
            break
        time.sleep(0.02)
    else:
        pytest.fail("the run never reached a part-trained state")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "eval.json").exists()
    subprocess.run(CLI + argv, check=True, env=env, capture_output=True, timeout=600)
    a = torch.load(ref / "checkpoint.pt", weights_only=False)
    b = torch.load(out / "checkpoint.pt", weights_only=False)
    assert a["step"] == b["step"] == steps
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert json.loads((out / "config.json").read_text())["init_from"] == \
        json.loads((ref / "config.json").read_text())["init_from"]


# -- evaluation with the scale -----------------------------------------------------------------
def test_the_scaled_rows_equal_plain_nope_up_to_the_training_length_and_at_c_zero(source, tmp_path, capsys):
    run = tmp_path / "d"
    assert main(drope(source, run)) == 0
    common = ["lm", "eval", str(run), "--methods", "base", "--lengths", "8,16,32,64", "--docs", "2", "--no-progress"]
    assert main([*common, "--drope-scale", "0.5", "--out", str(tmp_path / "e")]) == 0
    rows = json.loads((tmp_path / "e" / "results.json").read_text())["rows"]
    base = {r["length"]: r["ppl"] for r in rows if r["method"] == "base"}
    scaled = {r["length"]: r["ppl"] for r in rows if r["method"] == "drope_scale:c=0.5"}
    assert scaled[8] == base[8] and scaled[16] == base[16]      # beta = 1 at T <= L (16)
    assert scaled[32] != base[32] and scaled[64] != base[64]
    assert main([*common, "--drope-scale", "0", "--out", str(tmp_path / "z")]) == 0
    rows = json.loads((tmp_path / "z" / "results.json").read_text())["rows"]
    assert {r["length"]: r["ppl"] for r in rows if r["method"] == "drope_scale:c=0"} == base


def test_the_fit_uses_held_out_sequences_and_picks_the_least_nll_it_tried(source, tmp_path):
    run = tmp_path / "d"
    assert main(drope(source, run, "--val-fraction", "0.7")) == 0   # two validation documents
    assert main(["lm", "eval", str(run), "--methods", "base", "--lengths", "16,32,64", "--docs", "1",
                 "--drope-scale", "fit", "--fit-docs", "1", "--out", str(tmp_path / "e"), "--no-progress"]) == 0
    meta = json.loads((tmp_path / "e" / "results.json").read_text())
    fit = meta["drope_scale"]
    assert fit["lengths"] == [32, 64] and fit["sequences"] == 1 and meta["docs_used"] == 1
    tried = dict(map(tuple, fit["searched"]))
    assert fit["c"] in tried and tried[fit["c"]] == min(tried.values()) and fit["nll_at_0"] == tried[0.0]
    assert all(0.0 <= c <= 1.0 for c in tried)
    # the fit's value at its c is the mean NLL over 32 and 64 of the two sequences after the reported two
    from lengen.data import load_corpus, long_sequences
    from lengen.lm.evaluate import drope_scaled
    from lengen.protocols import perplexity_vs_length
    cfg, model = load_run(run)
    corpus = load_corpus(cfg.corpus, cfg.val_fraction)
    held_out = long_sequences(corpus.val_docs, 65, 2, corpus.eos)[1:]
    assert len(held_out) == 1
    with drope_scaled(model, fit["c"]):
        want = sum(perplexity_vs_length(model.nll_fn(), held_out, [T])[0].nll for T in (32, 64)) / 2
    assert fit["nll"] == pytest.approx(want, rel=1e-9)
    rows = [r for r in meta["rows"] if r["method"] == "drope_scale:c=fit"]
    assert {r["c"] for r in rows} == {fit["c"]}
    # nothing past the training length: c = 0, nothing fitted
    assert fit_drope_scale(model, held_out, [8, 16], 16)["c"] == 0.0


def test_the_scale_is_refused_for_a_rope_run_and_other_protocols(source, tmp_path, capsys):
    assert "--drope-scale is for models without positional encoding" in refused(
        ["lm", "eval", str(source), "--lengths", "16,32", "--drope-scale", "fit", "--no-progress"], capsys)
    assert "fit or a number" in refused(["lm", "eval", str(source), "--drope-scale", "-1"], capsys)
    assert "perplexity protocols" in refused(["lm", "eval", str(source), "--protocol", "passkey",
                                              "--drope-scale", "0.1"], capsys)


# -- sweeps --------------------------------------------------------------------------------------
TINY_FIXED = {"corpus": CORPUS, "train_length": 16, "layers": 1, "heads": 2, "d_model": 16, "d_ff": 32,
              "batch_size": 4, "warmup": 2, "steps": 6, "checkpoint_every": 3, "log_every": 2, "val_windows": 4,
              "pe": "rope", "val_fraction": 0.7}


def spec_file(tmp_path: Path, variants: dict, evaluation: dict | None = None, grid=None) -> Path:
    data = {"name": "drope", "command": "lm", "grid": grid or {"seed": [0, 1]}, "fixed": TINY_FIXED,
            "variants": variants,
            "eval": evaluation or {"lengths": [16, 32], "methods": ["rope"], "docs": 1, "drope_scale": "fit",
                                   "fit_docs": 1}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


VARIANTS = {"drope": {"pe": "none", "init_from": "rope", "steps": 2, "warmup": 1}, "rope": {}}


def test_a_variant_starts_from_the_same_seed_s_run_of_its_source_variant(tmp_path):
    runs = expand(load_spec(spec_file(tmp_path, VARIANTS)))
    by = {(r.point["seed"], r.point["variant"]): r for r in runs}
    for seed in (0, 1):
        d, r = by[(seed, "drope")], by[(seed, "rope")]
        assert d.after == r.run_id and r.after is None
        assert d.config.init_from == {"run_id": r.run_id, "step": 6, "pe": "rope"}
    # the plain runs keep the ids they have without any init_from
    plain = expand(load_spec(spec_file(tmp_path, {"rope": {}})))
    assert {r.run_id for r in plain} == {by[(s, "rope")].run_id for s in (0, 1)}


@pytest.mark.parametrize("variants, says", [
    ({"drope": {"pe": "none", "init_from": "nope"}, "rope": {}}, "must name another variant"),
    ({"drope": {"pe": "none", "init_from": "drope"}, "rope": {}}, "must name another variant"),
    ({"a": {"pe": "none", "init_from": "b"}, "b": {"pe": "none", "init_from": "rope"}, "rope": {}}, "starts from 'rope' itself"),
    ({"drope": {"pe": "none", "init_from": "rope", "d_model": 32}, "rope": {}}, "d_model 16 -> 32"),
    ({"drope": {"init_from": "rope", "steps": 2}, "rope": {}}, "give --pe none"),
])
def test_a_bad_init_from_is_refused_before_anything_runs(tmp_path, variants, says):
    with pytest.raises(SweepSpecError, match=says):
        expand(load_spec(spec_file(tmp_path, variants)))


def test_the_init_from_runs_run_after_their_sources_and_the_table_names_them(tmp_path):
    out = tmp_path / "sweep"
    spec = load_spec(spec_file(tmp_path, VARIANTS))   # the dependent variant first in grid order
    counts = run_sweep(spec, out, SweepOptions(device="cpu", workers=1, progress=False))
    assert counts["done"] == 4 and counts["failed"] == 0
    import csv
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [r["init_from"] for r in rows] == ["rope@6", "", "rope@6", ""]
    # the fitted c of each NoPE run, as its evaluation recorded it; none for the RoPE runs
    for r in rows:
        done = json.loads(next((out / "runs" / r["run_id"]).glob("sweep-eval-*/results.json")).read_text())
        assert r["drope_c"] == ("" if r["pe"] == "rope" else str(done["drope_scale"]["c"]))
    by_len = list(csv.DictReader(open(out / "ppl_by_length.csv")))
    nope_ids = {r["run_id"] for r in rows if r["pe"] == "none"}
    assert {r["method"] for r in by_len if r["run_id"] in nope_ids} == {"base", "drope_scale:c=fit"}
    assert {r["method"] for r in by_len if r["run_id"] not in nope_ids} == {"rope"}   # the scale: NoPE only
    # the run started from its source in this folder: its step-0 weights were the source's
    for run in expand(spec):
        if run.after is not None:
            log = (out / "logs" / f"{run.run_id}.log").read_text()
            assert "finished" in log and (out / "runs" / run.after / "eval.json").exists()


def test_an_init_from_run_whose_source_failed_fails_saying_so(tmp_path, monkeypatch):
    import lengen.sweeps.kinds.lm as kind

    real = kind.train_lm

    def broken(cfg, path, **kw):
        if cfg.init_from is None:
            raise RuntimeError("planted failure")
        return real(cfg, path, **kw)

    monkeypatch.setattr(kind, "train_lm", broken)
    out = tmp_path / "sweep"
    counts = run_sweep(load_spec(spec_file(tmp_path, VARIANTS, grid={"seed": [0]})), out,
                       SweepOptions(device="cpu", workers=1, progress=False))
    assert counts["failed"] == 2
    failures = [json.loads(p.read_text())["error"] for p in (out / "state").glob("*.failure.json")]
    assert any("planted failure" in e for e in failures)
    assert any("not a lengen run directory" in e or "not finished" in e for e in failures)


def test_one_worker_runs_each_dependent_right_after_its_source_and_parallel_workers_in_two_waves():
    from types import SimpleNamespace as Run

    from lengen.sweeps.runner import dependency_waves

    runs = [Run(run_id="d0", after="r0"), Run(run_id="r0", after=None), Run(run_id="n0", after=None),
            Run(run_id="d1", after="r1"), Run(run_id="r1", after=None), Run(run_id="x", after="done-already")]
    ids = [[r.run_id for r in wave] for wave in dependency_waves(runs, sequential=True)]
    assert ids == [["r0", "d0", "n0", "r1", "d1", "x"], []]
    ids = [[r.run_id for r in wave] for wave in dependency_waves(runs, sequential=False)]
    assert ids == [["r0", "n0", "r1", "x"], ["d0", "d1"]]
