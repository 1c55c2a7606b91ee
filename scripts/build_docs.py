"""Rebuild every generated table (and figure) in docs/ from the results committed in docs/data/.

    python scripts/build_docs.py            # rewrite the generated blocks and figures
    python scripts/build_docs.py --check    # exit 1 naming each block that differs from its data

A generated block in a docs page is the text between

    <!-- generated: KIND ARGS -->
    <!-- end generated -->

and KIND ARGS say what it shows (Blocks below; quote an argument with spaces, as a shell would), e.g. `che ruoss2023-mini table1` is Table 1 of the
export in docs/data/studies/ruoss2023-mini, computed by `lengen report`'s own functions, and
`report fire2024-mini lm_table.md` is that file of the study's `lengen report` (any sweep kind),
`lm STUDY versus BASE` a language-model study's rows against BASE (`lengen report --versus`),
`mlm STUDY hypotheses` Su's H1-H5 in a masked-LM study with paired intervals, `lmrun RUN` and
`lmeval RUN PROTOCOL` a committed `lengen lm train` run and one of its `lengen lm eval` tables
(docs/data/lm/RUN), `hfeval NAME` a committed `lengen hf eval` (docs/data/hf/NAME), `hflmeval NAME`
committed `lengen hf lm-eval` runs (docs/data/lmeval/NAME/*/), `hftune NAME`
a committed `lengen hf tune` (docs/data/hftune/NAME; `hftune NAME evaluation`: its evaluation
slice alone, for a cached search reported on other text), `inspect RUN` the `lengen inspect` example
(docs/data/inspect/RUN), `hfexport list` which engines run which methods (`lengen hf export
--list`), `costs` what each committed study took to run, `bench PATH`
the table of a benchmark's raw output (docs/data/PATH, e.g. a GPU session's), `traffic PATH` the
group step's memory traffic change by change (benchmarks/step_traffic.py --json lines in docs/data/PATH). `--only NAME`
rebuilds one study's or run's blocks. A doc claim that compares two variants cites the block it
rests on. A table of measured numbers outside a block fails --check unless a line
`<!-- hand-written: WHY -->` right above it says why it is not data (a constant, a quote, dated
history). So does a decimal number in a prose paragraph that no block of its page shows
(`unsourced_numbers`; `<!-- numbers from: PAGE.md -->` above a paragraph adds that page's
blocks; a page is named by its path under docs/, e.g. results/demo.md). tests/test_docs_data.py runs --check, and checks that changing a committed score or a
number in a block makes it fail.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from lengen import io  # noqa: E402
from lengen.formatting import count_noun  # noqa: E402
from lengen.hf.evaluate import plot_result as plot_hf_result  # noqa: E402
from lengen.hf.evaluate import result_table as hf_result_table  # noqa: E402
from lengen.hf.exporting import support_matrix  # noqa: E402
from lengen.hf.tune_report import evaluation_source  # noqa: E402
from lengen.inspect import inspect_run  # noqa: E402
from lengen.lm.evaluate import plot_title  # noqa: E402
from lengen.protocols.report import pivot_table, plot_results  # noqa: E402
from lengen.reports import che_aggregate as agg  # noqa: E402
from lengen.reports import che  # noqa: E402
from lengen.reports import published as pub  # noqa: E402
from lengen.reports import stats  # noqa: E402
from lengen.reports.build import build_report  # noqa: E402
from lengen.reports.che_compare import compare_variants, comparison_markdown, versus, versus_markdown  # noqa: E402
from lengen.reports.lm_compare import lm_versus_text  # noqa: E402
from lengen.reports.mlm_compare import hypotheses_markdown, mlm_versus_text, su_hypotheses  # noqa: E402
from lengen.reports.load import load_sweep  # noqa: E402
from lengen.reports.render import markdown, markdown_rows, simple_markdown  # noqa: E402
from lengen.reports.stats import wilson  # noqa: E402
from lengen.che.plots import plot_accuracy  # noqa: E402

def doc_pages(docs: Path) -> list[Path]:
    """The site's pages: every .md under `docs` (sections are folders), not the results in
    docs/data/. A page is named by its path under `docs` (results/demo.md)."""
    return sorted(p for p in docs.rglob("*.md") if p.relative_to(docs).parts[0] != "data")


def page_name(page: Path, docs: Path) -> str:
    return page.relative_to(docs).as_posix()


BLOCK = re.compile(r"(<!-- generated: (?P<args>[^>]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


class BlockError(Exception):
    """A block that names no data or no kind: one line, exit 2."""


class Blocks:
    """What each block kind shows, from the committed results under `data`."""

    def __init__(self, data: Path, workdir: Path):
        self.data = data
        self.workdir = workdir  # where `report` blocks build each study's report once

    @functools.cache  # noqa: B019 - one Blocks per build
    def runs(self, study: str):
        return che.variant_runs(load_sweep(self.data / "studies" / study))

    def che(self, study: str, what: str, *args: str) -> str:
        runs = self.runs(study)
        if what == "table1":
            return markdown(agg.table1(runs))
        if what == "table4":
            mean, std, _ = agg.table4(runs)
            return markdown(mean, std=std)
        if what == "seed_stats":
            stats = agg.seed_statistics(runs)
            return che.seeds_caption(stats) + "; mean ± sample std [95% t interval]\n\n" + che.stats_markdown(stats)
        if what == "by_lr":
            return che.lr_markdown(agg.by_lr(runs))
        if what == "in_range":
            done = runs[runs["accuracy_in_train_range"].notna()]
            best = agg.best_runs(runs).set_index(["task", "variant"])["accuracy_in_train_range"].astype(float)
            table = (100 * best).unstack("variant").reindex(index=agg.ordered_tasks(done["task"].unique()),
                                                            columns=agg.ordered_variants(runs))
            return markdown(table, bold_max=False, average=False)
        if what == "paper":
            t1 = agg.table1(runs)
            cmp = pub.compare(t1, runs)
            return che.comparison_text(cmp) + "\n" + simple_markdown(cmp["cells"])
        if what == "compare":
            a, b = args
            return comparison_markdown(compare_variants(runs, a, b), a, b) + "\n"
        if what == "versus":
            (base,) = args
            return versus_markdown(versus(runs, base), base)
        raise KeyError(f"che {what}")

    def lm(self, study: str, what: str, base: str) -> str:
        """`lm STUDY versus BASE`: a language-model study's rows against BASE, seed by seed at
        each length (`lengen report STUDY --versus BASE`)."""
        if what != "versus":
            raise KeyError(f"lm {what}")
        return lm_versus_text(load_sweep(self.data / "studies" / study), base)

    def mlm(self, study: str, what: str, *args: str) -> str:
        """`mlm STUDY hypotheses`: Su's H1-H5 with paired intervals; `mlm STUDY versus ROW`: every
        other row of a masked-LM study against ROW (`lengen report STUDY --versus ROW`)."""
        data = load_sweep(self.data / "studies" / study)
        if what == "hypotheses":
            return hypotheses_markdown(su_hypotheses(data.runs, data.values))
        if what == "versus":
            (base,) = args
            return mlm_versus_text(data, base)
        raise KeyError(f"mlm {what}")

    def lmrun(self, run: str) -> str:
        """`lmrun RUN`: a committed `lengen lm train` run (docs/data/lm/RUN: eval.json) as its
        validation perplexity and unigram baseline, its last training loss and what computed it."""
        rec = io.read_json(self.data / "lm" / run / "eval.json")
        env = rec["environment"]

        def ppl(value: float) -> str:
            return f"**{value:.3f}** ({math.log2(value):.3f} bits/byte)"

        rows = [[f"validation perplexity at the training length ({rec['val_tokens'] // rec['train_length']} "
                 f"windows, {rec['val_tokens']:,} bytes)", ppl(rec["val_ppl"])],
                ["unigram baseline on the same targets", ppl(rec["unigram_ppl"])],
                ["final training loss (mean of the last logged steps)", f"{rec['train_loss']:.3f} nats"]]
        return (markdown_rows(["", "value"], rows) +
                f"\n{rec['parameters']:,} parameters, {rec['steps']} steps, {rec['train_seconds']:,.0f} s of training; "
                f"lengen {(env['lengen_commit'] or '')[:12]}, torch {env['torch']}, {env['device']}, "
                f"{count_noun(env['threads'], 'thread')}\n")

    def lmeval(self, run: str, protocol: str) -> str:
        """`lmeval RUN PROTOCOL`: the methods x lengths table of a committed `lengen lm eval`
        (docs/data/lm/RUN/eval-PROTOCOL: results.csv and results.json, whose `metric` names the
        column), as the command prints it."""
        folder = self.data / "lm" / run / f"eval-{protocol}"
        rows = pd.read_csv(folder / "results.csv").to_dict("records")
        return pivot_table(rows, io.read_json(folder / "results.json")["metric"]) + "\n"

    def hfeval(self, name: str) -> str:
        """`hfeval NAME`: a committed `lengen hf eval` (docs/data/hf/NAME: results.json, its
        --out folder's record) as the command prints its table, and what computed it."""
        result = io.read_json(self.data / "hf" / name / "results.json")
        meta, env = result["meta"], result["meta"]["environment"]
        model = meta.get("gguf_file") or Path(meta["model_path"]).name
        size = (f"{count_noun(meta['trials'], 'prompt')} per cell"
                if meta["protocol"] in ("passkey", "ruler") else count_noun(meta['docs'], 'document'))
        threads = f", {count_noun(env['threads'], 'thread')}" if env["device"] == "cpu" else ""
        seconds = sum(r["seconds"] for r in {(r["method"], r["length"]): r for r in result["rows"]}.values())
        return (hf_result_table(result).rstrip("\n") + f"\n\n{model} ({meta['model_type']}, trained to {meta['train_length']:,} "
                f"tokens), {meta['protocol']}, {size}; {meta['dtype']}, {meta['attn']}, {env['device']}{threads}; "
                f"{versions(env)}; {seconds / 60:,.1f} minutes of evaluation\n")

    def hflmeval(self, name: str) -> str:
        """`hflmeval NAME`: committed `lengen hf lm-eval` runs (docs/data/lmeval/NAME/*/: each --out
        folder's results.json and results.csv, one method at one --max-length) as one table: each
        task's metric by method and length, with n; an accuracy (acc, or a RULER length's score,
        one 0/1 per prompt for its single-needle tasks) with its Wilson 95% interval."""
        rows, records = [], []
        for folder in sorted(p for p in (self.data / "lmeval" / name).iterdir() if p.is_dir()):
            record = io.read_json(folder / "results.json")["lengen"]
            records.append(record)
            for r in pd.read_csv(folder / "results.csv").to_dict("records"):
                value, n = float(r["value"]), int(r["n"])
                cell = f"{value:.3f}"
                if r["metric"] == "acc" or str(r["metric"]).isdigit():
                    low, high = wilson(round(value * n), n)
                    cell = f"{round(value * n)}/{n} = {value:.3f} [{low:.3f}, {high:.3f}]"
                rows.append((r["task"], r["method"], int(r["max_length"]), str(r["metric"]), cell))
        env = records[0]["environment"]
        model = records[0]["gguf_file"] or Path(records[0]["model"]).name
        minutes = sum(r["seconds"] for r in records) / 60
        rows = [[task, metric, method, f"{length:,}", cell] for task, method, length, metric, cell in sorted(rows)]
        return (markdown_rows(["task", "metric", "method", "max length", "value (95% Wilson interval)"], rows)
                + f"\n{model}, `lengen hf lm-eval` (lm-eval {records[0].get('lm_eval', '?')}); {env['device']}, "
                f"{count_noun(env['threads'], 'thread')}; {versions(env)}; {minutes:,.1f} minutes of evaluation\n")

    def hftune(self, name: str, part: str = "all") -> str:
        """`hftune NAME`: a committed `lengen hf tune` (docs/data/hftune/NAME/tune.json): the settings
        the search scored, ranked, the chosen one, plain RoPE and the method's default on the
        evaluation slice, and what computed it (meta.environment, or environment.json beside it).
        `hftune NAME evaluation` leaves the ranking out: for a rerun of a search another block shows,
        reported on other text (--eval-text)."""
        if part not in ("all", "evaluation"):
            raise ValueError(f"hftune {name}: the part is 'evaluation' or nothing, not {part!r}")
        folder = self.data / "hftune" / name
        out = io.read_json(folder / "tune.json")
        meta = out["meta"]
        env = meta.get("environment") or io.read_json(folder / "environment.json")
        n = len(meta["tune_slice"])
        scored = [r for r in out["ranking"] if r["status"] != "not run"]
        rows = [[str(r["rank"] or ""), r["spec"], "" if r["tune_ppl"] is None else f"{r['tune_ppl']:.3f}",
                 f"{r['sequences']}/{n}", r["status"], "yes" if r["default"] else ""] for r in scored]
        table = markdown_rows(["rank", "setting", "tune ppl", "sequences", "status", "default"], rows)
        unreached = len(out["ranking"]) - len(scored)
        # over every run into the same --out (meta.new_evaluations counts the last run's alone)
        sequences = scored_sequences(out)
        evaluation = markdown_rows(["on the evaluation slice", "setting", "ppl"],
                                   [[e["role"], e["spec"], f"{e['eval_ppl']:.3f}"] for e in out["evaluation"]])
        model = meta.get("gguf_file") or Path(meta["model_path"]).name
        device = env.get("gpu") or env["device"]
        search = "" if part == "evaluation" else (
            f"{table}\n" + (f"{unreached} more settings of the grid were not reached within the budget.\n"
                            if unreached else "") + "\n")
        return (f"{search}{evaluation}\n"
                f"{model} (trained to {meta['train_length']:,} tokens) tuned for {meta['length']:,} tokens: "
                f"last {meta['segment']:,} tokens of {n} tune and {count_noun(len(meta['eval_slice']), 'evaluation sequence')} "
                f"({evaluation_source(meta)}); budget {meta['budget']:g} min, {sequences} sequence evaluations, "
                f"{meta['search_seconds'] / 60:.1f} minutes of search; {meta['dtype']}, {device}; "
                f"{versions(env)}\n")

    def hftune_versus(self, name: str, *others: str) -> str:
        """`hftune_versus NAME OTHER...`: one committed search (NAME, e.g. DPE's) against others
        on the same model, length, segment and slices (their token digests must agree): each
        method's best finished setting on the tune slice, then every setting scored on the
        evaluation slice, each as its perplexity and its paired difference in mean NLL per
        sequence from NAME's (its best, then its chosen setting), with a 95% t interval over the
        n sequences (n = 2 gives a wide one), and each search's cost."""
        folder = self.data / "hftune"
        searches = {n: (io.read_json(folder / n / "tune.json"), io.read_json(folder / n / "tune_cache.json"))
                    for n in (name, *others)}
        first = searches[name][0]["meta"]
        for n, (out, _) in searches.items():
            differs = [k for k in ("gguf_file", "length", "segment", "tune_tokens", "eval_tokens", "train_length",
                                   "dtype", "precision") if out["meta"].get(k) != first.get(k)]
            if differs:
                raise ValueError(f"hftune_versus: {n} differs from {name} in {', '.join(differs)}")

        def ppl(nll):
            return f"{math.exp(sum(nll) / len(nll)):.3f}"

        def versus_cell(nll, base):
            if nll is base:
                return "(the reference)"
            d = stats.paired(dict(enumerate(nll)), dict(enumerate(base))).difference
            return f"{d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}] (n={d.n})" if d.n >= 2 else f"{d.mean:+.4f} (n={d.n})"

        # the tune slice: each method's best setting scored on every sequence
        bests = {}
        for n, (out, cache) in searches.items():
            for r in (r for r in out["ranking"] if r["status"] == "done"):
                if r["method"] not in bests or r["tune_ppl"] < bests[r["method"]][1]["tune_ppl"]:
                    bests[r["method"]] = (n, r, cache["tune"][r["spec"]]["nll"])
        reference = bests[searches[name][0]["meta"]["methods"][0]][2]
        tune_rows = [[method, f"`{r['spec']}`", n, ppl(nll), versus_cell(nll, reference)]
                     for method, (n, r, nll) in sorted(bests.items(), key=lambda kv: kv[1][1]["tune_ppl"])]
        # the evaluation slice: every setting either search scored there
        scored = {}
        for n, (out, cache) in searches.items():
            for e in out["evaluation"]:
                scored.setdefault(e["spec"], (n, e["role"], cache["eval"][first["eval_tokens"]][e["spec"]]))
        chosen = searches[name][0]["chosen"]
        base = scored[chosen][2]
        eval_rows = [[f"`{spec}`", f"{n} ({role})", ppl(nll), versus_cell(nll, base)]
                     for spec, (n, role, nll) in sorted(scored.items(), key=lambda kv: sum(kv[1][2]))]
        cost = "; ".join(f"{n}: {scored_sequences(out)} "
                         f"sequence evaluations, {out['meta']['search_seconds'] / 60:.1f} minutes of search"
                         for n, (out, _) in searches.items())
        return ("On the tune slice (each method's best finished setting; the difference is its mean NLL "
                "per sequence minus the reference's, lower is better):\n\n"
                + markdown_rows(["method", "best setting", "search", "tune ppl", "minus the reference, nats"],
                                tune_rows)
                + "\nOn the evaluation slice (the searches' chosen, default and plain RoPE settings):\n\n"
                + markdown_rows(["setting", "search (role)", "ppl", f"minus `{chosen}`, nats"], eval_rows)
                + f"\n{first['gguf_file']} at {first['length']:,} tokens, last {first['segment']:,} tokens of "
                f"{count_noun(len(first['tune_slice']), 'tune sequence')} and "
                f"{count_noun(len(first['eval_slice']), 'evaluation sequence')}; 95% t intervals over sequences. "
                f"Cost: {cost}.\n")

    def inspect(self, run: str) -> str:
        """`inspect RUN`: the committed `lengen inspect` example (docs/data/inspect/RUN: the run's
        eval.json and the PCA's inspect_activations.json): each block output's share of the
        training-length variance in the two components, and the run's score."""
        folder = self.data / "inspect" / run
        pca, score = io.read_json(folder / "inspect_activations.json"), io.read_json(folder / "eval.json")
        rows = [[str(layer["layer"]), *(f"{100 * r:.1f}" for r in layer["explained_variance_ratio"]),
                 f"{100 * sum(layer['explained_variance_ratio']):.1f}"] for layer in pca["layers"]]
        table = markdown_rows(["layer", "PC1 (%)", "PC2 (%)", "PC1 + PC2 (%)"], rows)
        return (f"{table}\n{pca['task']}, pe={pca['pe']}, positions={pca['positions']} "
                f"(test: {pca['test_positions']}), "
                f"score {score['score']:.3f} on lengths {score['train_length'] + 1}..{score['max_length']} "
                f"({score['steps']:,} steps); PCA fitted at length {pca['train_length']} on {pca['samples']} "
                f"sequences, length {pca['length']} projected; `{pca['command']}`\n")

    def costs(self) -> str:
        """`costs`: what each committed study cost to run, from its results.csv (`seconds`: a run's
        wall time, training and evaluation, as recorded) and environment.csv (device, threads)."""
        rows = []
        for study in sorted(p for p in (self.data / "studies").iterdir() if (p / "results.csv").exists()):
            runs = pd.read_csv(study / "results.csv")
            env = pd.read_csv(study / "environment.csv").drop_duplicates("run_id").set_index("run_id")
            where = sorted({f"{env.at[r, 'device']}, {count_noun(int(env.at[r, 'threads']), 'thread')}"
                            for r in runs["run_id"] if r in env.index})
            sec = runs["seconds"].astype(float)
            rows.append([study.name, str(len(runs)), "; ".join(where) or "-",
                         f"{sec.min():,.0f} / {sec.median():,.0f} / {sec.max():,.0f}", f"{sec.sum() / 3600:,.2f}"])
        return markdown_rows(["study", "runs", "device, threads a run", "seconds a run (min / median / max)",
                              "hours of run time (sum)"], rows) + "\n"

    @functools.cache  # noqa: B019 - one Blocks per build
    def report_folder(self, study: str) -> Path:
        out = self.workdir / study
        build_report(self.data / "studies" / study, out)
        return out

    def report(self, study: str, name: str) -> str:
        """A Markdown file of the study's `lengen report` (any kind: lm_table.md, lm_intervals.md,
        mlm_table.md, arith tables, ...), as the report writes it."""
        if Path(name).name != name or not name.endswith(".md"):
            raise ValueError(f"report block names a report's .md file, got {name!r}")
        return (self.report_folder(study) / name).read_text()

    def environment(self, study: str) -> str:
        """What computed a study's runs: one line per distinct environment, with its run count."""
        folder = self.data / "studies" / study
        env = pd.read_csv(folder / "environment.csv", dtype=str).fillna("")
        planned = io.read_json(folder / "export.json")["planned"]
        cols = [c for c in ("lengen_commit", "torch", "transformers", "device", "gpu", "cpu_capability", "threads")
                if c in env]
        # the blank line: in MkDocs a list right after a paragraph line is that paragraph's text
        lines = [f"{len(env)} of {planned} planned runs finished; computed with:", ""]
        for values, group in env.groupby(cols, sort=False):
            parts = [f"{c.replace('_commit', '')} {v}" for c, v in zip(cols, values) if v and c != "threads"]
            threads = dict(zip(cols, values)).get("threads", "")
            lines.append(f"- {len(group)} runs: " + ", ".join(parts) +
                         (f", {count_noun(int(threads), 'CPU thread')} per run" if threads else ""))
        return "\n".join(lines) + "\n"

    def demo(self, folder: str) -> str:
        runs = demo_runs(self.data, folder)
        bands = [b["lengths"] for b in runs["standard"]["bands"]]
        rows = [[band, *(f"{r['bands'][i]['accuracy']:.3f}" for r in runs.values())] for i, band in enumerate(bands)]
        n = runs["standard"]["train_length"]
        rows.append([f"score ({n + 1}-{runs['standard']['max_length']})",
                     *(f"{r['score']:.3f}" for r in runs.values())])
        env = runs["standard"]["environment"]
        header = ["lengths", "rope (standard positions)", "rope (randomized positions)"]
        return (markdown_rows(header, rows) + f"\nlengen {env['lengen_commit']}, torch {env['torch']}, "
                f"{env['device']}, {count_noun(env['threads'], 'thread')}\n")

    def bench(self, path: str) -> str:
        """`bench PATH`: the table a benchmark script printed, from its raw output committed under
        docs/data/ (PATH relative to it), with the line that says what was run: the one above the
        table, or where there is none, the one right below it."""
        file = (self.data / path).resolve()
        if self.data.resolve() not in file.parents:
            raise ValueError(f"bench block names a file under docs/data, got {path!r}")
        lines = file.read_text().splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
        if start is None:
            raise ValueError(f"{path} holds no table")
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        caption = lines[start - 1].lstrip("# ").strip() if start and lines[start - 1].strip() else ""
        if not caption and end < len(lines):
            caption = lines[end].lstrip("# ").strip()
        return (f"{caption}\n\n" if caption else "") + "\n".join(lines[start:end]) + "\n"

    def traffic(self, path: str) -> str:
        """`traffic PATH`: the memory traffic of a group training step, change by change, with a
        CPU group's rate beside each: the JSON lines benchmarks/step_traffic.py --json appended to
        docs/data/PATH (a change's CPU rate: the median of its timings)."""
        file = (self.data / path).resolve()
        if self.data.resolve() not in file.parents:
            raise ValueError(f"traffic block names a file under docs/data, got {path!r}")
        records = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
        first = records[0]
        rows = []
        for label in dict.fromkeys(r["label"] for r in records):
            mine = [r for r in records if r["label"] == label]
            gb = {r["precision"]: r["gb_per_model_step"] for r in mine}
            cpu = [r["cpu_model_steps_per_s"] for r in mine if r.get("cpu_model_steps_per_s")]
            bandwidth = first["bandwidth_tb_s"] * 1e3  # GB/s
            rows.append([label, *(f"{gb[p]:.2f}" if p in gb else "" for p in ("fp32", "bf16")),
                         " / ".join(f"{bandwidth / gb[p]:,.0f}" for p in ("fp32", "bf16") if p in gb),
                         f"{statistics.median(cpu):.2f} ({len(cpu)})" if cpu else ""])
        timed = next(r for r in records if r.get("cpu_model_steps_per_s"))
        header = ["change", "GB / model-step, fp32", "bf16",
                  f"model-steps/s at {first['bandwidth_tb_s']} TB/s (fp32 / bf16)",
                  f"CPU model-steps/s, a group of {timed['cpu_models']} (median of n)"]
        caption = (f"{first['task']}, {first['encoding']}, {first['layers']} layers, d_model {first['d_model']}, "
                   f"batch {first['batch_size']}, U{{1..{first['train_length']}}}, a group of {first['models']} "
                   f"counted on the meta device over {first['steps']} steps (buckets {first['buckets']}), torch "
                   f"{first['torch']}; CPU: {count_noun(timed['cpu_threads'], 'thread')}, "
                   f"{count_noun(timed['cpu_steps'], 'step')} after a warm-up, fp32")
        return caption + "\n\n" + markdown_rows(header, rows)

    def hfexport(self, what: str) -> str:
        """`hfexport list`: which engines run which methods (`lengen hf export --list`), from the
        one table in lengen.hf.exporting."""
        if what != "list":
            raise KeyError(f"hfexport {what}")
        return "```text\n" + support_matrix() + "\n```\n"

    def render(self, args: str) -> str:
        kind, *rest = shlex.split(args)  # a variant label with spaces is quoted
        return getattr(self, kind)(*rest)


def scored_sequences(tune: dict) -> int:
    """A committed `lengen hf tune` record's sequence evaluations, over every run into its --out."""
    return sum(r["sequences"] for r in tune["ranking"] if r["status"] != "not run")


def versions(env: dict) -> str:
    """What an hf record was computed with: transformers, torch and lengen's commit."""
    return f"transformers {env['transformers']}, torch {env['torch']}, lengen {(env['lengen_commit'] or '')[:12]}"


def demo_runs(data: Path, folder: str) -> dict:
    """The committed `lengen demo` runs in docs/data/demo/<folder>: eval.json by positions."""
    return {p: io.read_json(data / "demo" / folder / f"rope-{p}" / "eval.json") for p in ("standard", "randomized")}


def figures(data: Path, docs: Path) -> list[Path]:
    """The figures docs show from committed results: the demo's accuracy against length (its
    2-thread runs, as `lengen demo` plots them), each CHE study's Fig. 4 per task, as
    docs/figures/<study>_<task>.png (the study's dashes as underscores), each LM, MLM or
    arithmetic study's metric against length and each arithmetic variant's heat map."""
    made = []
    runs = demo_runs(data, "threads-2")
    curves = {f"rope ({p} positions)": {int(n): a for n, a in r["accuracy_by_length"].items()} for p, r in runs.items()}
    target = docs / "figures" / "bucket_sort_rope_standard_vs_randomized.png"
    plot_accuracy(curves, runs["standard"]["train_length"], target, title="bucket_sort: standard vs randomized positions")
    made.append(target)
    # each committed `lengen lm eval`: its metric against length, as the command plots it
    for folder in sorted((data / "lm").glob("*/eval-*")):
        meta = io.read_json(folder / "results.json")
        rows = pd.read_csv(folder / "results.csv").to_dict("records")
        target = docs / "figures" / f"lm_{folder.parent.name}_{folder.name.removeprefix('eval-')}.png".replace("-", "_")
        plot_results(rows, meta["metric"], meta["train_length"], target,
                     plot_title(meta["pe"], meta["train_length"], meta["protocol"], meta.get("segment")))
        made.append(target)
    # each committed `lengen hf eval` that a page shows as a figure: its plot, as the command draws it
    pages = "".join(page.read_text() for page in doc_pages(docs))
    for folder in sorted((data / "hf").glob("*/")) if (data / "hf").is_dir() else []:
        target = docs / "figures" / f"hf_{folder.name}.png".replace("-", "_")
        if f"figures/{target.name}" in pages:
            made.append(plot_hf_result(io.read_json(folder / "results.json"), target))
    # the `lengen inspect` example: its activation figure, redrawn from the committed checkpoint in a
    # copy named as the page's command names it, so the figure's caption is that command
    for run in sorted((data / "inspect").glob("*/")) if (data / "inspect").is_dir() else []:
        target = docs / "figures" / f"inspect_activations_{run.name}.png".replace("-", "_")
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copytree(run, Path(tmp) / "runs" / run.name)
            record = io.read_json(run / "inspect_activations.json")
            cwd = Path.cwd()
            os.chdir(tmp)
            try:
                inspect_run(f"runs/{run.name}", attention=False, length=record["length"], seed=record["seed"],
                            samples=record["samples"], device="cpu")
            finally:
                os.chdir(cwd)
            shutil.copyfile(Path(tmp) / "runs" / run.name / "inspect_activations.png", target)
        made.append(target)
    studies = data / "studies"
    for study in sorted(p for p in studies.iterdir() if (p / "export.json").exists()) if studies.is_dir() else []:
        with tempfile.TemporaryDirectory() as tmp:
            build_report(study, tmp)
            # a CHE study's Fig. 4 per task; an LM, MLM or arithmetic study's metric against
            # length; an arithmetic study's heat map per variant
            for fig in sorted([*Path(tmp).glob("fig4_*.png"), *Path(tmp).glob("*_vs_length.png"),
                               *Path(tmp).glob("heatmap-*.png")]):
                target = docs / "figures" / f"{study.name.replace('-', '_')}_{fig.stem.removeprefix('fig4_')}.png"
                shutil.copyfile(fig, target)
                made.append(target)
    return made


def build(docs: Path, data: Path, check: bool, only: str | None = None) -> list[str]:
    """Rewrite (or, with `check`, compare) every generated block of the pages under docs/, or
    only those of one study or demo folder (`only`: the block's second word). Returns the blocks that differ
    (check) or were rewritten, as "page: args"."""
    with tempfile.TemporaryDirectory() as workdir:
        return _build(docs, Blocks(data, Path(workdir)), check, only)


def _build(docs: Path, blocks: Blocks, check: bool, only: str | None = None) -> list[str]:
    changed = []
    for page in doc_pages(docs):
        text = page.read_text()

        def fill(m, page=page_name(page, docs)):
            if only is not None and shlex.split(m["args"])[1:2] != [only]:
                return m[0]
            try:
                body = blocks.render(m["args"])
            except (AttributeError, KeyError, TypeError, ValueError, OSError) as e:
                raise BlockError(f"build_docs: {page}: block `{m['args']}` cannot be built "
                                 f"({type(e).__name__}: {e})") from None
            if body != m["body"]:
                changed.append(f"{page}: {m['args']}")
            return m[1] + body + m[4]

        new = BLOCK.sub(fill, text)
        if not check and new != text:
            io.write_text(page, new)
    return changed


#: a measured-looking cell: a decimal number or a percentage
DECIMAL = re.compile(r"(?<![\w.])\d+(?:\.\d+%?|%)")
MARK = "<!-- hand-written:"
FROM = "<!-- numbers from:"


def _found(number: str, text: str) -> bool:
    return re.search(r"(?<![\d.])" + re.escape(number) + r"(?!\d)", text) is not None


def _code_or_block(lines: list[str]) -> list[bool]:
    """Per line: inside a code fence or a generated block, its opening and closing lines included
    (text that is not the page's own prose or tables)."""
    hidden, fence, generated = [], False, False
    for line in lines:
        marker = line.lstrip().startswith("```")
        if marker:
            fence = not fence
        elif not fence and line.startswith("<!-- generated:"):
            generated = True
        hidden.append(marker or fence or generated)
        if not fence and line.startswith("<!-- end generated"):
            generated = False
    return hidden


def _shown(docs: Path) -> dict[str, str]:
    """Per page name: the text of its generated blocks (where a page's numbers may come from)."""
    return {page_name(p, docs): "\n".join(m["body"] for m in BLOCK.finditer(p.read_text()))
            for p in doc_pages(docs)}


def _from_pages(mark: str, name: str, shown: dict[str, str]) -> tuple[str, list[str]]:
    """The block text a `<!-- numbers from: PAGE.md ... -->` mark on page `name` draws on (its own
    page's blocks and the named pages'), and the names that are no page."""
    others = mark.strip()[len(FROM):].split("-->")[0].split()
    return (shown[name] + "\n".join(shown.get(p, "") for p in others),
            [p for p in others if p not in shown])


def unmarked_tables(docs: Path) -> list[str]:
    """"page:line" of each markdown table outside generated blocks and code fences whose rows hold
    a decimal number or a percentage and that no `<!-- hand-written: WHY -->` line (WHY: a
    constant, a quote, dated history) marks within the 4 lines above it: numbers copied by hand
    from a run. A table marked `<!-- numbers from: [PAGE.md ...] -->` instead (a summary of the
    blocks beneath it) passes when every such number is shown by a generated block of its page
    (or of the pages named); "page:line: NUMBER" for each that is not."""
    found = []
    shown = _shown(docs)
    for page in doc_pages(docs):
        name = page_name(page, docs)
        lines = page.read_text().splitlines()
        hidden = _code_or_block(lines)
        i = 0
        while i < len(lines):
            if lines[i].lstrip().startswith("|") and not hidden[i]:
                end = i
                while end < len(lines) and lines[end].lstrip().startswith("|"):
                    end += 1
                above = [lines[k] for k in range(max(0, i - 4), i)]
                sourced = next((line for line in above if FROM in line), None)
                if sourced is not None:
                    pool, unknown = _from_pages(sourced, name, shown)
                    found.extend(f"{name}:{i + 1}: no page {p}" for p in unknown)
                    found.extend(f"{name}:{k + 1}: {m[0]}" for k in range(i + 2, end)
                                 for m in DECIMAL.finditer(re.sub(r"`[^`]*`", " ", lines[k]))
                                 if not _found(m[0].rstrip("%"), pool))
                elif (any(DECIMAL.search(row) for row in lines[i + 2:end])
                        and not any(MARK in line for line in above)):
                    found.append(f"{name}:{i + 1}")
                i = end
                continue
            i += 1
    return found


#: measured-looking numbers in prose: decimals (not a version, 5.24.0, nor part of a word or path,
#: nor an arXiv identifier, arXiv 2305.16843) and integer percentages
PROSE_NUMBERS = (
    re.compile(r"(?<![\w.])(?<!arXiv )[-+\u2212]?(\d+\.\d+)(?=x\b|×|(?![\w.]*\w))"),  # 7.41, 7.6x
    # an integer percentage (a score rounded by hand goes stale like a decimal), not the level of
    # an interval ("95% t interval"), which is a setting
    re.compile(r"(?<![\w.,])(\d+)(?=\s?%)(?!\s?%\s+(?:t\s+)?(?:interval|confidence|CI))"),
)


def unsourced_numbers(docs: Path) -> list[str]:
    """"page:line: NUMBER" for each decimal number or integer percentage in a prose paragraph
    (outside generated blocks, tables, code and inline code) that no generated block of its page
    shows: a number copied by hand from a result, which goes stale when the data changes. A line
    `<!-- numbers from: PAGE.md ... -->` right above a paragraph adds those pages' blocks to
    where its numbers are looked up; `<!-- hand-written: WHY -->` exempts the paragraph (a
    constant, a definition, a quote, arithmetic on shown numbers, dated history)."""
    pages = {page_name(p, docs): p.read_text() for p in doc_pages(docs)}
    shown = _shown(docs)
    found = []
    for name, text in pages.items():
        in_paragraph = False
        mark, start = "", 0  # the marker line above the current (or next) paragraph; its first line
        numbers: list[tuple[str, int]] = []

        def close():
            nonlocal mark, in_paragraph
            if in_paragraph and not mark.startswith(MARK):
                pool = shown[name]
                if mark.startswith(FROM):
                    pool, unknown = _from_pages(mark, name, shown)
                    found.extend(f"{name}:{start}: no page {p}" for p in unknown)
                found.extend(f"{name}:{line}: {n}" for n, line in numbers if not _found(n, pool))
            if in_paragraph:
                mark = ""
            in_paragraph = False
            numbers.clear()

        lines = text.splitlines()
        for i, (line, hidden) in enumerate(zip(lines, _code_or_block(lines)), 1):
            stripped = line.strip()
            if hidden:
                close()
                if line.startswith("<!-- end generated"):
                    mark = ""  # a block takes the mark above it
            elif stripped.startswith((MARK, FROM)):
                close()
                mark = stripped
            elif not stripped or stripped.startswith("|"):
                close()
                if stripped:
                    mark = ""  # a table takes the mark above it (unmarked_tables)
            else:
                if not in_paragraph:
                    start = i
                in_paragraph = True
                prose = re.sub(r"`[^`]*`|\]\([^)]*\)|<!--.*?-->", " ", line)
                numbers.extend((m[1], i) for pattern in PROSE_NUMBERS for m in pattern.finditer(prose))
        close()
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs from its data")
    p.add_argument("--docs", type=Path, default=ROOT / "docs", help="the pages (default docs/)")
    p.add_argument("--data", type=Path, default=ROOT / "docs" / "data", help="the results (default docs/data/)")
    p.add_argument("--no-figures", action="store_true", help="tables only")
    p.add_argument("--only", metavar="NAME", help="only the blocks of one study or demo folder (e.g. ruoss2023-mini, "
                                                   "threads-2); implies --no-figures")
    args = p.parse_args(argv)
    try:
        changed = build(args.docs, args.data, args.check, args.only)
    except BlockError as e:
        print(e, file=sys.stderr)
        return 2
    copied = unmarked_tables(args.docs) if args.only is None else []
    for c in copied:
        if c.count(":") == 2:   # page:line: NUMBER, in a table marked as a summary of blocks
            print(f"unsourced: {c}: a number in a summary table that no generated block of the page shows")
            continue
        print(f"hand-copied: {c}: a table of measured numbers outside a generated block (make it a "
              "block from committed data, mark it <!-- numbers from: --> when it summarizes the page's "
              "blocks, or mark it <!-- hand-written: why -->)")
    unsourced = unsourced_numbers(args.docs) if args.only is None else []
    for u in unsourced:
        print(f"unsourced: {u}: a number in prose that no generated block of the page shows (cite a "
              "block's number, add <!-- numbers from: PAGE.md --> or mark <!-- hand-written: why -->)")
    if args.check:
        for c in changed:
            print(f"stale: {c} (rebuild: python scripts/build_docs.py)")
        return 1 if changed or copied or unsourced else 0
    for c in changed:
        print(f"rewrote {c}")
    if not args.no_figures and args.only is None:
        for f in figures(args.data, args.docs):
            print(f"figure {f.relative_to(args.docs.parent) if f.is_relative_to(args.docs.parent) else f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
