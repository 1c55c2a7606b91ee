"""Named training defaults for the seeds' experiments (`lengen train --preset NAME`).

A preset maps `lengen train` flag dests (pe, pe_options, positions, position_options,
test_positions, logit_scale, key_norm, lr, ...) to values, plus a `description`. Flags given on
the command line always override the preset. Everything else keeps the CHE defaults of the seed
paper (5 layers, 8 heads, d_model 64, batch 128, train lengths U{1..40}, test 1..500).
"""

from __future__ import annotations

from lengen.errors import LengenError

# what every preset starts from: the seed paper's CHE setting with RoPE and standard positions
_CHE = {"pe": "rope", "pe_options": {}, "positions": "standard", "position_options": {},
        "test_positions": "standard", "logit_scale": "none", "key_norm": False, "lr": 1e-4}


def _preset(description: str, **changes) -> dict:
    """A preset: its description, then _CHE with `changes` (fresh nested dicts per preset)."""
    merged = {**_CHE, **changes}
    return {"description": description,
            **{k: dict(v) if isinstance(v, dict) else v for k, v in merged.items()}}


PRESETS: dict[str, dict] = {
    "ruoss-randomized": _preset(
        "Ruoss et al. 2023: randomized positions (sorted distinct integers from "
        "[0, 2048)) with the Transformer-XL relative encoding, their best family "
        "on average and the encoding of their reference example; positions are "
        "sampled at test time too, as in the paper.",
        pe="relative", positions="randomized", test_positions="random"),
    "su-equal-mean": _preset(
        "Su (kexue.fm/archives/9444): equal-mean random positions (span ~ "
        "Exp(mean T), T float positions evenly over [0, span]) with log-n scaled "
        "attention and RoPE (a functional encoding, as the blog requires); "
        "standard positions at test time.",
        positions="equal_mean", position_options={"distribution": "exponential"},
        logit_scale="log_n"),
    "fire": _preset(
        "Li et al. 2023: FIRE, one MLP bias per layer (two hidden layers of 32), "
        "threshold L initialised at the training length, standard positions.",
        pe="fire"),
    "fire-s": _preset(
        "Li et al. 2023: FIRE-S, one FIRE bias shared by all layers (computed "
        "once per forward pass), standard positions.",
        pe="fire_shared"),
    "su-key-norm": _preset(
        "Su (kexue.fm/archives/9859): RoPE with L2-normalised keys, logits "
        "q.k/||k|| (the blog found key norm helps only together with RoPE).",
        key_norm=True),
}


def get_preset(name: str) -> dict:
    """A copy of the named preset (nested dicts copied too, so callers may change it)."""
    try:
        preset = PRESETS[name]
    except KeyError:
        raise LengenError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}") from None
    return {k: dict(v) if isinstance(v, dict) else v for k, v in preset.items()}
