"""The one exception type the command line turns into a clean message and exit code 2, and the one
did-you-mean for unknown names (encodings, tasks, methods, options, sweep-file keys)."""

from __future__ import annotations

import difflib


class LengenError(ValueError):
    """Bad input: an unknown name, an impossible setting, a run directory that does not match.

    Subclasses ValueError so library callers can catch it the ordinary way.
    """


def _key(name: str) -> str:
    return str(name).lower().replace("-", "_").replace(" ", "_")


def did_you_mean(name: str, valid, hints: dict[str, str] | None = None) -> str | None:
    """The one valid name `name` was probably meant as, or None. The same name up to case and
    `-`/`_` first (p-rope -> p_rope), then `hints` (well-known other names: nope -> none), then the
    same letters in another order, then a close spelling: difflib's ratio >= 0.75, so a typo (abacuss, sed) gets a suggestion while a
    word that only shares letters with a name (out ~ dropout, 0.6) gets none."""
    valid = [str(v) for v in valid]
    key = _key(name)
    by_key = {_key(v): v for v in valid}
    if key in by_key:
        return by_key[key]
    hint = {_key(k): v for k, v in (hints or {}).items()}.get(key)
    if hint in valid:
        return hint
    swapped = [v for k, v in by_key.items() if len(k) > 2 and sorted(k) == sorted(key)]
    if len(swapped) == 1:  # letters swapped (rde -> red): difflib's ratio is low for short names
        return swapped[0]
    close = difflib.get_close_matches(key, list(by_key), n=1, cutoff=0.75)
    return by_key[close[0]] if close else None


def unknown_name(kind: str, name, valid, hints: dict[str, str] | None = None, listed: bool = True) -> str:
    """The one message for a name that is not one of `valid`: "unknown KIND 'NAME' (did you mean
    'X'?); valid: A, B, ...", the list left out when `listed` is False and there is a suggestion."""
    guess = did_you_mean(name, valid, hints)
    text = f"unknown {kind} {name!r}" + (f" (did you mean {guess!r}?)" if guess else "")
    return text + (f"; valid: {', '.join(map(str, valid))}" if listed or not guess else "")


def reason(error: BaseException, limit: int = 160) -> str:
    """A library's exception as one short line for a message: its type and first sentence (torch
    adds paragraphs of advice after it), cut at a word, never inside one, with "..." when cut."""
    text = " ".join(str(error).split())
    first = text.split(". ", 1)[0].rstrip(".")
    if len(first) > limit:
        first = first[:limit + 1].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
