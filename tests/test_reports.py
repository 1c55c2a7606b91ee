"""Reports: the paper's aggregations on hand-made tables, the comparison with the published
Table 1, and the HTML page in a real browser."""

import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
import yaml

from lengen.cli import main
from lengen.reports import che_aggregate as agg
from lengen.reports.che_compare import compare_variants, versus, versus_markdown
from lengen.reports.published import compare, comparable, published_table1
from lengen.reports.render import cell_texts, markdown

from guards import chromium


def hand_runs() -> pd.DataFrame:
    """Two tasks x (rope, r_rope) x 2 learning rates x 2 seeds, with scores chosen by hand; one
    r_rope run of bucket_sort unfinished."""
    rows = []
    scores = {  # (task, positions, lr) -> scores of seeds 0, 1
        ("even_pairs", "standard", 1e-4): (0.50, 0.60), ("even_pairs", "standard", 3e-4): (0.55, 0.52),
        ("even_pairs", "randomized", 1e-4): (0.90, 0.70), ("even_pairs", "randomized", 3e-4): (0.85, 0.85),
        ("bucket_sort", "standard", 1e-4): (0.30, 0.20), ("bucket_sort", "standard", 3e-4): (0.25, 0.35),
        ("bucket_sort", "randomized", 1e-4): (0.99, None), ("bucket_sort", "randomized", 3e-4): (0.40, 0.50),
    }
    for (task, positions, lr), pair in scores.items():
        for seed, score in enumerate(pair):
            rows.append({"run_id": f"{task}{positions}{lr}{seed}", "task": task, "pe": "rope",
                         "positions": positions, "test_positions": "random" if positions == "randomized" else "standard",
                         "lr": lr, "seed": seed, "steps": 100, "train_length": 20, "max_length": 60,
                         "score": score, "seconds": None if score is None else 10.0 + seed, "done": score is not None})
    return agg.add_variants(pd.DataFrame(rows))


def test_variants_are_labelled_as_in_the_paper():
    runs = hand_runs()
    assert agg.variant_columns(runs) == ["pe", "positions"]  # test_positions follows the sampler
    assert agg.ordered_variants(runs) == ["rope", "r_rope"]
    more = runs.assign(logit_scale=np.where(runs["seed"] == 0, "none", "log_n"))
    more = agg.add_variants(more.drop(columns=["variant", "variant_order"]))
    assert set(more["variant"]) == {"rope", "rope, logit_scale=log_n", "r_rope", "r_rope, logit_scale=log_n"}


def test_table1_is_the_best_over_seeds_and_learning_rates():
    t1 = agg.table1(hand_runs())
    assert list(t1.index) == ["even_pairs", "bucket_sort"]  # R before CS, as in the paper
    assert t1.loc["even_pairs", "rope"] == pytest.approx(60.0)
    assert t1.loc["even_pairs", "r_rope"] == pytest.approx(90.0)
    assert t1.loc["bucket_sort", "rope"] == pytest.approx(35.0)
    assert t1.loc["bucket_sort", "r_rope"] == pytest.approx(99.0)  # the unfinished run is ignored


def test_table4_is_mean_and_std_at_the_lr_with_the_best_mean():
    mean, std, lr = agg.table4(hand_runs())
    # even_pairs rope: lr 1e-4 mean 0.55, lr 3e-4 mean 0.535 -> 1e-4, std (ddof 0) of (0.5, 0.6) = 0.05
    assert lr.loc["even_pairs", "rope"] == 1e-4
    assert mean.loc["even_pairs", "rope"] == pytest.approx(55.0)
    assert std.loc["even_pairs", "rope"] == pytest.approx(5.0)
    # even_pairs r_rope: 0.80 vs 0.85 -> 3e-4, std 0
    assert lr.loc["even_pairs", "r_rope"] == 3e-4 and std.loc["even_pairs", "r_rope"] == pytest.approx(0.0)
    # bucket_sort r_rope: lr 1e-4 has one finished run (0.99) -> mean 0.99 beats 0.45
    assert mean.loc["bucket_sort", "r_rope"] == pytest.approx(99.0) and lr.loc["bucket_sort", "r_rope"] == 1e-4


def test_seed_statistics_give_n_sample_std_and_the_t_interval_at_table_4s_lr():
    st = agg.seed_statistics(hand_runs())
    # even_pairs rope at lr 1e-4: (50, 60): mean 55, ddof-1 std sqrt(50) = 7.0711,
    # half-width t(0.975, 1) * std / sqrt(2) = 12.7062 * 5 = 63.531 (t from a printed table)
    assert st["n"].loc["even_pairs", "rope"] == 2 and st["mean"].loc["even_pairs", "rope"] == pytest.approx(55.0)
    assert st["std"].loc["even_pairs", "rope"] == pytest.approx(7.0711, abs=1e-4)
    assert st["low"].loc["even_pairs", "rope"] == pytest.approx(55.0 - 63.531, abs=1e-3)
    assert st["high"].loc["even_pairs", "rope"] == pytest.approx(55.0 + 63.531, abs=1e-3)
    # bucket_sort r_rope: one finished run at the chosen lr: a mean, no std, no interval
    assert st["n"].loc["bucket_sort", "r_rope"] == 1 and np.isnan(st["std"].loc["bucket_sort", "r_rope"])
    assert np.isnan(st["low"].loc["bucket_sort", "r_rope"])


def test_bold_per_row_average_row_and_missing_cells():
    t1 = agg.table1(hand_runs())
    t1.loc["bucket_sort", "rope"] = np.nan  # a cell with no finished run
    header, rows, bolds = cell_texts(t1)
    assert header == ["Level", "Task", "rope", "r_rope"]
    assert rows[0] == ["R", "even_pairs", "60.0", "90.0"] and bolds[0] == [False, False, False, True]
    assert rows[1] == ["CS", "bucket_sort †", "—", "99.0"]
    # average over tasks; * marks a column averaged over fewer tasks
    assert rows[2] == ["", "Average", "60.0*", "94.5"]
    md = markdown(t1)
    assert "| R | even_pairs | 60.0 | **90.0** |" in md
    tie = t1.copy()
    tie.loc["even_pairs", "rope"] = 90.0
    assert cell_texts(tie)[2][0] == [False, False, True, True]  # ties are all bold


def test_missing_cells_are_listed():
    assert agg.missing_cells(hand_runs()) == [("bucket_sort", "r_rope", 3, 4)]


def test_comparison_with_the_published_table():
    paper = published_table1()
    assert paper.loc["even_pairs", "rope"] == 51.0 and paper.loc["bucket_sort", "r_learned"] == 99.5
    # the headline: mean over tasks of best randomized minus best standard cell = 11.95 (the paper's 12.0)
    assert agg.randomized_gain(paper).mean() == pytest.approx(11.95, abs=0.01)
    t1 = agg.table1(hand_runs())
    assert comparable(t1)
    cmp = compare(t1)
    cells = cmp["cells"].set_index(["task", "encoding"])
    assert cells.loc[("even_pairs", "rope"), "published"] == 51.0
    assert cells.loc[("even_pairs", "rope"), "difference"] == pytest.approx(60.0 - 51.0)
    assert cells.loc[("bucket_sort", "r_rope"), "difference"] == pytest.approx(99.0 - 99.6)
    # gain on the same cells: measured (90-60 + 99-35)/2 = 47; paper (100-51 + 99.6-30.6)/2 = 59
    assert cmp["mean_gain"]["measured"] == pytest.approx(47.0)
    assert cmp["mean_gain"]["published_same_cells"] == pytest.approx(59.0)
    assert cmp["wins"]["rope"] == {"measured": 2, "published": 2, "tasks": 2}
    assert cmp["solved"]["measured"] == {"even_pairs": [], "bucket_sort": ["r_rope"]}
    other = t1.rename(columns={"rope": "rope, key_norm=True"})
    assert not comparable(other)
    assert cmp["protocol"] is None  # no runs given


def test_the_comparison_says_where_the_protocol_is_not_the_papers():
    runs = hand_runs()  # lr 1e-4 and 3e-4, 100 steps, U{1..20} tested to 60, seeds 0-1
    assert compare(agg.table1(runs), runs)["protocol"] == [
        "lr 0.0001, 0.0003 (paper: the best of 0.0001, 0.0003, 0.0005)", "100 steps (paper: 2,000,000)",
        "training lengths 1..20, test 21..60 (paper: 1..40, test 41..500)", "2 seeds (paper: 10)"]
    paper = pd.concat([runs.assign(lr=lr, seed=runs["seed"] + 2 * k, steps=2_000_000, train_length=40,
                                   max_length=500)
                       for k, lr in enumerate(np.repeat([1e-4, 3e-4, 5e-4], 2))], ignore_index=True)
    assert paper["seed"].nunique() == 12
    assert compare(agg.table1(paper), paper)["protocol"] == ["12 seeds (paper: 10)"]
    paper = paper[paper["seed"] < 10]
    assert compare(agg.table1(paper), paper)["protocol"] == []
    from lengen.reports.che import comparison_text
    text = comparison_text(compare(agg.table1(runs), runs))
    assert text.startswith("- Not the paper's protocol: lr 0.0001, 0.0003 (paper") and "beats" not in text


# -- the command and the page -----------------------------------------------------------------

TINY = {"steps": 20, "batch_size": 8, "train_length": 3, "max_length": 6, "eval_samples": 8, "layers": 1,
        "heads": 2, "d_model": 8, "d_ff": 16, "checkpoint_every": 10, "log_every": 5}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    spec = root / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "tiny", "grid": {"task": ["parity_check", "even_pairs"],
                                                             "pe": ["rope", "alibi"],
                                                             "positions": ["standard", "randomized"]},
                                    "fixed": TINY}))
    assert main(["sweep", "run", str(spec), "--out", str(root / "sweep"), "--workers", "1", "--device", "cpu",
                 "--no-progress"]) == 0
    assert main(["report", str(root / "sweep"), "--out", str(root / "report")]) == 0
    return root / "report"


def test_report_files(report):
    for name in ("table1.md", "table1.csv", "table4.md", "table4.csv", "seed_stats.md", "seed_stats.csv",
                 "table2.md", "index.html",
                 "comparison.md", "fig4_parity_check.png", "fig4_parity_check.svg", "fig4_even_pairs.png"):
        assert (report / name).exists(), name
    t1 = pd.read_csv(report / "table1.csv", index_col="task")
    assert list(t1.index) == ["even_pairs", "parity_check"]
    assert list(t1.columns) == ["rope", "alibi", "r_rope", "r_alibi"]
    assert (report / "fig4_even_pairs.png").read_bytes()[:4] == b"\x89PNG"


def test_html_page_renders_offline_in_a_browser(report, tmp_path):
    browser = chromium()
    url = (report / "index.html").resolve().as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=10000",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    loaded = re.search(r'data-images-loaded="(\d+)/(\d+)"', dom)
    assert loaded, "the page's load script did not run"
    assert loaded.group(1) == loaded.group(2) and int(loaded.group(2)) == 2  # two fig4 PNGs, both loaded
    table = re.search(r'<table id="table1">(.*?)</table>', dom, re.S).group(1)
    assert len(re.findall(r'<tr class="task">', table)) == 2 and len(re.findall(r'<tr class="average">', table)) == 1
    assert "http://" not in dom and "https://" not in dom  # nothing to fetch: readable offline
    shot = tmp_path / "page.png"
    subprocess.run([browser, *flags, "--window-size=1280,2000", f"--screenshot={shot}", url],
                   capture_output=True, timeout=120)
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 20_000


def test_report_refuses_a_folder_that_is_not_a_sweep(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    assert main(["report", str(tmp_path / "x"), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a lengen sweep directory" in err
    assert not (tmp_path / "r").exists()


def test_fig3_appears_only_when_the_sweep_varies_max_position(tmp_path):
    from lengen.reports.figures import score_vs_max_position

    runs = hand_runs()
    assert score_vs_max_position(runs, tmp_path) is None
    varied = runs.assign(max_position=np.where(runs["seed"] == 0, 1024, 4096))
    varied = agg.add_variants(varied.drop(columns=["variant", "variant_order"]))
    assert "r_rope, max_position=1024" in set(varied["variant"])  # a column of its own in Table 1
    name = score_vs_max_position(varied, tmp_path)
    assert name == "fig3_max_position.png" and (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "fig3_max_position.svg").exists()


def test_figure4_line_colours_are_distinct_and_not_the_marker_colour():
    # a sweep can plot 12 encodings and 4 recurrent models in one panel; the N line is drawn too
    from matplotlib.colors import to_rgba

    from lengen.reports.figures import MARKER_COLOUR, line_colours

    for n in (1, 4, 10, 11, 16, 20, 25):
        colours = line_colours([f"k{i}" for i in range(n)])
        rgba = [to_rgba(c) for c in colours.values()]
        assert len(colours) == n and len(set(rgba)) == n, n
        assert to_rgba(MARKER_COLOUR) not in rgba


def test_best_runs_picks_the_highest_score_per_cell_first_on_ties():
    from lengen.reports.che_aggregate import best_runs

    runs = pd.DataFrame([
        # task, variant, run_id, score: the expected pick of each cell is written out below
        ("parity_check", "rope", "a", 0.50), ("parity_check", "rope", "b", 0.90),
        ("parity_check", "rope", "c", 0.70), ("parity_check", "alibi", "d", float("nan")),
        ("parity_check", "alibi", "e", 0.60), ("even_pairs", "rope", "f", 0.80),
        ("even_pairs", "rope", "g", 0.80), ("even_pairs", "rope", "h", 0.10),
    ], columns=["task", "variant", "run_id", "score"])
    picked = best_runs(runs)
    assert dict(zip(zip(picked["task"], picked["variant"]), picked["run_id"])) == {
        ("parity_check", "rope"): "b", ("parity_check", "alibi"): "e", ("even_pairs", "rope"): "f"}


def test_compare_pairs_cells_by_task_lr_and_seed():
    # r_rope - rope per (task, lr, seed), x 100, worked out from hand_runs' scores:
    # even_pairs: 90-50, 70-60, 85-55, 85-52 = 40, 10, 30, 33 -> mean 28.25, std 12.868 (ddof 1),
    #   se 6.434, t(0.975, 3) = 3.18245 -> [7.77, 48.73]: r_rope wins
    # bucket_sort: 99-30, 40-25, 50-35 (the unfinished seed left out) = 69, 15, 15 -> mean 33,
    #   std 31.177, se 18.0, t(0.975, 2) = 4.30265 -> [-44.45, 110.45]: within noise
    table = compare_variants(hand_runs(), "r_rope", "rope").set_index("task")
    assert list(table.index) == ["even_pairs", "bucket_sort", "all tasks"]
    ep, bs, both = table.loc["even_pairs"], table.loc["bucket_sort"], table.loc["all tasks"]
    assert (ep["n"], ep["difference"]) == (4, pytest.approx(28.25))
    assert ep["std"] == pytest.approx(12.868, abs=1e-3)
    assert (ep["low"], ep["high"]) == (pytest.approx(7.774, abs=1e-2), pytest.approx(48.726, abs=1e-2))
    assert (ep["r_rope wins"], ep["rope wins"], ep["verdict"]) == (4, 0, "wins")
    assert (bs["n"], bs["difference"], bs["verdict"]) == (3, pytest.approx(33.0), "within noise")
    assert (bs["low"], bs["high"]) == (pytest.approx(-44.45, abs=1e-2), pytest.approx(110.45, abs=1e-2))
    assert (both["n"], both["difference"]) == (7, pytest.approx(212 / 7))
    flipped = compare_variants(hand_runs(), "rope", "r_rope").set_index("task")
    assert flipped.loc["even_pairs", "verdict"] == "loses" and flipped.loc["all tasks", "rope wins"] == 0


def test_versus_stacks_every_variant_against_one_base():
    # alibi: rope's runs with every score raised by 0.10, so alibi - rope is exactly +10 in each of
    # rope's 8 cells (std 0: the interval is the point); r_rope - rope as worked out above, over all
    # tasks 40, 10, 30, 33, 69, 15, 15 -> mean 30.286, std 20.328, se 7.683, t(0.975, 6) = 2.44691
    # -> [11.49, 49.09]: wins, 7 cells won, 0 lost
    runs = hand_runs()
    rope = runs[runs["variant"] == "rope"]
    alibi = rope.assign(pe="alibi", score=rope["score"] + 0.10, run_id=rope["run_id"] + "alibi")
    runs = agg.add_variants(pd.concat([runs, alibi]).drop(columns=["variant", "variant_order"]))
    table = versus(runs, "rope")
    assert list(dict.fromkeys(table["variant"])) == ["alibi", "r_rope"]
    every = table[table["task"] == "all tasks"].set_index("variant")
    assert (every.loc["r_rope", "n"], every.loc["r_rope", "wins"], every.loc["r_rope", "losses"]) == (7, 7, 0)
    assert every.loc["r_rope", "low"] == pytest.approx(11.49, abs=1e-2)
    assert every.loc["r_rope", "high"] == pytest.approx(49.09, abs=1e-2)
    assert (every.loc["alibi", "n"], every.loc["alibi", "difference"]) == (8, pytest.approx(10.0))
    md = versus_markdown(table, "rope")
    assert md.splitlines()[0] == "| variant | even_pairs (n) | bucket_sort (n) | all tasks (n) | wins / losses | vs rope |"
    assert "| alibi | +10.0 [+10.0, +10.0] (4) | +10.0 [+10.0, +10.0] (4) | +10.0 [+10.0, +10.0] (8) | 8 / 0 | wins |" in md
    assert ("| r_rope | +28.2 [+7.8, +48.7] (4) | +33.0 [-44.4, +110.4] (3) | +30.3 [+11.5, +49.1] (7) | 7 / 0 "
            "| wins |") in md


def test_versus_on_a_sweep_folder_and_its_refusals(report, capsys):
    sweep = report.parent / "sweep"
    assert main(["report", str(sweep), "--versus", "alibi"]) == 0
    rows = {line.split("|")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")}
    assert set(rows) == {"variant", "rope", "r_rope", "r_alibi"}
    res = pd.read_csv(sweep / "results.csv")
    alibi = res[res["pe"] == "alibi"].pivot_table(index=["task", "lr", "seed"], columns="positions", values="score")
    diffs = 100 * (alibi["randomized"] - alibi["standard"])
    assert f"{diffs.mean():+.1f}" in rows["r_alibi"].split("|")[-4]
    assert main(["report", str(sweep), "--versus", "alibi_x"]) == 2
    assert "--versus: no variant 'alibi_x' in this sweep" in capsys.readouterr().err
    assert main(["report", str(sweep), "--versus", "alibi", "--compare", "rope", "alibi"]) == 2
    assert "give one" in capsys.readouterr().err


def test_compare_on_a_sweep_folder(report, capsys):
    sweep = report.parent / "sweep"
    assert main(["report", str(sweep), "--compare", "r_alibi", "alibi"]) == 0
    out = capsys.readouterr().out
    # the expected differences straight from the sweep's results.csv
    res = pd.read_csv(sweep / "results.csv")
    alibi = res[res["pe"] == "alibi"].pivot_table(index=["task", "lr", "seed"], columns="positions", values="score")
    diffs = 100 * (alibi["randomized"] - alibi["standard"])
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert f"| {len(diffs)} | {diffs.mean():+.1f} |" in rows["all tasks"]
    for (task, _, _), d in diffs.items():
        assert f"| 1 | {d:+.1f} |" in rows[task] and "not shown" in rows[task]
    assert not (sweep / "report" / "compare").exists()


@pytest.mark.parametrize("args,message", [
    (["r_alibi", "alibi_x"], "no variant 'alibi_x' in this sweep; its variants: 'rope' | 'alibi' | 'r_rope' | 'r_alibi'"),
    (["rope", "rope"], "two different variants"),
])
def test_compare_refuses_unknown_or_equal_variants(report, capsys, args, message):
    assert main(["report", str(report.parent / "sweep"), "--compare", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


# -- exports: the results without the run directories ----------------------------------------------

@pytest.fixture(scope="module")
def export(report):
    out = report.parent / "export"
    assert main(["sweep", "export", str(report.parent / "sweep"), "--out", str(out)]) == 0
    return out


def test_an_export_holds_small_files_and_every_runs_environment(export):
    import platform

    import torch
    names = sorted(p.name for p in export.iterdir())
    assert names == ["accuracy_by_length.csv", "environment.csv", "export.json", "results.csv", "sweep.json",
                     "sweep.yaml"]
    res = pd.read_csv(export / "results.csv", dtype={"run_id": str})
    env = pd.read_csv(export / "environment.csv", dtype={"run_id": str})
    assert list(env["run_id"]) == list(res["run_id"]) and len(res) == 8
    assert set(env["torch"]) == {torch.__version__} and set(env["python"]) == {platform.python_version()}
    assert set(env["device"]) == {"cpu"} and set(env["threads"]) == {1}
    assert set(env["cpu_capability"]) == {torch.backends.cpu.get_cpu_capability()}   # e.g. AVX2


def test_the_report_of_an_export_is_the_report_of_the_sweep(export, tmp_path):
    assert main(["report", str(export), "--out", str(tmp_path / "r")]) == 0
    for name in ("table1.md", "table4.md", "seed_stats.md", "table2.md", "comparison.md", "table4.csv",
                 "seed_stats.csv"):
        assert (tmp_path / "r" / name).read_text() == (export.parent / "report" / name).read_text(), name


def test_an_export_with_a_changed_score_reports_it(export, tmp_path):
    """The export's tables are what the report reads, not a copy of the sweep's runs."""
    changed = tmp_path / "export"
    shutil.copytree(export, changed)
    res = pd.read_csv(changed / "results.csv", dtype={"run_id": str})
    res.loc[0, "score"] = 0.123456
    res.to_csv(changed / "results.csv", index=False)
    assert main(["report", str(changed), "--out", str(tmp_path / "r")]) == 0
    t1 = pd.read_csv(tmp_path / "r" / "table1.csv", index_col="task")
    row = res.iloc[0]
    variant = ("r_" if row["positions"] == "randomized" else "") + row["pe"]
    others = res[(res["task"] == row["task"]) & (res["pe"] == row["pe"]) & (res["positions"] == row["positions"])]
    assert t1.loc[row["task"], variant] == pytest.approx(100 * others["score"].max(), abs=0.01)  # %.4g


def test_export_refuses_to_write_into_a_sweep_folder(report, tmp_path, capsys):
    sweep = report.parent / "sweep"
    before = sorted(p.name for p in sweep.iterdir())
    assert main(["sweep", "export", str(sweep), "--out", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a sweep folder" in err
    assert sorted(p.name for p in sweep.iterdir()) == before
    assert main(["sweep", "export", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert "not a lengen sweep folder" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_an_export_accumulates_a_study_run_in_parts(report, export, tmp_path, capsys):
    """Part 1: the whole grid, half of it finished; part 2: a sweep file over the other half,
    exported into the first export. The result: the whole study, as one uninterrupted sweep."""
    sweep = report.parent / "sweep"
    partial = tmp_path / "partial"
    shutil.copytree(sweep, partial)
    res = pd.read_csv(sweep / "results.csv", dtype={"run_id": str})
    for rid in res.loc[res["task"] == "even_pairs", "run_id"]:
        shutil.rmtree(partial / "runs" / rid)
    study = tmp_path / "study"
    assert main(["sweep", "export", str(partial), "--out", str(study)]) == 0
    assert "4 of 8 runs finished" in capsys.readouterr().out
    part2 = tmp_path / "part2.yaml"
    part2.write_text(yaml.safe_dump({"name": "part 2", "grid": {"task": ["even_pairs"], "pe": ["rope", "alibi"],
                                                                "positions": ["standard", "randomized"]},
                                     "fixed": TINY}))
    assert main(["sweep", "run", str(part2), "--out", str(tmp_path / "sweep2"), "--workers", "1", "--device", "cpu",
                 "--no-progress"]) == 0
    assert main(["sweep", "export", str(tmp_path / "sweep2"), "--out", str(study)]) == 0
    assert "8 of 8 runs finished" in capsys.readouterr().out
    assert (study / "sweep.yaml").read_text() == (sweep / "sweep.yaml").read_text()   # the whole grid's file
    timing = ["seconds", "train_seconds", "eval_seconds"]
    merged = pd.read_csv(study / "results.csv", dtype={"run_id": str}).drop(columns=timing)
    whole = pd.read_csv(export / "results.csv", dtype={"run_id": str}).drop(columns=timing)
    pd.testing.assert_frame_equal(merged, whole)
    assert (study / "accuracy_by_length.csv").read_text() == (export / "accuracy_by_length.csv").read_text()
    env = pd.read_csv(study / "environment.csv", dtype={"run_id": str})
    assert list(env["run_id"]) == list(whole["run_id"]) and env["torch"].notna().all()


def test_by_lr_summarizes_every_learning_rate_by_hand():
    lrs = agg.by_lr(hand_runs()).set_index(["task", "variant", "lr"])
    # even_pairs rope: lr 1e-4 (50, 60) and lr 3e-4 (55, 52): means 55 and 53.5, ddof-1 stds
    # sqrt(50) and sqrt(4.5); bucket_sort r_rope at 1e-4 has one finished run (99)
    assert lrs.loc[("even_pairs", "rope", 1e-4), "mean"] == pytest.approx(55.0)
    assert lrs.loc[("even_pairs", "rope", 3e-4), "std"] == pytest.approx(4.5 ** 0.5)
    assert lrs.loc[("even_pairs", "rope", 3e-4), "high"] == pytest.approx(53.5 + 12.7062 * 1.5, abs=1e-3)
    assert lrs.loc[("bucket_sort", "r_rope", 1e-4), "n"] == 1
    from lengen.reports.che import lr_markdown
    md = lr_markdown(agg.by_lr(hand_runs()))
    assert "| Task | Variant | lr 0.0001 | lr 0.0003 |" in md
    assert "| even_pairs | rope | **55.0 ± 7.1 [-8.5, 118.5] (n=2)** | 53.5 ± 2.1 [34.4, 72.6] (n=2) |" in md
