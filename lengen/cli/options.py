"""Small parsing helpers shared by the commands."""

from __future__ import annotations

import argparse

import torch

from lengen.devices import DEVICE_HELP, PRECISION_HELP, PRECISIONS
from lengen.errors import LengenError
from lengen.formats import format_table, parse_value  # noqa: F401 - the commands import them from here
from lengen.options import check_finite


def parse_key_values(items: list[str] | None, flag: str) -> dict:
    """['init_L=40', 'mlp_depth=2'] -> {'init_L': 40, 'mlp_depth': 2}."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LengenError(f"{flag} expects KEY=VALUE, got {item!r}")
        check_finite(f"{flag} {key.strip()}", value.strip())
        out[key.strip().replace("-", "_")] = parse_value(value.strip())
    return out


#: options given as repeated KEY=VALUE flags (parse_key_values), by every command that has them
KEY_VALUE_FLAGS = {"pe_options": "--pe-option", "position_options": "--position-option",
                   "logit_scale_options": "--logit-scale-option"}


def options_from_args(args, table) -> dict:
    """The options named in `table` (option name -> config path) that the command line gave,
    KEY=VALUE lists parsed into dicts."""
    given = {k: v for k, v in vars(args).items() if k in table and v is not None}
    for key, flag in KEY_VALUE_FLAGS.items():
        if key in given:
            given[key] = parse_key_values(given[key], flag)
    return given


def add_layer_pe_argument(g) -> None:
    """--layer-pe: per-layer encodings (ModelConfig.layer_pe), into group `g`."""
    g.add_argument("--layer-pe", metavar="PE,PE,...",
                   help="encoding per layer, repeated over the layers (e.g. rope,rope,rope,none: every 4th "
                        "layer NoPE, as Llama 4); must include --pe, whose --pe-option values it carries; "
                        "absolute encodings (sincos, learned) are not per layer (default: --pe everywhere)")


def add_logit_scale_arguments(g, modes: str) -> None:
    """--logit-scale (`modes`: the log-n ones the command trains with) and --logit-scale-option."""
    g.add_argument("--logit-scale", help=f"attention logit scaling: {modes}, ssmax (Scalable-Softmax, learned s "
                   "per head), llama4_temperature (Llama 4's, NoPE layers only)")
    g.add_argument("--logit-scale-option", dest="logit_scale_options", action="append", metavar="KEY=VALUE",
                   help="repeatable; ssmax: s_init (default 1/log of the training length); llama4_temperature: "
                        "floor_scale (default training length / 8), attn_scale (0.1)")


def parse_lengths(text: str) -> list[int]:
    """Token counts for --lengths: '4096' -> [4096], '4k' -> [4096], '2k,4k,8192' -> [2048, 4096, 8192]."""
    out = []
    for piece in (x.strip().lower() for x in text.split(",")):
        if not piece:
            continue
        try:
            n = int(float(piece[:-1]) * 1024) if piece.endswith("k") else int(piece)
        except (ValueError, OverflowError):  # "nank", "infk"
            raise argparse.ArgumentTypeError(f"not a length: {piece!r} (use e.g. 4096 or 4k, "
                                             "several separated by commas or spaces)") from None
        out.append(n)
    if not out:
        raise argparse.ArgumentTypeError(f"no length in {text!r}")
    return out


def set_threads(n: int | None) -> None:
    """--threads: torch's CPU thread count (None keeps torch's choice)."""
    if n is None:
        return
    if n < 1:
        raise LengenError(f"--threads must be >= 1, got {n}")
    torch.set_num_threads(n)


def add_device_arguments(p, where: str = "", defaults: bool = False, precision_note: str = "") -> None:
    """--device, --precision and --threads, one group for every command that trains or evaluates.
    `where` says what runs on the device; with `defaults` the flags default to auto / fp32 (else
    None: the config's values apply)."""
    g = p.add_argument_group("device")
    g.add_argument("--device", metavar="DEVICE", default="auto" if defaults else None,
                   help=(f"where {where}: " if where else "") + DEVICE_HELP)
    g.add_argument("--precision", choices=PRECISIONS, default="fp32" if defaults else None,
                   help=PRECISION_HELP + precision_note)
    g.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice, one per core; "
                   "1 is often faster on a machine busy with other jobs)")


def add_hf_model_arguments(p) -> None:
    """MODEL_PATH and --gguf-file: the local Hugging Face model of `lengen hf eval` and `hf tune`."""
    p.add_argument("model_path", metavar="MODEL_PATH", help="a local model folder (save_pretrained "
                   "output, or the folder holding --gguf-file)")
    p.add_argument("--gguf-file", metavar="F", help="a GGUF file inside MODEL_PATH")


def add_hf_loading_arguments(p, dtype_note: str = "") -> None:
    """--train-length, --dtype and --attn: how `lengen hf eval` and `hf tune` load the model."""
    from lengen.hf.evaluate import ATTN_CHOICES, WEIGHT_DTYPES   # the settings' own lists
    p.add_argument("--train-length", type=int, metavar="L0",
                   help="the model's trained context (default: max_position_embeddings)")
    p.add_argument("--dtype", choices=WEIGHT_DTYPES, default="float32",
                   help=f"the weights' storage type when loaded (default float32){dtype_note}")
    p.add_argument("--attn", choices=ATTN_CHOICES, default="sdpa",
                   help="the model's attention implementation (default sdpa); banded: sdpa with "
                        "sliding-window layers (Gemma 3, OLMo 3) computed band by band, memory "
                        "linear in length instead of a T x T mask, and on CUDA in float32 "
                        "grouped-query layers kept off PyTorch's math kernel (lengen.hf.banded)")
