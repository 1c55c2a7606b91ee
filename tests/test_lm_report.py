"""The language-model report (FIRE paper, Li et al. 2023, §4.1): aggregations on hand-made tables
with the expected numbers written by hand, the files it writes, and the page in a browser."""

import math
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
from guards import chromium

from lengen.reports import lm as lm_report
from lengen.reports import lm_aggregate as lm
from lengen.reports.load import SweepData

L = math.log


def hand_runs(**extra) -> pd.DataFrame:
    """rope and fire, 2 seeds each, trained at 128 tokens; d_model constant."""
    rows = []
    for pe in ("rope", "fire"):
        for seed in (0, 1):
            rows.append({"run_id": f"{pe}{seed}", "pe": pe, "seed": seed, "lr": 1e-3, "train_length": 128,
                         "steps": 100, "d_model": 64, "done": True, "train_loss": 1.0, "val_ppl": 3.0,
                         "seconds": 10.0 + seed, **extra})
    return pd.DataFrame(rows)


#: (run_id, method) -> {length: ppl}
PPL = {
    ("rope0", "rope"): {128: 4.0, 512: 20.0}, ("rope1", "rope"): {128: 5.0, 512: 30.0},
    ("rope0", "pi:factor=4"): {128: 4.5, 512: 8.0}, ("rope1", "pi:factor=4"): {128: 5.5, 512: 10.0},
    ("fire0", "base"): {128: 4.2, 512: 9.0}, ("fire1", "base"): {128: 4.8, 512: 9.0},
}


def hand_values(ppl=PPL) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": rid, "method": m, "length": length, "ppl": v}
                         for (rid, m), d in ppl.items() for length, v in d.items()])


# expected cells, by hand: mean and sample std (ddof 1) of the natural log of the perplexities;
# with two values a, b the sample std is |a - b| / sqrt(2)
R2 = math.sqrt(2)
EXPECTED = {  # variant -> {length: (mean, std)}
    "RoPE": {128: ((L(4) + L(5)) / 2, (L(5) - L(4)) / R2), 512: ((L(20) + L(30)) / 2, (L(30) - L(20)) / R2)},
    "RoPE + pi:factor=4": {128: ((L(4.5) + L(5.5)) / 2, (L(5.5) - L(4.5)) / R2),
                           512: ((L(8) + L(10)) / 2, (L(10) - L(8)) / R2)},
    "FIRE": {128: ((L(4.2) + L(4.8)) / 2, (L(4.8) - L(4.2)) / R2), 512: (L(9), 0.0)},
}
T_975_1 = 12.7062047  # Student's t, 97.5% quantile, 1 degree of freedom (a printed table)


def test_labels_are_the_papers_names():
    assert [lm.encoding_label(p) for p in ("none", "rope", "alibi", "kerple", "t5", "fire", "fire_shared")] == \
        ["NoPE", "RoPE", "ALiBi", "Kerple", "T5's RPE", "FIRE", "FIRE-S"]
    assert lm.encoding_label("kerple_log") == "Kerple (log)"
    assert lm.encoding_label("my_encoding") == "my_encoding"  # a name lengen does not know: as given
    assert lm.variant_label("rope", "rope") == "RoPE"
    assert lm.variant_label("alibi", "base") == "ALiBi"
    assert lm.variant_label("rope", "yarn:factor=8") == "RoPE + yarn:factor=8"
    assert lm.variant_label("fire", "base", {"lr": 0.001, "d_model": 64.0}) == "FIRE, lr=0.001, d_model=64"


def test_rope_variants_get_their_papers_names():
    assert lm.encoding_label("p_rope") == "p-RoPE" and lm.encoding_label("fope") == "FoPE"
    # p-RoPE given as a rope option next to plain RoPE runs: the option tells the rows apart
    rows = [{"run_id": f"r{p}", "pe": "rope", "seed": 0, "pe_options.fraction": p} for p in (np.nan, 0.25)]
    runs = pd.DataFrame(rows + [{"run_id": "f", "pe": "fope", "seed": 0, "pe_options.fraction": np.nan}])
    assert lm.option_columns(runs) == ["pe_options.fraction"]
    assert lm.variant_label("rope", "rope", {"pe_options.fraction": 0.25}) == "RoPE, fraction=0.25"
    assert lm.variant_label("fope", "base", {"pe_options.fraction": np.nan}) == "FoPE"


def test_table_is_mean_and_std_of_log_perplexity_over_seeds():
    mean, std, n = lm.table(hand_runs(), hand_values(), "ppl")
    assert list(mean.index) == ["RoPE", "RoPE + pi:factor=4", "FIRE"]  # encodings in order, plain first
    assert list(mean.columns) == [128, 512]
    for variant, cells in EXPECTED.items():
        for length, (m, s) in cells.items():
            assert mean.loc[variant, length] == pytest.approx(m, rel=1e-12), (variant, length)
            assert std.loc[variant, length] == pytest.approx(s, rel=1e-12, abs=1e-15), (variant, length)
            assert n.loc[variant, length] == 2
    # the long form says the same, with the encoding and the method as evaluated
    c = lm.cells(hand_runs(), hand_values(), "ppl").set_index(["variant", "length"])
    m, s = EXPECTED["RoPE"][512]
    half = T_975_1 * s / R2
    assert c.loc[("RoPE", 512), "low"] == pytest.approx(m - half) and c.loc[("RoPE", 512), "high"] == pytest.approx(m + half)
    assert c.loc[("RoPE + pi:factor=4", 512), "method"] == "pi:factor=4"
    assert c.loc[("FIRE", 512), "encoding"] == "FIRE" and c.loc[("FIRE", 512), "planned"] == 2


def test_accuracy_is_averaged_as_is():
    values = pd.DataFrame([{"run_id": rid, "method": "base" if rid.startswith("fire") else "rope", "length": 256,
                            "accuracy": a} for rid, a in (("rope0", 0.2), ("rope1", 0.4), ("fire0", 1.0),
                                                          ("fire1", 0.9))])
    mean, std, _ = lm.table(hand_runs(), values, "accuracy")
    assert mean.loc["RoPE", 256] == pytest.approx(0.3) and std.loc["RoPE", 256] == pytest.approx(0.2 / R2)
    assert mean.loc["FIRE", 256] == pytest.approx(0.95) and std.loc["FIRE", 256] == pytest.approx(0.1 / R2)
    best = lm.best_cells(mean, "accuracy")
    assert bool(best.loc["FIRE", 256]) and not bool(best.loc["RoPE", 256])  # highest accuracy


def test_best_per_column_is_the_lowest_log_perplexity_and_ties_are_all_best():
    mean, _, _ = lm.table(hand_runs(), hand_values(), "ppl")
    best = lm.best_cells(mean, "ppl")
    # 128: RoPE log(20)/2 < FIRE log(20.16)/2 < PI log(24.75)/2; 512: PI log(80)/2 < FIRE log(81)/2
    assert best[128].tolist() == [True, False, False]
    assert best[512].tolist() == [False, True, False]
    tie = dict(PPL)
    tie[("fire0", "base")] = {128: 4.2, 512: 8.0}
    tie[("fire1", "base")] = {128: 4.8, 512: 10.0}
    mean, _, _ = lm.table(hand_runs(), hand_values(tie), "ppl")
    assert lm.best_cells(mean, "ppl")[512].tolist() == [False, True, True]
    # only finite cells can be best: a column of inf has no best cell
    hand = pd.DataFrame({256: [math.inf, math.inf], 512: [np.nan, 1.0]}, index=["a", "b"])
    assert lm.best_cells(hand, "ppl").to_dict("list") == {256: [False, False], 512: [False, True]}


def test_nan_is_left_out_and_inf_gives_inf():
    ppl = dict(PPL)
    ppl[("rope0", "rope")] = {128: 4.0, 512: 20.0, 1024: 50.0}
    ppl[("rope1", "rope")] = {128: 5.0, 512: 30.0, 1024: float("nan")}  # a length it cannot take
    ppl[("fire0", "base")] = {128: 4.2, 512: 9.0, 1024: float("inf")}
    ppl[("fire1", "base")] = {128: 4.8, 512: 9.0, 1024: 12.0}
    mean, std, n = lm.table(hand_runs(), hand_values(ppl), "ppl")
    assert mean.loc["RoPE", 1024] == pytest.approx(L(50)) and math.isnan(std.loc["RoPE", 1024])  # one run
    assert n.loc["RoPE", 1024] == 1
    assert mean.loc["FIRE", 1024] == math.inf and n.loc["FIRE", 1024] == 2
    assert math.isnan(mean.loc["RoPE + pi:factor=4", 1024]) and n.loc["RoPE + pi:factor=4", 1024] == 0
    # an infinite cell is never best; the finite one is
    assert lm.best_cells(mean, "ppl")[1024].tolist() == [True, False, False]
    cells = lm.cells(hand_runs(), hand_values(ppl), "ppl")
    missing = lm.missing_cells(cells, lm.variants(hand_runs(), hand_values(ppl)))
    assert missing == [("RoPE", 1024, 1, 2), ("RoPE + pi:factor=4", 1024, 0, 2)]


def test_training_length_is_marked():
    assert lm.train_lengths(hand_runs()) == [128]
    assert lm.length_header(128, [128]) == "128 (train)" and lm.length_header(512, [128]) == "512"
    runs = hand_runs()
    runs.loc[runs["seed"] == 1, "train_length"] = 256  # two training windows: each marked, each a variant
    assert lm.train_lengths(runs) == [128, 256]
    assert [lm.length_header(x, [128, 256]) for x in (128, 256, 512)] == ["128 (train)", "256 (train)", "512"]
    assert list(lm.variants(runs, hand_values())["variant"]) == [
        "RoPE, train_length=128", "RoPE, train_length=256", "RoPE + pi:factor=4, train_length=128",
        "RoPE + pi:factor=4, train_length=256", "FIRE, train_length=128", "FIRE, train_length=256"]


def test_varying_options_are_appended_and_encoding_options_are_not():
    runs = hand_runs()
    runs["lr"] = np.where(runs["seed"] == 0, 1e-3, 3e-4)
    runs["pe_options.mlp_width"] = np.where(runs["pe"] == "fire", 32, np.nan)  # implied by the encoding
    assert lm.option_columns(runs) == ["lr"]  # d_model, steps are constant; seed never counts
    mean, _, n = lm.table(runs, hand_values(), "ppl")
    assert list(mean.index) == ["RoPE, lr=0.001", "RoPE, lr=0.0003", "RoPE + pi:factor=4, lr=0.001",
                                "RoPE + pi:factor=4, lr=0.0003", "FIRE, lr=0.001", "FIRE, lr=0.0003"]
    assert mean.loc["RoPE, lr=0.0003", 512] == pytest.approx(L(30)) and n.loc["RoPE, lr=0.0003", 512] == 1


def test_unfinished_sweep_lists_its_missing_cells():
    runs = hand_runs()
    runs.loc[runs["run_id"] == "fire1", ["done", "train_loss", "val_ppl", "seconds"]] = [False, np.nan, np.nan, np.nan]
    values = hand_values()
    values = values[values["run_id"] != "fire1"]
    cells = lm.cells(runs, values, "ppl")
    assert lm.missing_cells(cells, lm.variants(runs, values)) == [("FIRE", 128, 1, 2), ("FIRE", 512, 1, 2)]
    mean, std, _ = lm.table(runs, values, "ppl")
    assert mean.loc["FIRE", 512] == pytest.approx(L(9)) and math.isnan(std.loc["FIRE", 512])  # one run


# -- the files --------------------------------------------------------------------------------

SPEC = "name: lm-tiny\ncommand: lm\ngrid:\n  pe: [rope, fire]\n  seed: [0, 1]\n"


def build_lm_report(name, runs, values, protocol, out):
    """The report of a language-model sweep of these runs and values, as `lengen report` builds it."""
    data = SweepData(name=name, path=out, spec_text=SPEC, kind="lm", evaluation={"protocol": protocol}, runs=runs,
                     values=values, configs=[])
    return lm_report.build(data, out)


def _fmt(m, s):
    return f"{m:.3f} ± {s:.3f}"


def test_build_writes_the_table_csv_figure_and_page(tmp_path):
    res = build_lm_report("lm-tiny", hand_runs(), hand_values(), "ppl", tmp_path)
    for name in ("lm_table.md", "lm_table.csv", "ppl_vs_length.png", "ppl_vs_length.svg", "index.html"):
        assert (tmp_path / name).exists(), name
    assert res["done"] == 4 and res["planned"] == 4 and res["missing"] == [] and res["figure"] == "ppl_vs_length.png"
    assert list(res["table"].index) == ["RoPE", "RoPE + pi:factor=4", "FIRE"]

    md = (tmp_path / "lm_table.md").read_text()
    assert md == res["markdown"] and "Log perplexity" in md and "ddof 1" in md
    intervals = (tmp_path / "lm_intervals.md").read_text()
    m, s = EXPECTED["RoPE"][512]
    assert f"| RoPE | " in intervals and f"[{m - T_975_1 * s / R2:.3f}, {m + T_975_1 * s / R2:.3f}] (n=2)" in intervals
    e = EXPECTED
    assert "| Method | 128 (train) | 512 |" in md
    assert f"| RoPE | **{_fmt(*e['RoPE'][128])}** | {_fmt(*e['RoPE'][512])} |" in md
    assert (f"| RoPE + pi:factor=4 | {_fmt(*e['RoPE + pi:factor=4'][128])} | "
            f"**{_fmt(*e['RoPE + pi:factor=4'][512])}** |") in md
    assert f"| FIRE | {_fmt(*e['FIRE'][128])} | {_fmt(*e['FIRE'][512])} |" in md
    assert md.count("**") == 2 * 2  # two bold cells

    csv = pd.read_csv(tmp_path / "lm_table.csv")
    assert list(csv.columns) == ["variant", "encoding", "method", "length", "n", "mean", "std", "low", "high"]
    assert len(csv) == 6
    for r in csv.itertuples():
        m, s = EXPECTED[r.variant][r.length]
        assert r.mean == pytest.approx(m, rel=1e-9) and r.std == pytest.approx(s, rel=1e-9, abs=1e-12)
        assert r.n == 2
    assert set(zip(csv["variant"], csv["encoding"], csv["method"])) == {
        ("RoPE", "RoPE", "rope"), ("RoPE + pi:factor=4", "RoPE", "pi:factor=4"), ("FIRE", "FIRE", "base")}

    png = (tmp_path / "ppl_vs_length.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) > 5_000
    page = (tmp_path / "index.html").read_text()
    assert 'id="lm_table"' in page and "data-images-loaded" in page and "<pre>name: lm-tiny" in page
    assert "4 of 4 runs finished" in page and 'id="missing"' not in page


def test_build_an_unfinished_sweep(tmp_path):
    runs = hand_runs()
    runs.loc[runs["run_id"] == "fire1", ["done", "train_loss", "val_ppl"]] = [False, np.nan, np.nan]
    values = hand_values()
    values = values[values["run_id"] != "fire1"]
    res = build_lm_report("lm-tiny", runs, values, "ppl", tmp_path)
    assert res["done"] == 3 and res["planned"] == 4
    assert res["missing"] == [("FIRE", 128, 1, 2), ("FIRE", 512, 1, 2)]
    md = (tmp_path / "lm_table.md").read_text()
    # * (escaped in Markdown): fewer runs than planned; FIRE's one run at 128 is now the best
    assert f"| FIRE | **{L(4.2):.3f}\\*** | {L(9):.3f}\\* |" in md   # one run: no std
    page = (tmp_path / "index.html").read_text()
    assert "3 of 4 runs finished" in page and "FIRE at 512: 1 of 2 runs have a value" in page


def test_build_with_no_finished_run(tmp_path):
    runs = hand_runs()
    runs["done"] = False
    empty = pd.DataFrame(columns=["run_id", "method", "length", "ppl"])
    res = build_lm_report("lm-tiny", runs, empty, "ppl", tmp_path)
    assert res["done"] == 0 and res["table"].shape == (2, 0) and res["figure"] is None
    assert res["missing"] == [("RoPE", None, 0, 2), ("FIRE", None, 0, 2)]
    assert "No run has finished yet" in (tmp_path / "lm_table.md").read_text()
    page = (tmp_path / "index.html").read_text()
    assert "No run has finished yet" in page and "RoPE at every length: 0 of 2" in page
    assert pd.read_csv(tmp_path / "lm_table.csv").empty
    assert not (tmp_path / "ppl_vs_length.png").exists()


def test_build_passkey_accuracy(tmp_path):
    values = pd.DataFrame([{"run_id": rid, "method": "base" if rid.startswith("fire") else "rope", "length": length,
                            "accuracy": a} for rid, length, a in (("rope0", 128, 1.0), ("rope1", 128, 1.0),
                                                                  ("fire0", 128, 1.0), ("fire1", 128, 1.0),
                                                                  ("rope0", 256, 0.0), ("rope1", 256, 0.5),
                                                                  ("fire0", 256, 0.5), ("fire1", 256, 1.0))])
    res = build_lm_report("pk", hand_runs(), values, "passkey", tmp_path)
    assert res["figure"] == "accuracy_vs_length.png" and (tmp_path / "accuracy_vs_length.svg").exists()
    md = res["markdown"]
    assert "Accuracy" in md
    assert "| RoPE | **1.000 ± 0.000** | 0.250 ± 0.354 |" in md  # ties at 128 all bold; 0.5 / sqrt(2)
    assert "| FIRE | **1.000 ± 0.000** | **0.750 ± 0.354** |" in md


def test_lm_page_renders_offline_in_a_browser(tmp_path):
    browser = chromium()
    out = tmp_path / "report"
    build_lm_report("lm-tiny", hand_runs(), hand_values(), "ppl", out)
    url = (out / "index.html").resolve().as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120,
                         check=False).stdout
    loaded = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert loaded, "the page's load script did not run"
    assert loaded.group(1) == loaded.group(2) and int(loaded.group(2)) == 1  # the figure, loaded
    table = re.search(r'<table id="lm_table">(.*?)</table>', dom, re.DOTALL).group(1)
    assert len(re.findall(r"<tr>", table)) == 1 + 3  # the header and one row per variant
    assert re.findall(r"<td><b>(.*?)</b></td>", table) == [_fmt(*EXPECTED["RoPE"][128]),
                                                          _fmt(*EXPECTED["RoPE + pi:factor=4"][512])]
    assert "http://" not in dom and "https://" not in dom


# --versus on hand-made values: differences written out by hand, pairs by seed, lower ppl wins
def test_versus_pairs_seeds_at_each_length_and_lower_perplexity_wins():
    from lengen.reports.lm_compare import lm_versus, lm_versus_markdown

    t = lm_versus(hand_runs(), hand_values(), "ppl", "RoPE").set_index(["variant", "length"])
    assert list(dict.fromkeys(v for v, _ in t.index)) == ["RoPE + pi:factor=4", "FIRE"]
    fire = t.loc[("FIRE", 512)]   # seed 0: log 9 - log 20, seed 1: log 9 - log 30
    d0, d1 = L(9 / 20), L(9 / 30)
    half = T_975_1 * (abs(d0 - d1) / R2) / R2
    assert fire["n"] == 2 and fire["difference"] == pytest.approx((d0 + d1) / 2)
    assert fire["low"] == pytest.approx((d0 + d1) / 2 - half) and fire["high"] == pytest.approx((d0 + d1) / 2 + half)
    assert (fire["wins"], fire["losses"], fire["verdict"]) == (2, 0, "within noise")  # 2 wins, wide interval
    at128 = t.loc[("FIRE", 128)]   # 4.2 vs 4 loses, 4.8 vs 5 wins
    assert (at128["wins"], at128["losses"]) == (1, 1)
    assert at128["difference"] == pytest.approx((L(4.2 / 4) + L(4.8 / 5)) / 2)

    # two seeds that agree closely: the interval leaves 0, and the verdict follows its side
    close = dict(PPL)
    close[("fire0", "base")] = {128: 4.0 * math.exp(0.50), 512: 20.0 * math.exp(-1.00)}
    close[("fire1", "base")] = {128: 5.0 * math.exp(0.51), 512: 30.0 * math.exp(-1.01)}
    t = lm_versus(hand_runs(), hand_values(close), "ppl", "RoPE").set_index(["variant", "length"])
    assert t.loc[("FIRE", 512), "verdict"] == "wins" and t.loc[("FIRE", 128), "verdict"] == "loses"
    assert t.loc[("FIRE", 512), "difference"] == pytest.approx(-1.005)
    md = lm_versus_markdown(t.reset_index(), "RoPE", [128])
    assert "| variant | 128 (train) | 512 |" in md
    fire_row = next(line for line in md.splitlines() if line.startswith("| FIRE |"))
    at512 = fire_row.split(" | ")[2]
    assert at512.startswith("-1.005 [") and at512.endswith("wins")


def test_versus_leaves_out_an_infinite_perplexity_and_one_seed_is_not_shown():
    from lengen.reports.lm_compare import lm_versus

    ppl = dict(PPL)
    ppl[("fire1", "base")] = {128: float("inf"), 512: 9.0}
    t = lm_versus(hand_runs(), hand_values(ppl), "ppl", "RoPE").set_index(["variant", "length"])
    assert t.loc[("FIRE", 128), "n"] == 1 and t.loc[("FIRE", 128), "verdict"] == "not shown"
    assert t.loc[("FIRE", 128), "difference"] == pytest.approx(L(4.2 / 4))


def test_versus_on_accuracy_higher_wins_and_an_unknown_base_is_named():
    from lengen.errors import LengenError
    from lengen.reports.lm_compare import lm_versus

    acc = pd.DataFrame([{"run_id": rid, "method": m, "length": 256, "accuracy": a}
                        for (rid, m), a in {("rope0", "rope"): 0.2, ("rope1", "rope"): 0.3,
                                            ("fire0", "base"): 0.9, ("fire1", "base"): 0.99}.items()])
    t = lm_versus(hand_runs(), acc, "accuracy", "RoPE").set_index(["variant", "length"])
    assert t.loc[("FIRE", 256), "difference"] == pytest.approx((0.7 + 0.69) / 2)
    assert (t.loc[("FIRE", 256), "wins"], t.loc[("FIRE", 256), "verdict"]) == (2, "wins")
    with pytest.raises(LengenError, match="no variant 'rope' in this sweep; its variants: 'RoPE' \\| 'RoPE \\+ pi"):
        lm_versus(hand_runs(), hand_values(), "ppl", "rope")


def test_a_result_column_is_not_an_option_even_while_runs_are_unfinished():
    # the parameter count is a result: NaN until a run finishes, and SSMax's s per head adds some;
    # neither may split a variant's runs into two rows or name a row
    runs = hand_runs()
    runs["parameters"] = [1000.0, np.nan, 1016.0, np.nan]   # rope0 finished, rope1 running, ...
    runs.loc[runs["seed"] == 1, "done"] = False
    assert lm.option_columns(runs) == []
    mean, _, _ = lm.table(runs, hand_values(), "ppl")
    assert list(mean.index) == ["RoPE", "RoPE + pi:factor=4", "FIRE"]


def test_versus_has_a_validation_column_for_trained_variants_only():
    from lengen.reports.lm_compare import VALIDATION, lm_versus, lm_versus_markdown

    runs = hand_runs()
    runs["val_ppl"] = [3.0, 4.0, 3.3, 3.6]            # rope0, rope1, fire0, fire1
    t = lm_versus(runs, hand_values(), "ppl", "RoPE")
    val = t[t["length"].isna()].set_index("variant")
    # FIRE only: RoPE + pi is an evaluation of RoPE's own runs, so it has no validation pair
    assert list(val.index) == ["FIRE"]
    d0, d1 = L(3.3 / 3.0), L(3.6 / 4.0)               # by hand, seed by seed
    assert val.loc["FIRE", "difference"] == pytest.approx((d0 + d1) / 2)
    assert (val.loc["FIRE", "wins"], val.loc["FIRE", "losses"]) == (1, 1)   # lower ppl wins: seed 1
    md = lm_versus_markdown(t, "RoPE", [128])
    assert md.splitlines()[0] == f"| variant | 128 (train) | 512 | {VALIDATION} |"
    pi_row = next(line for line in md.splitlines() if line.startswith("| RoPE + pi"))
    assert pi_row.rstrip().endswith("| — |")
    # an accuracy sweep has no perplexity column
    acc = hand_values().rename(columns={"ppl": "accuracy"})
    assert lm_versus(runs, acc, "accuracy", "RoPE")["length"].notna().all()
