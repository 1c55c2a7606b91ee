"""Which evaluation lengths can hold a prompt at all: passkey and the RULER-style tasks build
prompts to a token budget, and below a tokenizer-dependent minimum none fits. A length where no
prompt fits would only produce an empty table, so the evaluation commands refuse it before the
model loads (a length where some RULER tasks fit keeps its note rows for the others)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lengen.errors import LengenError
from lengen.protocols.passkey import make_trials
from lengen.protocols.ruler import make_ruler_trials


def check_prompts_fit(protocol: str, encode: Callable[[str], list[int]], lengths: Sequence[int],
                      tasks: Sequence[str] = (), seed: int = 0) -> None:
    """LengenError naming the lengths at which no prompt of `protocol` (passkey, or ruler with
    `tasks`) fits, and why; nothing for other protocols."""
    if protocol not in ("passkey", "ruler"):
        return
    empty: dict[int, str] = {}
    for length in lengths:
        reasons = []
        for task in (tasks if protocol == "ruler" else [None]):
            try:
                if task is None:
                    make_trials(encode, length, 1, seed)
                else:
                    make_ruler_trials(task, encode, length, 1, seed)
                break   # one prompt fits: the length gives a result
            except LengenError as e:
                reasons.append(str(e))
        else:
            empty[length] = reasons[0]
    if empty:
        what = "passkey prompt" if protocol == "passkey" else f"prompt of the ruler tasks {', '.join(tasks)}"
        raise LengenError(f"lengths {', '.join(map(str, empty))}: no {what} fits ({empty[min(empty)]}); "
                          "give longer lengths")
