"""Position samplers by name. Training uses `standard`, `randomized` (or later ones); the test-time
modes of a randomized run are `random` (sample as in training), `uniform` and `standard`."""

import torch

from lengen.errors import LengenError, unknown_name
from lengen.positions.base import PositionSampler
from lengen.positions.equal_mean import EqualMeanPositions
from lengen.positions.pose import PoSEPositions
from lengen.positions.randomized import RandomizedPositions
from lengen.positions.standard import StandardPositions
from lengen.positions.uniform import UniformPositions
from lengen.registry import Registry

SAMPLERS: Registry[type[PositionSampler]] = Registry("position sampler")
SAMPLERS.add("standard", StandardPositions)
SAMPLERS.add("randomized", RandomizedPositions)
SAMPLERS.add("uniform", UniformPositions)
SAMPLERS.add("equal_mean", EqualMeanPositions)
SAMPLERS.add("pose", PoSEPositions)

#: test-time position modes: name -> sampler name
TEST_MODES = {"random": "randomized", "uniform": "uniform", "standard": "standard"}


def build_sampler(name: str, max_position: int = 2048, **options) -> PositionSampler:
    return SAMPLERS.get(name)(max_position=max_position, **options)


def evaluation_sampler(mode: str, max_position: int = 2048) -> PositionSampler:
    """The sampler for a test-time position mode: random, uniform or standard."""
    if mode not in TEST_MODES:
        raise LengenError(unknown_name("test position mode", mode, TEST_MODES))
    return build_sampler(TEST_MODES[mode], max_position=max_position)


def draw_positions(sampler: PositionSampler, length: int, batch: int, gen: torch.Generator) -> torch.Tensor:
    """Positions [B, T], one draw per sequence ([1, T] for the standard sampler, which draws
    nothing): the corpus models' training positions (lengen.lm, lengen.mlm)."""
    if isinstance(sampler, StandardPositions):
        return sampler(length, gen)
    return torch.cat([sampler(length, gen) for _ in range(batch)])


def default_test_mode(positions: str) -> str:
    return "random" if positions == "randomized" else "standard"


def check_positions_fit(pe, sampler: PositionSampler, longest: int, what: str):
    """Float positions need an encoding that accepts them; a position table must have a row for
    every position the sampler can produce."""
    pe.check_sampler(sampler)
    sampler.check_length(longest)
    rows, bound = pe.position_table_size, sampler.position_bound(longest)
    if rows is not None and bound > rows:
        # a float sampler may have no bound at all (equal_mean's exponential gaps)
        need = f"positions up to {int(bound) - 1}" if bound != float("inf") else "unbounded positions"
        raise LengenError(
            f"{what}: sequences of {longest} tokens need {need}, but the {pe.name!r} table has only "
            f"max_position={rows} rows; raise --max-position or lower the length"
        )


__all__ = ["SAMPLERS", "TEST_MODES", "PositionSampler", "build_sampler", "check_positions_fit", "default_test_mode",
           "draw_positions", "evaluation_sampler"]
