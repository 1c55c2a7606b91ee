"""Display names shared by the reports: encodings as the FIRE paper names them, per-layer
encoding patterns (`RoPE/NoPE 3:1`) and the logit scalings of 2025 models (`SSMax`)."""

from __future__ import annotations

#: the encodings as the FIRE paper names them; any other name is shown as given
PE_LABELS = {"none": "NoPE", "nope": "NoPE", "rope": "RoPE", "alibi": "ALiBi", "kerple": "Kerple",
             "kerple_log": "Kerple (log)", "kerple_power": "Kerple (power)", "t5": "T5's RPE", "fire": "FIRE",
             "fire_shared": "FIRE-S", "sincos": "Sinusoidal", "learned": "Learned", "relative": "Transformer-XL",
             "sandwich": "Sandwich"}
#: logit scalings shown by name alone (the log-n ones keep `logit_scale=log_n`)
LOGIT_SCALE_LABELS = {"ssmax": "SSMax", "llama4_temperature": "Llama 4 temperature"}


def encoding_label(pe) -> str:
    """The paper's name of an encoding (`rope` -> `RoPE`); an unknown name as given."""
    return PE_LABELS.get(str(pe), str(pe))


def pattern_names(value) -> list[str]:
    """A layer_pe value as a list of names: a list, or text as results tables hold it
    ("rope,rope,rope,none"; a list's repr "['rope', 'none']" is read too)."""
    if isinstance(value, (list, tuple)):
        return [str(x) for x in value]
    text = str(value).strip().strip("[]")
    return [x.strip().strip("'\"") for x in text.split(",") if x.strip()]


def layer_pattern_label(value) -> str:
    """`RoPE/NoPE 3:1` for rope,rope,rope,none: the encodings in order of first appearance and
    how many layers of the pattern each has."""
    names = pattern_names(value)
    counts = {n: names.count(n) for n in dict.fromkeys(names)}
    return "/".join(encoding_label(n) for n in counts) + " " + ":".join(str(c) for c in counts.values())


def option_label(column: str, value, fmt=str) -> str:
    """How a varying option names a variant: `RoPE/NoPE 3:1` for a layer pattern, `SSMax` for
    logit_scale=ssmax, else `column=value` (`fmt` formats the value)."""
    if column == "layer_pe":
        return layer_pattern_label(value)
    if column == "logit_scale" and str(value) in LOGIT_SCALE_LABELS:
        return LOGIT_SCALE_LABELS[str(value)]
    return f"{column}={fmt(value)}"
