"""Position samplers by name. Training uses `standard`, `randomized` (or later ones); the test-time
modes of a randomized run are `random` (sample as in training), `uniform` and `standard`."""

from lengen.errors import LengenError
from lengen.positions.base import PositionSampler
from lengen.positions.equal_mean import EqualMeanPositions
from lengen.positions.randomized import RandomizedPositions
from lengen.positions.standard import StandardPositions
from lengen.positions.uniform import UniformPositions
from lengen.registry import Registry

SAMPLERS: Registry[type[PositionSampler]] = Registry("position sampler")
SAMPLERS.add("standard", StandardPositions)
SAMPLERS.add("randomized", RandomizedPositions)
SAMPLERS.add("uniform", UniformPositions)
SAMPLERS.add("equal_mean", EqualMeanPositions)

#: test-time position modes: name -> sampler name
TEST_MODES = {"random": "randomized", "uniform": "uniform", "standard": "standard"}


def build_sampler(name: str, max_position: int = 2048, **options) -> PositionSampler:
    return SAMPLERS.get(name)(max_position=max_position, **options)


def evaluation_sampler(mode: str, max_position: int = 2048) -> PositionSampler:
    """The sampler for a test-time position mode: random, uniform or standard."""
    if mode not in TEST_MODES:
        raise LengenError(f"unknown test position mode {mode!r}; valid: {', '.join(TEST_MODES)}")
    return build_sampler(TEST_MODES[mode], max_position=max_position)


__all__ = ["SAMPLERS", "TEST_MODES", "PositionSampler", "build_sampler", "evaluation_sampler"]
