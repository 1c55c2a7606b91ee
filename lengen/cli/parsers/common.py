"""Arguments several commands' parsers share: device, precision and threads, per-layer encodings,
logit scaling, token lengths, a local Hugging Face model."""

from __future__ import annotations

import argparse

from lengen.cli.parsers import values

DEVICE_HELP = ("auto (the first GPU when torch sees one, else the CPU), cpu, cuda or cuda:N "
               "(default auto)")
PRECISION_HELP = ("fp32 (default), tf32 (TensorFloat-32 matmuls on CUDA; fp32 on the CPU) or bf16 "
                  "(autocast: bfloat16 forward, float32 weights and optimizer). Measured on an H100 "
                  "(docs/devices.md): for the CHE model tf32 = fp32 in speed and accuracy, bf16 4-7x "
                  "slower (launch-bound), same accuracy")


def add_layer_pe_argument(g) -> None:
    """--layer-pe: per-layer encodings (ModelConfig.layer_pe), into group `g`."""
    g.add_argument("--layer-pe", metavar="PE,PE,...",
                   help="encoding per layer, repeated over the layers (e.g. rope,rope,rope,none: every 4th "
                        "layer NoPE, as Llama 4); must include --pe, whose --pe-option values it carries; "
                        "absolute encodings (sincos, learned) are not per layer (default: --pe everywhere)")


def add_logit_scale_arguments(g, modes: str) -> None:
    """--logit-scale (`modes`: the log-n ones the command trains with) and --logit-scale-option."""
    g.add_argument("--logit-scale", help=f"attention logit scaling: {modes}, ssmax (Scalable-Softmax, learned s "
                   "per head), llama4_temperature (Llama 4's, NoPE layers only), drope (1 + c ln(n/m) past the "
                   "training length m)")
    g.add_argument("--logit-scale-option", dest="logit_scale_options", action="append", metavar="KEY=VALUE",
                   help="repeatable; ssmax: s_init (default 1/log of the training length); llama4_temperature: "
                        "floor_scale (default training length / 8), attn_scale (0.1); drope: c (default 1/log of the training length)")


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


def protocols_only(option: str) -> str:
    """'ppl and last-segment only' and so on: the protocols that use an option (any other refuses
    it), for `lengen lm eval` and `lengen hf eval`."""
    return f"{values.USED_BY[option]} only"


def add_device_arguments(p, where: str = "", defaults: bool = False, precision_note: str = "") -> None:
    """--device, --precision and --threads, one group for every command that trains or evaluates.
    `where` says what runs on the device; with `defaults` the flags default to auto / fp32 (else
    None: the config's values apply)."""
    g = p.add_argument_group("device")
    g.add_argument("--device", metavar="DEVICE", default="auto" if defaults else None,
                   help=(f"where {where}: " if where else "") + DEVICE_HELP)
    g.add_argument("--precision", choices=values.PRECISIONS, default="fp32" if defaults else None,
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
    p.add_argument("--train-length", type=int, metavar="L0",
                   help="the model's trained context (default: max_position_embeddings)")
    p.add_argument("--dtype", choices=values.HF_WEIGHT_DTYPES, default="float32",
                   help=f"the weights' storage type when loaded (default float32){dtype_note}")
    p.add_argument("--attn", choices=values.HF_ATTN_CHOICES, default="sdpa",
                   help="the model's attention implementation (default sdpa); banded: sdpa with "
                        "sliding-window layers (Gemma 3, OLMo 3) computed band by band, memory "
                        "linear in length instead of a T x T mask, and on CUDA in float32 "
                        "grouped-query layers kept off PyTorch's math kernel (lengen.hf.banded)")
