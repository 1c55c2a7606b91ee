"""Which command-line options each protocol uses: the one rule `lengen lm eval` and `lengen hf eval`
both apply, so an option a protocol would ignore is refused instead (one clear error, before any
model is loaded), the same way in both commands.

    --segment      last-segment          scored tokens K at the end of each sequence
    --docs         ppl, last-segment     corpus sequences
    --corpus       ppl, last-segment     where the sequences come from (hf eval only)
    --batch-size   ppl, last-segment     sequences per forward pass (lm eval only); passkey
                                         generates one prompt at a time
    --trials       passkey, ruler        prompts per length (ruler: per task and length)
    --seed         passkey, ruler        the prompts' keys, values and needle depths (the corpus
                                         sequences of ppl / last-segment are deterministic)
    --tasks        ruler                 which RULER-style tasks (default all)
"""

from __future__ import annotations

from lengen.errors import LengenError, unknown_name
from lengen.protocols.ruler.tasks import TASKS

PROTOCOLS = ("ppl", "last-segment", "passkey", "ruler")

# option (argparse dest) -> the protocols that use it
USED_BY: dict[str, tuple[str, ...]] = {
    "segment": ("last-segment",),
    "docs": ("ppl", "last-segment"),
    "corpus": ("ppl", "last-segment"),
    "batch_size": ("ppl", "last-segment"),
    "trials": ("passkey", "ruler"),
    "seed": ("passkey", "ruler"),
    "tasks": ("ruler",),
}
POSITIVE = ("segment", "docs", "batch_size", "trials")   # counts: >= 1
NON_NEGATIVE = ("seed",)


def flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def used_by(option: str) -> str:
    """'ppl and last-segment' and so on, for help texts and messages."""
    return " and ".join(USED_BY[option])


def check_protocol_options(protocol: str, **given) -> None:
    """Raise LengenError when an option given for `protocol` is one it does not use, or is out of
    range. `given` maps option names (keys of USED_BY) to their values, None where the option was
    not given (then its default applies and nothing is checked)."""
    if protocol not in PROTOCOLS:
        raise LengenError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    for option, value in given.items():
        if option not in USED_BY:
            raise ValueError(f"no protocol rule for option {option!r}")
        if value is None:
            continue
        if protocol not in USED_BY[option]:
            raise LengenError(f"{flag(option)} applies to --protocol {used_by(option)} only, "
                              f"not {protocol}")
        if option in POSITIVE and value < 1:
            raise LengenError(f"{flag(option)} must be >= 1, got {value}")
        if option in NON_NEGATIVE and value < 0:
            raise LengenError(f"{flag(option)} must be >= 0, got {value}")
        if option == "tasks":
            check_task_names(value)


def split_tasks(text: str | list[str] | None) -> list[str] | None:
    """'vt,cwe' (or ['vt', 'cwe,niah_single']) -> ['vt', 'cwe', ...]; None stays None."""
    if text is None:
        return None
    items = [text] if isinstance(text, str) else list(text)
    return [t.strip() for item in items for t in item.split(",") if t.strip()]


def check_task_names(tasks: list[str]) -> None:
    if not tasks:
        raise LengenError(f"--tasks needs at least one task; valid: {', '.join(TASKS)}")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise LengenError(f"--tasks: {unknown_name('task', unknown[0], TASKS)}")
