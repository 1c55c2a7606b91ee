import torch
import pytest

from lengen.errors import LengenError
from lengen.positions import build_sampler


def test_standard_is_arange():
    assert torch.equal(build_sampler("standard")(5), torch.arange(5)[None])


def test_randomized_sorted_distinct_in_range():
    s = build_sampler("randomized", max_position=64)
    g = torch.Generator().manual_seed(0)
    seen = torch.zeros(64)
    for _ in range(300):
        pos = s(20, g)[0]
        assert pos.dtype == torch.int64
        assert torch.all(pos[1:] > pos[:-1])            # sorted and distinct
        assert pos.min() >= 0 and pos.max() < 64
        seen[pos] += 1
    # every position gets drawn, roughly uniformly (expected 300*20/64 = 93.75 each)
    assert seen.min() > 50 and seen.max() < 150


def test_randomized_refuses_length_above_max_position():
    with pytest.raises(LengenError, match="exceeds max_position"):
        build_sampler("randomized", max_position=8)(9)


def test_uniform_evenly_spaced():
    pos = build_sampler("uniform", max_position=100)(4)[0]
    assert pos.tolist() == [0, 25, 50, 75]
    pos = build_sampler("uniform", max_position=10)(10)[0]
    assert pos.tolist() == list(range(10))


def test_randomized_is_deterministic_given_generator():
    s = build_sampler("randomized")
    a = s(30, torch.Generator().manual_seed(5))
    b = s(30, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
