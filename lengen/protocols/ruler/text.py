"""The raw material of the RULER-style prompts, all local and deterministic: the filler sentences
(the passkey garbage, RULER's "noise" haystack), word lists for needle keys, word values and the
common-words list, and values drawn from a seeded numpy Generator (numbers, uuids, variable names)."""

from __future__ import annotations

import uuid
from functools import lru_cache

import numpy as np

from lengen.protocols.passkey import GARBAGE

# the passkey filler, one sentence at a time: "The grass is green." ... "There and back again."
SENTENCES = tuple(s.strip() + "." for s in GARBAGE.split(".") if s.strip())

ADJECTIVES = (
    "able", "bright", "calm", "clever", "cold", "crisp", "curious", "dark", "eager", "early",
    "fancy", "fierce", "gentle", "giant", "glad", "golden", "grumpy", "happy", "hollow", "humble",
    "icy", "jolly", "kind", "lazy", "little", "lively", "loud", "lucky", "mighty", "misty",
    "narrow", "noble", "odd", "pale", "plain", "polite", "proud", "quick", "quiet", "rapid",
    "rare", "rough", "round", "rusty", "shiny", "silent", "silly", "sleepy", "smooth", "soft",
    "solid", "steady", "stormy", "sunny", "swift", "tall", "tidy", "tiny", "warm", "wild",
)
NOUNS = (
    "anchor", "apple", "arrow", "badger", "basket", "beacon", "bottle", "bridge", "bucket", "cabin",
    "camel", "candle", "canyon", "carpet", "castle", "cellar", "cherry", "circle", "cloud", "clover",
    "comet", "copper", "cotton", "crayon", "dancer", "desert", "dragon", "drum", "eagle", "engine",
    "falcon", "feather", "fiddle", "forest", "fossil", "garden", "garlic", "ginger", "glacier", "goblet",
    "harbor", "hammer", "helmet", "island", "jacket", "jungle", "kettle", "ladder", "lantern", "lemon",
    "lizard", "magnet", "maple", "marble", "meadow", "mirror", "monkey", "needle", "nutmeg", "ocean",
    "orchid", "otter", "oyster", "paddle", "parrot", "pebble", "pepper", "pickle", "pillow", "planet",
    "pocket", "potato", "puzzle", "rabbit", "radish", "ribbon", "river", "rocket", "saddle", "salmon",
    "sandal", "shadow", "silver", "spider", "spoon", "squash", "statue", "stone", "summit", "teapot",
    "temple", "thimble", "ticket", "tiger", "tomato", "tunnel", "turtle", "valley", "velvet", "violin",
    "wagon", "walnut", "whistle", "willow", "window", "wizard", "yogurt", "zebra",
)
# the common-words task's vocabulary: real words first, then two-word compounds when a long
# list needs more distinct words than that
WORDS = tuple(sorted(set(ADJECTIVES + NOUNS)))


@lru_cache(maxsize=1)
def compounds() -> tuple[str, ...]:
    simple = set(WORDS)
    return tuple(a + b for a in NOUNS for b in NOUNS if a != b and a + b not in simple)


def number(rng: np.random.Generator) -> str:
    """A 7-digit number, as RULER's needles."""
    return str(int(rng.integers(1_000_000, 10_000_000)))


def uuid_value(rng: np.random.Generator) -> str:
    """A version-4 uuid made of 16 bytes of the seeded generator (never uuid.uuid4())."""
    return str(uuid.UUID(bytes=rng.bytes(16), version=4))


def distinct(draw, k: int, avoid: set | None = None) -> list:
    """k distinct values of draw(), none in avoid."""
    seen, out = set(avoid or ()), []
    while len(out) < k:
        v = draw()
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def key_word(rng: np.random.Generator) -> str:
    """A needle key in RULER's adjective-noun form, e.g. "misty-harbor"."""
    return f"{ADJECTIVES[rng.integers(len(ADJECTIVES))]}-{NOUNS[rng.integers(len(NOUNS))]}"


def variable(rng: np.random.Generator) -> str:
    """A variable name of five upper-case letters, as RULER's variable tracking."""
    return "".join(chr(65 + int(i)) for i in rng.integers(0, 26, size=5))


def filler(n: int) -> list[str]:
    """The first n filler sentences."""
    return [SENTENCES[i % len(SENTENCES)] for i in range(n)]
