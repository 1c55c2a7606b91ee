"""`lengen lm`: byte-level decoder language models and their long-context evaluation."""

from __future__ import annotations

from lengen.cli import corpus_training
from lengen.cli.options import set_threads
from lengen.extrapolation import split_methods
from lengen.lm.evaluate import LMEvalConfig, evaluate_lm
from lengen.lm.options import LM_OPTIONS, lm_config_from_options
from lengen.lm.train import init_config, train_lm
from lengen.protocols.options import check_protocol_options, split_tasks

#: --out's default (str.format with the run's config as `cfg`; `positions` is "" for standard
#: positions, else "-" and the sampler's name, so the default directories of older runs stay)
RUN_DIR = "runs/lm-{cfg.model.pe}{positions}-L{cfg.train_length}-s{cfg.seed}"
#: --out's default for a run started from another's weights (--init-from)
INIT_RUN_DIR = "runs/lm-{cfg.model.pe}-from-{cfg.init_from[run_id]}-{cfg.steps}steps-s{cfg.seed}"
#: the validation line printed after training (str.format with eval.json's record)
VALIDATION_LINE = ("validation perplexity at the training length {train_length}: {val_ppl:.3f} "
                   "(unigram baseline: {unigram_ppl:.3f}; {val_tokens:,} tokens in consecutive windows of the "
                   "validation stream, most starting mid-document; `lengen lm eval` scores documents from "
                   "their first token, with less context, so its perplexity is higher)")

#: what each corpus protocol's perplexity is computed over (printed beside the table)
PROTOCOL_TEXT = {"ppl": "the first L tokens of each validation document (from its start), every token scored",
                 "last-segment": "the same last --segment tokens of each document's first L tokens"}

def run_train(args) -> int:
    source = getattr(args, "init_from", None)
    if source is None:
        return corpus_training.train_from_args(args, LM_OPTIONS, lm_config_from_options, train_lm, RUN_DIR,
                                               VALIDATION_LINE)
    # DroPE: the source run's shape and data, checked, before anything is written
    return corpus_training.train_from_args(args, LM_OPTIONS, lambda options: init_config(options, source),
                                           lambda cfg, out, **kw: train_lm(cfg, out, init_dir=source, **kw),
                                           INIT_RUN_DIR, VALIDATION_LINE)


def run_eval(args) -> int:
    set_threads(args.threads)
    methods = split_methods(args.methods) if args.methods is not None else []
    # an option the protocol would ignore, or out of range: refused before the model is loaded
    given = {k: getattr(args, k) for k in ("segment", "docs", "trials", "seed", "batch_size")}
    given["tasks"] = split_tasks(args.tasks)
    check_protocol_options(args.protocol, **given)
    ecfg = LMEvalConfig(methods=methods, lengths=args.lengths or [], protocol=args.protocol,
                        device=args.device or "auto", precision=args.precision or "fp32",
                        drope_scale=args.drope_scale, fit_docs=args.fit_docs or LMEvalConfig.fit_docs,
                        **{k: v for k, v in given.items() if v is not None})
    res = evaluate_lm(args.run_dir, ecfg, args.out, progress=not args.no_progress)
    print(res["table"])
    notes = {r["note"] for r in res["rows"] if r.get("note")}
    for n in sorted(notes):
        print(f"note: {n}")
    if args.protocol in ("ppl", "last-segment"):
        print(f"measured on: {PROTOCOL_TEXT[args.protocol]}; not comparable with the training-time "
              "validation perplexity in eval.json (consecutive mid-document windows)")
    fit = res["meta"].get("drope_scale")
    if fit is not None and not fit.get("given"):
        print(f"drope scale: c = {fit['c']:g} fitted on {fit['sequences']} held-out sequences at lengths "
              f"{', '.join(map(str, fit['lengths'])) or 'none past the training length'}")
    print(f"wrote {res['out_dir']}/results.csv, results.json and the plot")
    return 0
