"""What `lengen lm` (decoder LM) and `lengen mlm` (masked LM) share: both are a command group with
`train` and `eval`, and both train a byte-level model on a corpus with one loop (lengen.training.corpus_loop),
so how the flags become a config and the summary after training are written once here (their
data, model and run flags: lengen.cli.parsers.corpus_training). Each command passes what it says
differently (the default run directory, the validation line)."""

from __future__ import annotations

from collections.abc import Callable

from lengen.cli.options import options_from_args, set_threads
from lengen.io import check_writable


def train_from_args(args, table: dict[str, str], config_from_options: Callable, train: Callable,
                    run_dir: str, validation_line: str) -> int:
    """`lengen lm train` / `lengen mlm train`: the config from the flags (`table`: option -> config
    path), `train(cfg, out, progress=...)` into --out or `run_dir.format(cfg=cfg)`, then a summary
    whose validation line is `validation_line.format(**record)`."""
    set_threads(args.threads)
    cfg = config_from_options(options_from_args(args, table))
    positions = "" if getattr(cfg, "positions", "standard") == "standard" else f"-{cfg.positions}"
    out = args.out or run_dir.format(cfg=cfg, positions=positions)
    check_writable(out)  # before the corpus is read and tokenized
    rec = train(cfg, out, progress=not args.no_progress)
    print(f"\n{rec['corpus']}")
    print(f"{rec['parameters']:,} parameters, {rec['steps']} steps")
    print(validation_line.format(**rec))
    print(f"run directory: {out}  (config.json, checkpoint.pt, metrics.jsonl, eval.json)")
    return 0
