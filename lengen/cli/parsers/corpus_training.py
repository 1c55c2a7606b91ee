"""The flags `lengen lm` (decoder LM) and `lengen mlm` (masked LM) share, and with them `lengen
arith`: a command group with `train` and `eval`, a byte-level model trained on a corpus (data,
model and run flags). Each command passes what it says differently (help wording, the defaults:
its config's, from lengen.cli.parsers.values)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from lengen.cli.parsers.common import add_device_arguments, add_layer_pe_argument


def add_command_group(sub, name: str, help: str, description: str,
                      add_subcommands: list[Callable]) -> None:
    """`lengen NAME COMMAND`; NAME alone prints its help and exits 2."""
    p = sub.add_parser(name, help=help, description=description)
    group_sub = p.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    for add in add_subcommands:
        add(group_sub)


def add_subcommand(sub, name: str, help: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """A subcommand whose epilog (examples) keeps its line breaks."""
    return sub.add_parser(name, help=help, description=description, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_position_arguments(p, samplers: str, options: str):
    """The `positions` group: --positions (`samplers`: what to say of them) and the repeatable
    --position-option (`options`: each sampler's options)."""
    g = p.add_argument_group("positions")
    g.add_argument("--positions", help=f"training position sampler: {samplers}")
    g.add_argument("--position-option", dest="position_options", action="append", metavar="KEY=VALUE",
                   help=f"sampler option, repeatable ({options})")
    return g


def add_data_arguments(p, d):
    """The "data" group (corpus, held-out share, window length); returned for a command's own flags."""
    g = p.add_argument_group("data")
    g.add_argument("--corpus", metavar="PATH_OR_GLOB",
                   help="a file, a folder or a glob (quote it); default: this Python's standard library")
    g.add_argument("--val-fraction", type=float, help=f"share of documents held out ({d.val_fraction})")
    g.add_argument("--train-length", type=int, metavar="N", help=f"tokens per training window ({d.train_length})")
    return g


def add_model_arguments(p, d, max_position: str):
    """The "model" group; `max_position` says what --max-position sizes. Returned for a command's
    own flags."""
    g = p.add_argument_group("model")
    g.add_argument("--pe", help=f"positional encoding: any of `lengen.encodings` ({d.model.pe})")
    g.add_argument("--pe-option", dest="pe_options", action="append", metavar="KEY=VALUE",
                   help="encoding option, repeatable (e.g. base=500)")
    add_layer_pe_argument(g)
    add_architecture_arguments(g, d)
    g.add_argument("--max-position", type=int, help=f"{max_position} ({d.model.max_position})")
    return g


def add_architecture_arguments(g, d) -> None:
    """The model's sizes, into group `g` (`d`: a config with the defaults in `d.model`)."""
    g.add_argument("--layers", type=int, help=f"blocks ({d.model.num_layers})")
    g.add_argument("--heads", type=int, help=f"attention heads ({d.model.num_heads})")
    g.add_argument("--d-model", type=int, help=f"width ({d.model.d_model})")
    g.add_argument("--d-ff", type=int, help=f"feed-forward width ({d.model.d_ff})")
    g.add_argument("--dropout", type=float, help=f"dropout ({d.model.dropout})")


def add_optimisation_arguments(g, d, per_step: str, seeded: str) -> None:
    """Steps, batch, AdamW, clipping, seed and checkpointing, into group `g`: `per_step` says what a
    batch counts (windows, problems), `seeded` what the seed fixes."""
    g.add_argument("--steps", type=int, help=f"training steps ({d.steps})")
    g.add_argument("--batch-size", type=int, help=f"{per_step} per step ({d.batch_size})")
    g.add_argument("--lr", type=float, help=f"peak AdamW learning rate ({d.lr})")
    g.add_argument("--warmup", type=int, help=f"warmup steps ({d.warmup})")
    g.add_argument("--weight-decay", type=float, help=f"AdamW weight decay ({d.weight_decay})")
    g.add_argument("--grad-clip", type=float, help=f"global gradient-norm clip ({d.grad_clip})")
    g.add_argument("--seed", type=int, help=f"seed of {seeded} ({d.seed})")
    g.add_argument("--checkpoint-every", type=int, metavar="K", help=f"checkpoint every K steps ({d.checkpoint_every})")
    g.add_argument("--log-every", type=int, help=f"metrics row every this many steps ({d.log_every})")


def add_run_arguments(p, d, seeded: str, validated: str, out_default: str) -> None:
    """The "optimisation and run" group and the device group. The help says what the seed fixes
    (`seeded`), what the validation windows are for (`validated`) and the default --out."""
    g = p.add_argument_group("optimisation and run")
    add_optimisation_arguments(g, d, "windows", seeded)
    g.add_argument("--val-windows", type=int, help=f"validation windows for {validated} ({d.val_windows})")
    g.add_argument("--out", metavar="RUN_DIR", help=f"run directory (default {out_default})")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_device_arguments(p, "training and the final validation run")
