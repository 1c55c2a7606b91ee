"""Docs against data: every generated block in docs/ (scripts/build_docs.py) equals what its
committed results in docs/data/ give, and the check notices a changed score or a changed number."""

import json
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "scripts" / "build_docs.py"
sys.path.insert(0, str(ROOT / "scripts"))
from build_docs import doc_pages  # noqa: E402

#: every page of the docs site (section folders included; docs/data/ holds results, not pages)
PAGES = doc_pages(ROOT / "docs")


def check(docs: Path = ROOT / "docs", data: Path = ROOT / "docs" / "data", only: str | None = None
          ) -> subprocess.CompletedProcess:
    """build_docs.py --check; `only`: the blocks of one study or demo folder (a whole check
    builds every study's report, ~30 s each time on 2 cores)."""
    return subprocess.run([sys.executable, str(BUILD), "--check", "--docs", str(docs), "--data", str(data),
                           *(["--only", only] if only else [])], capture_output=True, text=True)


def docs_pages() -> str:
    """Every page of docs/, joined: where a generated block is looked for."""
    return "".join(p.read_text() for p in PAGES)


def add_block(page: Path, args: str, body: str = "") -> None:
    """A generated block `args` holding `body`, appended to a copied docs page."""
    page.write_text(page.read_text() + f"\n<!-- generated: {args} -->\n{body}<!-- end generated -->\n")


def assert_block_follows_data(docs: Path, page: str, args: str, expected: str, change) -> None:
    """The block `args` (its second word names the data), holding `expected`, added to a copied
    page: --check passes; after `change()` alters its data, --check names it stale."""
    add_block(docs / page, args, expected)
    only = shlex.split(args)[1]
    assert check(docs, docs / "data", only=only).returncode == 0
    change()
    done = check(docs, docs / "data", only=only)
    assert done.returncode == 1 and f"stale: {page}: {args}" in done.stdout


@pytest.fixture
def copy(tmp_path):
    """docs/ (pages and data) copied, to change without touching the repository."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("*.png", "*.svg"))
    return docs


def test_every_generated_block_matches_its_committed_data():
    done = check()
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_docs_have_generated_blocks_for_every_committed_study():
    pages = docs_pages()
    for study in (ROOT / "docs" / "data" / "studies").iterdir():
        if (study / "export.json").exists():  # a CHE study's Table 1, or a table of another kind's report
            assert (f"<!-- generated: che {study.name} table1 -->" in pages
                    or f"<!-- generated: report {study.name} " in pages), study.name


def test_the_docs_have_generated_blocks_for_every_committed_lm_run():
    pages = docs_pages()
    runs = sorted((ROOT / "docs" / "data" / "lm").iterdir())
    assert runs, "no committed language-model run"
    for run in runs:
        assert f"<!-- generated: lmrun {run.name} -->" in pages, run.name
        for folder in run.glob("eval-*"):
            assert f"<!-- generated: lmeval {run.name} {folder.name.removeprefix('eval-')} -->" in pages, folder


def test_the_docs_have_a_generated_block_for_every_committed_hf_eval():
    pages = docs_pages()
    evals = sorted((ROOT / "docs" / "data" / "hf").iterdir())
    assert evals, "no committed lengen hf eval"
    for folder in evals:
        assert f"<!-- generated: hfeval {folder.name} -->" in pages, folder.name
        # results.csv is the command's other copy of the rows: the same numbers
        rows = pd.read_csv(folder / "results.csv").to_dict("records")
        record = json.loads((folder / "results.json").read_text())
        metric = record["meta"]["metric"]
        assert [(r["method"], r["length"], r[metric]) for r in rows] == \
            [(r["method"], r["length"], r[metric]) for r in record["rows"]], folder.name


def test_a_changed_perplexity_of_a_committed_lm_eval_is_caught(copy):
    results = copy / "data" / "lm" / "rope-default" / "eval-ppl" / "results.csv"
    table = pd.read_csv(results)
    table.loc[0, "ppl"] = table.loc[0, "ppl"] + 0.01   # printed to 3 decimals
    table.to_csv(results, index=False)
    record = copy / "data" / "lm" / "rope-default" / "eval.json"
    run = json.loads(record.read_text())
    run["val_ppl"] += 0.01
    record.write_text(json.dumps(run))
    done = check(copy, copy / "data", only="rope-default")
    assert done.returncode == 1 and done.stdout.count("stale:") == 2, done.stdout + done.stderr
    assert "lmeval rope-default ppl" in done.stdout and "lmrun rope-default" in done.stdout


def test_a_report_block_is_the_file_lengen_report_writes(copy, tmp_path):
    page = copy / "results" / "ruoss2023-mini.md"
    block = "<!-- generated: report ruoss2023-mini table2.md -->\n"
    page.write_text(page.read_text() + "\n" + block + "stale text\n<!-- end generated -->\n")
    done = check(copy, copy / "data", only="ruoss2023-mini")
    assert done.returncode == 1 and "stale: results/ruoss2023-mini.md: report ruoss2023-mini table2.md" in done.stdout
    built = subprocess.run([sys.executable, str(BUILD), "--only", "ruoss2023-mini", "--docs", str(copy), "--data", str(copy / "data")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    cli = subprocess.run([sys.executable, "-m", "lengen", "report", str(copy / "data" / "studies" / "ruoss2023-mini"),
                          "--out", str(tmp_path / "report")], capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 0, cli.stderr
    expected = (tmp_path / "report" / "table2.md").read_text()
    assert expected.startswith("| Level | Task |")
    assert block + expected + "<!-- end generated -->" in page.read_text()
    assert check(copy, copy / "data", only="ruoss2023-mini").returncode == 0


def test_a_changed_score_in_the_demo_data_is_caught(copy):
    run = copy / "data" / "demo" / "threads-2" / "rope-randomized" / "eval.json"
    record = json.loads(run.read_text())
    record["score"] = 0.5   # printed 0.893
    run.write_text(json.dumps(record))
    done = check(copy, copy / "data", only="threads-2")
    assert done.returncode == 1 and "stale: results/demo.md: demo threads-2" in done.stdout


def test_a_changed_score_in_a_study_is_caught(copy):
    studies = sorted(p for p in (copy / "data" / "studies").glob("*") if (p / "export.json").exists()
                     and json.loads((p / "export.json").read_text())["kind"] == "train")   # a CHE study
    assert studies, "no committed CHE study"
    results = studies[0] / "results.csv"
    table = pd.read_csv(results, dtype={"run_id": str})
    # the weakest run becomes its cell's unique best, so Table 1 must move (lowering a best score
    # can leave the cell unchanged where two seeds tie, e.g. at 100%)
    worst = table["score"].idxmin()
    table.loc[worst, "score"] = table["score"].max() + 0.01
    table.to_csv(results, index=False)
    done = check(copy, copy / "data", only=studies[0].name)
    assert done.returncode == 1 and f"che {studies[0].name} table1" in done.stdout


def test_a_changed_number_in_a_docs_table_is_caught(copy):
    page = copy / "results" / "demo.md"
    text = page.read_text()
    assert "| score (21-60) | 0.560 |" in text
    page.write_text(text.replace("| score (21-60) | 0.560 |", "| score (21-60) | 0.561 |", 1))
    done = check(copy, copy / "data")
    assert done.returncode == 1 and done.stdout.count("stale:") == 1 and "demo threads-2" in done.stdout


def test_an_unknown_block_is_one_clear_message(copy):
    add_block(copy / "results" / "ruoss2023-mini.md", "che no-such-study table1")
    done = check(copy, copy / "data", only="no-such-study")
    assert done.returncode not in (0, 1) and "Traceback" not in done.stderr
    assert re.search(r"results/ruoss2023-mini\.md: block `che no-such-study table1` cannot be built", done.stderr)


def test_a_changed_cell_of_the_arithmetic_study_is_caught(copy):
    cells = copy / "data" / "studies" / "abacus2024-mini" / "arith_by_cell.csv"
    table = pd.read_csv(cells, dtype={"run_id": str})
    diagonal = table.index[(table["length"] == 7) & (table["j"] == 7) & (table["correct"] < table["total"])][0]
    table.loc[diagonal, "correct"] += 1   # one more problem right at 7 digits: the by-length table moves
    table.to_csv(cells, index=False)
    done = check(copy, copy / "data", only="abacus2024-mini")
    assert done.returncode == 1 and "stale: results/abacus2024-mini.md: report abacus2024-mini arith_by_length.md" in done.stdout


def test_an_hfeval_block_is_the_command_s_table_and_what_computed_it(copy):
    """A hand-made `lengen hf eval` record (docs/data/hf/NAME/results.json) and its block, written
    out by hand: the table as the command prints it (3 decimals, methods in their order, lengths
    as columns) and the line naming the model, protocol, size, device and versions."""
    env = {"lengen_commit": "0123456789abcdef", "torch": "2.13.0+cpu", "transformers": "5.24.0",
           "device": "cpu", "threads": 2}
    meta = {"metric": "ppl", "protocol": "last-segment", "gguf_file": "m.gguf", "model_path": "/x/m",
            "model_type": "llama", "train_length": 8192, "docs": 1, "trials": 3, "dtype": "float32",
            "attn": "sdpa", "environment": env}
    rows = [{"method": "rope", "length": 4096, "ppl": 3.97707, "seconds": 60.0},
            {"method": "rope", "length": 8192, "ppl": 3.65749, "seconds": 120.0},
            {"method": "yarn:factor=4", "length": 4096, "ppl": 4.43227, "seconds": 60.0},
            {"method": "yarn:factor=4", "length": 8192, "ppl": 3.99812, "seconds": 120.0}]
    folder = copy / "data" / "hf" / "tiny-lastseg"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    expected = ("| method        | 4096  | 8192  |\n"
                "|---------------|-------|-------|\n"
                "| rope          | 3.977 | 3.657 |\n"
                "| yarn:factor=4 | 4.432 | 3.998 |\n"
                "\n"
                "m.gguf (llama, trained to 8,192 tokens), last-segment, 1 document; float32, sdpa, cpu, 2 threads; "
                "transformers 5.24.0, torch 2.13.0+cpu, lengen 0123456789ab; 6.0 minutes of evaluation\n")

    def change():
        rows[3]["ppl"] = 3.9991   # printed 3.998 -> 3.999
        (folder / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}))

    assert_block_follows_data(copy, "huggingface.md", "hfeval tiny-lastseg", expected, change)


def test_the_docs_have_a_generated_block_for_every_committed_lm_eval_harness_run():
    pages = docs_pages()
    studies = sorted((ROOT / "docs" / "data" / "lmeval").iterdir())
    assert studies, "no committed lengen hf lm-eval"
    for folder in studies:
        assert f"<!-- generated: hflmeval {folder.name} -->" in pages, folder.name


def test_an_hflmeval_block_is_every_run_s_metrics_with_wilson_intervals(copy):
    """Hand-made `lengen hf lm-eval` folders (docs/data/lmeval/NAME/RUN: results.json's "lengen"
    record and results.csv) and their block, written out by hand: a row per task, metric, method
    and length; an accuracy as correct/n with its Wilson 95% interval (1 of 2: 0.095..0.905,
    0 of 2: 0..0.658), another metric as its value; the line naming model, device and versions."""
    env = {"lengen_commit": "0123456789abcdef", "torch": "2.13.0+cpu", "transformers": "5.24.0",
           "device": "cpu", "threads": 1}
    runs = {"rope-8192": ("rope", 8192, "8192", 0.5), "yarn-8192": ("yarn:factor=2", 8192, "acc", 0.0),
            "yarn-ppl": ("yarn:factor=2", 8192, "word_perplexity", 12.3456)}
    root = copy / "data" / "lmeval" / "tiny"

    def write(runs):
        for name, (method, length, metric, value) in runs.items():
            (root / name).mkdir(parents=True, exist_ok=True)
            record = {"gguf_file": "m.gguf", "model": "/x/m", "seconds": 90.0, "lm_eval": "0.4.13",
                      "environment": env}
            (root / name / "results.json").write_text(json.dumps({"results": {}, "lengen": record}))
            pd.DataFrame([{"task": "t", "metric": metric, "filter": "none", "value": value, "stderr": None,
                           "n": 2, "method": method, "max_length": length}]).to_csv(root / name / "results.csv", index=False)

    write(runs)
    expected = ("| task | metric | method | max length | value (95% Wilson interval) |\n"
                "|---|---|---|---|---|\n"
                "| t | 8192 | rope | 8,192 | 1/2 = 0.500 [0.095, 0.905] |\n"
                "| t | acc | yarn:factor=2 | 8,192 | 0/2 = 0.000 [0.000, 0.658] |\n"
                "| t | word_perplexity | yarn:factor=2 | 8,192 | 12.346 |\n"
                "\nm.gguf, `lengen hf lm-eval` (lm-eval 0.4.13); cpu, 1 thread; transformers 5.24.0, "
                "torch 2.13.0+cpu, lengen 0123456789ab; 4.5 minutes of evaluation\n")

    def change():
        write({**runs, "yarn-8192": ("yarn:factor=2", 8192, "acc", 0.5)})

    assert_block_follows_data(copy, "huggingface.md", "hflmeval tiny", expected, change)


def test_the_docs_have_a_generated_block_for_every_committed_hf_tune():
    pages = docs_pages()
    tunes = sorted((ROOT / "docs" / "data" / "hftune").iterdir())
    assert tunes, "no committed lengen hf tune"
    for folder in tunes:
        assert (f"<!-- generated: hftune {folder.name} -->" in pages
                or f"<!-- generated: hftune {folder.name} evaluation -->" in pages), folder.name


def test_an_hftune_versus_block_pairs_two_searches_by_sequence(copy):
    """`hftune_versus A B`: hand-made records of two searches on the same slices, and the block
    written out by hand. Tune slice: A's dpe NLLs (1.0, 2.0), B's self_extend (1.1, 2.3): differences
    +0.1, +0.3, mean +0.2, sd 0.1414, t(0.975, 1) = 12.706, half-width 12.706 x 0.1414 / sqrt 2 =
    1.2706. Evaluation: A's chosen (0.5, 0.7); B's chosen (0.6, 0.9): +0.15, half 12.706 x 0.05 =
    0.6353; B's rope (5.0, 6.0): +4.9, half 12.7062 x 0.4 = 5.0825. ppl = exp(mean NLL)."""
    meta = {"model_path": "/x/m", "gguf_file": "m.gguf", "length": 16384, "train_length": 8192, "segment": 1024,
            "tune_slice": [{}, {}], "eval_slice": [{}, {}], "tune_tokens": "t1", "eval_tokens": "e1",
            "dtype": "float32", "search_seconds": 600.0}

    def record(name, methods, ranking, evaluation, tune, evals, chosen):
        folder = copy / "data" / "hftune" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tune.json").write_text(json.dumps(
            {"meta": meta | {"methods": methods}, "ranking": ranking, "evaluation": evaluation, "chosen": chosen}))
        (folder / "tune_cache.json").write_text(json.dumps({"tune": tune, "eval": {"e1": evals}}))

    def write_b(b_eval=(0.6, 0.9)):
        record("b", ["self_extend"],
               [{"rank": 1, "spec": "self_extend:group=4", "method": "self_extend", "tune_ppl": math.exp(1.7),
                 "sequences": 2, "status": "done"}],
               [{"role": "chosen", "spec": "self_extend:group=4"}, {"role": "rope", "spec": "rope"}],
               {"self_extend:group=4": {"nll": [1.1, 2.3]}},
               {"self_extend:group=4": list(b_eval), "rope": [5.0, 6.0]}, "self_extend:group=4")

    record("a", ["dpe"],
           [{"rank": 1, "spec": "dpe:scales=2-4", "method": "dpe", "tune_ppl": math.exp(1.5), "sequences": 2,
             "status": "done"},
            {"rank": None, "spec": "dpe:scales=4-4", "method": "dpe", "tune_ppl": None, "sequences": 0,
             "status": "not run"}],
           [{"role": "chosen", "spec": "dpe:scales=2-4"}],
           {"dpe:scales=2-4": {"nll": [1.0, 2.0]}}, {"dpe:scales=2-4": [0.5, 0.7]}, "dpe:scales=2-4")
    write_b()
    expected = ("On the tune slice (each method's best finished setting; the difference is its mean NLL per "
                "sequence minus the reference's, lower is better):\n\n"
                "| method | best setting | search | tune ppl | minus the reference, nats |\n"
                "|---|---|---|---|---|\n"
                "| dpe | `dpe:scales=2-4` | a | 4.482 | (the reference) |\n"
                "| self_extend | `self_extend:group=4` | b | 5.474 | +0.2000 [-1.0706, +1.4706] (n=2) |\n"
                "\nOn the evaluation slice (the searches' chosen, default and plain RoPE settings):\n\n"
                "| setting | search (role) | ppl | minus `dpe:scales=2-4`, nats |\n"
                "|---|---|---|---|\n"
                "| `dpe:scales=2-4` | a (chosen) | 1.822 | (the reference) |\n"
                "| `self_extend:group=4` | b (chosen) | 2.117 | +0.1500 [-0.4853, +0.7853] (n=2) |\n"
                "| `rope` | b (rope) | 244.692 | +4.9000 [-0.1825, +9.9825] (n=2) |\n"
                "\nm.gguf at 16,384 tokens, last 1,024 tokens of 2 tune sequences and 2 evaluation sequences; "
                "95% t intervals over sequences. Cost: a: 2 sequence evaluations, 10.0 minutes of search; b: 2 "
                "sequence evaluations, 10.0 minutes of search.\n")
    assert_block_follows_data(copy, "huggingface.md", "hftune_versus a b", expected, lambda: write_b((0.6, 1.0)))


def test_an_hftune_versus_block_refuses_searches_on_other_slices(copy):
    """Two searches whose evaluation tokens differ are not paired: the check names the block."""
    for name, tokens in (("a", "e1"), ("b", "e2")):
        folder = copy / "data" / "hftune" / name
        folder.mkdir(parents=True)
        (folder / "tune.json").write_text(json.dumps({"meta": {"eval_tokens": tokens, "methods": ["dpe"]},
                                                      "ranking": [], "evaluation": []}))
        (folder / "tune_cache.json").write_text("{}")
    add_block(copy / "huggingface.md", "hftune_versus a b", "x\n")
    done = check(copy, copy / "data", only="a")
    assert done.returncode != 0 and "b differs from a in eval_tokens" in done.stdout + done.stderr


def test_an_hftune_block_is_the_search_s_scored_settings_and_the_evaluation(copy):
    """A hand-made `lengen hf tune` record (docs/data/hftune/NAME/tune.json) and its block, written
    out by hand: the scored settings in rank order (3 decimals), a count of those not reached, the
    evaluation slice's rows, and the line saying what was searched and what computed it (the
    sequences scored over every run: this record's last run, a resume, scored only 1 of the 4)."""
    env = {"lengen_commit": "0123456789abcdef", "torch": "2.11.0+cu130", "transformers": "5.17.0",
           "device": "cuda:0", "gpu": "NVIDIA H200"}
    meta = {"model_path": "/x/m", "gguf_file": "m.gguf", "length": 32768, "train_length": 8192, "segment": 1024,
            "tune_slice": [{}, {}], "eval_slice": [{}], "eval_text": None, "shared_documents": [], "budget": 2.0,
            "new_evaluations": 1, "search_seconds": 90.0, "dtype": "float32", "environment": env}
    ranking = [{"rank": 1, "spec": "self_extend:group=8,window=1024", "tune_ppl": 3.19165, "sequences": 2,
                "status": "done", "default": False},
               {"rank": 2, "spec": "yarn:factor=4", "tune_ppl": 3.48191, "sequences": 2, "status": "done",
                "default": True},
               {"rank": None, "spec": "yarn:factor=8", "tune_ppl": None, "sequences": 0, "status": "not run",
                "default": None}]
    evaluation = [{"role": "chosen", "spec": "self_extend:group=8,window=1024", "eval_ppl": 8.5362},
                  {"role": "rope", "spec": "rope", "eval_ppl": 4441.0566}]
    folder = copy / "data" / "hftune" / "tiny-tune"
    folder.mkdir(parents=True)
    write = lambda: (folder / "tune.json").write_text(json.dumps(   # noqa: E731
        {"meta": meta, "ranking": ranking, "evaluation": evaluation}))
    write()
    expected = ("| rank | setting | tune ppl | sequences | status | default |\n"
                "|---|---|---|---|---|---|\n"
                "| 1 | self_extend:group=8,window=1024 | 3.192 | 2/2 | done |  |\n"
                "| 2 | yarn:factor=4 | 3.482 | 2/2 | done | yes |\n"
                "\n"
                "1 more settings of the grid were not reached within the budget.\n"
                "\n"
                "| on the evaluation slice | setting | ppl |\n"
                "|---|---|---|\n"
                "| chosen | self_extend:group=8,window=1024 | 8.536 |\n"
                "| rope | rope | 4441.057 |\n"
                "\n"
                "m.gguf (trained to 8,192 tokens) tuned for 32,768 tokens: last 1,024 tokens of 2 tune and 1 "
                "evaluation sequence (the same text, other documents); budget 2 min, 4 sequence evaluations, "
                "1.5 minutes of search; float32, NVIDIA H200; transformers 5.17.0, torch 2.11.0+cu130, "
                "lengen 0123456789ab\n")

    def change():
        evaluation[0]["eval_ppl"] = 8.5371   # printed 8.536 -> 8.537
        write()

    assert_block_follows_data(copy, "huggingface.md", "hftune tiny-tune", expected, change)

    # `evaluation`: the same record without the ranking (a cached search reported on other text)
    evaluation[0]["eval_ppl"] = 8.5362
    write()
    tail = expected[expected.index("| on the evaluation slice"):]
    assert_block_follows_data(copy, "training_free.md", "hftune tiny-tune evaluation", tail, change)
    add_block(copy / "sweeps.md", "hftune tiny-tune ranking", "")
    done = check(copy, copy / "data", only="tiny-tune")
    assert done.returncode != 0 and "'evaluation' or nothing" in done.stdout + done.stderr


def test_a_bench_block_is_the_table_a_benchmark_printed(copy):
    """`bench PATH`: the caption line and the table of a raw benchmark output under docs/data,
    nothing else of the file; a changed number in the raw file is caught; a path outside
    docs/data is one clear message."""
    raw = copy / "data" / "benchmarks" / "tiny" / "many.txt"
    raw.parent.mkdir(parents=True)
    raw.write_text("rope 1 at a time  53.4 1.00x  260.3\n\n"
                   "reverse_string, 5 layers, device cuda:0, fp32\n"
                   "| encoding | N  | model-steps/s |\n"
                   "|----------|----|---------------|\n"
                   "| rope     | 64 | 403.6         |\n"
                   "host only: a note after the table\n")
    expected = ("reverse_string, 5 layers, device cuda:0, fp32\n\n"
                "| encoding | N  | model-steps/s |\n"
                "|----------|----|---------------|\n"
                "| rope     | 64 | 403.6         |\n")
    add_block(copy / "results" / "speed.md", "bench benchmarks/tiny/many.txt", expected)
    assert check(copy, copy / "data", only="benchmarks/tiny/many.txt").returncode == 0
    raw.write_text(raw.read_text().replace("403.6", "430.6"))
    done = check(copy, copy / "data", only="benchmarks/tiny/many.txt")
    assert done.returncode == 1 and "stale: results/speed.md: bench benchmarks/tiny/many.txt" in done.stdout
    # a script that prints its caption after the table
    (raw.parent / "below.txt").write_text("| tokens | s |\n|---|---|\n| 8 | 1.0 |\nrandom layout\n")
    add_block(copy / "results" / "speed.md", "bench benchmarks/tiny/below.txt",
              "random layout\n\n| tokens | s |\n|---|---|\n| 8 | 1.0 |\n")
    assert check(copy, copy / "data", only="benchmarks/tiny/below.txt").returncode == 0
    add_block(copy / "results" / "speed.md", "bench ../../etc/passwd")
    done = check(copy, copy / "data", only="../../etc/passwd")
    assert done.returncode not in (0, 1) and "Traceback" not in done.stderr and "under docs/data" in done.stderr


def test_a_hand_copied_table_of_measurements_is_found_until_it_is_marked(tmp_path):
    """A table of decimal numbers outside a generated block (and outside code) is a number copied
    by hand: --check names it (test_every_generated_block_matches_its_committed_data runs it on
    docs/); a `<!-- hand-written: why -->` line above it, a code fence around it, a generated
    block around it, or integers only, pass."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_docs import unmarked_tables

    page = tmp_path / "performance.md"
    table = "| encoding | steps/s |\n|---|---|\n| rope | 7.41 |\n"
    page.write_text("# Speed\n\nMeasured today:\n\n" + table)
    assert unmarked_tables(tmp_path) == ["performance.md:5"]
    page.write_text("# Accuracy\n\n| digits | accuracy |\n|---|---|\n| 8 | 91% |\n")  # a percentage too
    assert unmarked_tables(tmp_path) == ["performance.md:3"]
    for ok in ("<!-- hand-written: history, 2026-11-21 -->\n\n" + table, "```\n" + table + "```\n",
               "<!-- generated: bench x.txt -->\n" + table + "<!-- end generated -->\n",
               "| option | default |\n|---|---|\n| steps | 1000 |\n"):
        page.write_text("# Speed\n\n" + ok)
        assert unmarked_tables(tmp_path) == [], ok
    # the mark covers the table right below it, not the next one
    page.write_text("<!-- hand-written: a constant -->\n\n" + table + "\ntext\n\nmore text\n\n" + table)
    assert unmarked_tables(tmp_path) == ["performance.md:11"]


def test_a_summary_table_passes_only_with_numbers_its_page_s_blocks_show(tmp_path):
    """A results page opens with a summary table marked `<!-- numbers from: -->`: each of its
    numbers must be one a generated block of the page (or of a page the mark names) shows; a
    section folder's page is named by its path under docs/."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_docs import unmarked_tables

    (tmp_path / "results").mkdir()
    block = ("<!-- generated: bench x.txt -->\n| encoding | acc |\n|---|---|\n| rope | 71.5 |\n"
             "<!-- end generated -->\n")
    summary = "| claim | lengen |\n|---|---|\n| randomized helps | {} |\n"
    page = tmp_path / "results" / "demo.md"
    page.write_text("<!-- numbers from: -->\n" + summary.format("71.5") + "\n" + block)
    assert unmarked_tables(tmp_path) == []
    page.write_text("<!-- numbers from: -->\n" + summary.format("71.50%") + "\n" + block)
    assert unmarked_tables(tmp_path) == ["results/demo.md:4: 71.50%"]
    # the number shown on another page, named by its path
    (tmp_path / "results" / "other.md").write_text(block)
    page.write_text("<!-- numbers from: results/other.md -->\n" + summary.format("71.5") + "\n")
    assert unmarked_tables(tmp_path) == []
    page.write_text("<!-- numbers from: other.md -->\n" + summary.format("71.5") + "\n")
    assert unmarked_tables(tmp_path) == ["results/demo.md:2: no page other.md", "results/demo.md:4: 71.5"]


def test_a_number_in_prose_that_no_block_shows_is_found_until_it_is_sourced_or_marked(tmp_path):
    """A decimal number or integer percentage in a prose paragraph must be one that a generated
    block of its page shows (so it fails --check once the data changes it), or one that a
    `<!-- numbers from: PAGE -->` line points to, or its paragraph is marked
    `<!-- hand-written: why -->`. Versions, inline code and link targets are not numbers of a
    result."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_docs import unsourced_numbers

    block = ("<!-- generated: bench x.txt -->\n| encoding | steps/s |\n|---|---|\n| rope | 7.41 |\n"
             "<!-- end generated -->\n")
    page = tmp_path / "performance.md"
    page.write_text(block + "\nRoPE trains at 7.41 steps/s, not 7.14.\n")
    assert unsourced_numbers(tmp_path) == ["performance.md:7: 7.14"]
    page.write_text(block + "\nRoPE trains at 7.41 steps/s (+7.41 %), with torch 2.13.0, `--lr 3.5`, "
                    "[arXiv](https://arxiv.org/abs/2405.17399), arXiv 2305.16843.\n")
    assert unsourced_numbers(tmp_path) == []
    # 7.410 is not 7.41's digits, nor is 17.41; and a block's 17.41 does not show 7.41
    page.write_text(block + "\nAt 7.410 and 17.41.\n")
    assert unsourced_numbers(tmp_path) == ["performance.md:7: 7.410", "performance.md:7: 17.41"]
    page.write_text(block.replace("7.41", "17.41") + "\nAt 7.41.\n")
    assert unsourced_numbers(tmp_path) == ["performance.md:7: 7.41"]
    # another page's number: only where a line points to that page
    (tmp_path / "results.md").write_text("Trained at 7.41 steps/s.\n\n<!-- numbers from: performance.md -->\n"
                                         "Trained at 7.41 steps/s.\n")
    page.write_text(block)
    assert unsourced_numbers(tmp_path) == ["results.md:1: 7.41"]
    (tmp_path / "results.md").write_text("<!-- numbers from: perfromance.md -->\nTrained at 7.41 steps/s.\n")
    assert unsourced_numbers(tmp_path) == ["results.md:2: no page perfromance.md", "results.md:2: 7.41"]
    # the hand-written mark covers the paragraph right below it, not the next one
    (tmp_path / "results.md").write_text("<!-- hand-written: Adam's default -->\nbeta2 = 0.999\nand 0.9\n\n"
                                         "beta1 = 0.9\n")
    assert unsourced_numbers(tmp_path) == ["results.md:5: 0.9"]
    # code is not prose
    (tmp_path / "results.md").write_text("```\nlengen train --lr 0.001\n```\n")
    assert unsourced_numbers(tmp_path) == []
    # an integer percentage is a rounded score (a block's 72.7 does not show 73%), the level of an
    # interval is a setting
    (tmp_path / "results.md").write_text("<!-- generated: report x -->\n| 72.7 | 85.3 |\n<!-- end generated -->\n\n"
                                         "Abacus 73% at 6 digits, coupling 85% (a 95% t interval; 95 % CI).\n")
    assert unsourced_numbers(tmp_path) == ["results.md:5: 73"]


def test_the_committed_inspect_example_is_what_its_checkpoint_gives(tmp_path):
    """docs/inspect.md's table is the committed inspect_activations.json; that file must be what
    `lengen inspect` computes from the committed checkpoint (so a changed PCA, sampler or model
    fails here, not silently in the docs), and its score what `lengen eval` gives."""
    from lengen.inspect import activation_pca, open_run
    from lengen.che.loop import evaluate_run
    from lengen.training.run_dir import RunDir

    pages = docs_pages()
    for folder in sorted((ROOT / "docs" / "data" / "inspect").iterdir()):
        assert f"<!-- generated: inspect {folder.name} -->" in pages, folder.name
        record = json.loads((folder / "inspect_activations.json").read_text())
        insp = open_run(folder, length=record["length"], device="cpu")
        layers = activation_pca(insp, record["samples"], record["seed"])
        assert [pytest.approx(d["ratio"], rel=1e-6) for d in layers] == \
            [layer["explained_variance_ratio"] for layer in record["layers"]], folder.name
        run = shutil.copytree(folder, tmp_path / folder.name)
        (run / "eval.json").unlink()
        score = evaluate_run(RunDir(run), progress=False)["score"]
        assert score == pytest.approx(json.loads((folder / "eval.json").read_text())["score"], rel=1e-6)


def test_the_costs_block_sums_each_study_s_recorded_run_times(tmp_path):
    """`costs`: one row per committed study, from its results.csv `seconds` and environment.csv;
    the expected row worked out by hand (3,600 s in all: 1.00 hours)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_docs import Blocks

    study = tmp_path / "studies" / "tiny"
    study.mkdir(parents=True)
    (study / "results.csv").write_text("run_id,score,seconds\na,0.5,100\nb,0.6,3300\nc,0.7,200\n")
    (study / "environment.csv").write_text("run_id,device,threads\na,cpu,1\nb,cpu,1\nc,cuda,1\n")
    table = Blocks(tmp_path, tmp_path).costs()
    assert table.splitlines()[2] == "| tiny | 3 | cpu, 1 thread; cuda, 1 thread | 100 / 200 / 3,300 | 1.00 |"
    assert "| su2023-mlm-h2 | 10 |" in Blocks(ROOT / "docs" / "data", tmp_path).costs()


def test_nothing_points_into_shared():
    """The reference notes and seeds in ../shared/ are not part of the repository: no page, README
    line, docstring or preset may send a reader there (cite the paper instead)."""
    root = ROOT
    pattern = re.compile(r"\.\./shared|shared/(reference|seeds)|reference note")
    files = [root / "README.md", *PAGES,
             *sorted((root / "lengen").rglob("*.py")), *sorted((root / "lengen").rglob("*.yaml"))]
    found = [f"{p.relative_to(root)}:{i}: {line.strip()}" for p in files
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, "\n".join(found)
