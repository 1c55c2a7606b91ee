"""Equal-mean random positions (seed blog): T evenly spaced floats over [0, n], n with mean T."""

import math

import numpy as np
import pytest
import torch

from lengen.encodings import ENCODINGS, build_encoding
from lengen.errors import LengenError
from lengen.models import ModelConfig
from lengen.positions import SAMPLERS, build_sampler


def spans(sampler, length, draws, seed=0):
    g = torch.Generator().manual_seed(seed)
    return np.array([float(sampler(length, g)[0, -1]) for _ in range(draws)])


def test_registered_and_float():
    assert "equal_mean" in SAMPLERS
    s = build_sampler("equal_mean")
    assert s.integer is False
    assert s(7).dtype == torch.float32


@pytest.mark.parametrize("options", [{}, {"distribution": "beta", "test_length": 100, "beta_shape": 0.5}])
def test_sorted_start_at_zero_evenly_spaced_over_closed_span(options):
    s = build_sampler("equal_mean", **options)
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        pos = s(20, g)
        assert pos.shape == (1, 20)
        p = pos[0].double()
        assert p[0] == 0.0                               # starts at 0
        assert torch.all(p[1:] >= p[:-1])                # sorted
        gaps = p[1:] - p[:-1]
        assert torch.allclose(gaps, gaps.mean().expand(19), atol=1e-4 * max(1.0, float(p[-1])))
        # the span n is the last position: linspace(0, 1, T) * n, both ends included
        assert math.isclose(float(gaps.mean()) * 19, float(p[-1]), rel_tol=1e-5)
    assert s(1, g).tolist() == [[0.0]]


@pytest.mark.parametrize("length", [5, 40])
def test_exponential_mean_span_is_the_sequence_length(length):
    n = spans(build_sampler("equal_mean"), length, 4000)
    # Exp(mean T): standard error of the mean T / sqrt(draws); 4 standard errors.
    assert abs(n.mean() - length) < 4 * length / math.sqrt(len(n))
    assert abs(n.std() - length) < 0.1 * length      # std = mean for an exponential
    assert (n > 3 * length).mean() > 0.02            # spans well past T are drawn (e^-3 = 0.05)


@pytest.mark.parametrize("beta_shape", [0.5, 1.0, 4.0])
def test_beta_mean_span_is_T_over_M_in_units_of_M(beta_shape):
    T, M = 40, 200
    s = build_sampler("equal_mean", distribution="beta", test_length=M, beta_shape=beta_shape)
    a, b = s.beta_params(T)
    assert math.isclose(a / (a + b), T / M) and b == beta_shape
    x = spans(s, T, 4000) / M
    assert x.min() >= 0 and x.max() <= 1
    mu = T / M
    sd = math.sqrt(mu * (1 - mu) / (a + b + 1))      # Beta standard deviation
    assert abs(x.mean() - mu) < 4 * sd / math.sqrt(len(x))
    assert abs(x.std() - sd) < 0.15 * sd


def test_beta_shape_controls_mass_near_the_test_length():
    T, M = 40, 200
    near_end = {}
    for shape in (0.5, 4.0):
        s = build_sampler("equal_mean", distribution="beta", test_length=M, beta_shape=shape)
        near_end[shape] = (spans(s, T, 3000) > 0.8 * M).mean()
    assert near_end[0.5] > near_end[4.0]


def test_deterministic_given_the_generator():
    s = build_sampler("equal_mean", distribution="beta", test_length=50)
    a = s(10, torch.Generator().manual_seed(3))
    b = s(10, torch.Generator().manual_seed(3))
    c = s(10, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_bad_options():
    with pytest.raises(LengenError, match="distribution"):
        build_sampler("equal_mean", distribution="poisson")
    with pytest.raises(LengenError, match="test_length"):
        build_sampler("equal_mean", distribution="beta")
    with pytest.raises(LengenError, match="beta_shape"):
        build_sampler("equal_mean", distribution="beta", test_length=10, beta_shape=0)
    with pytest.raises(LengenError, match="below test_length"):
        build_sampler("equal_mean", distribution="beta", test_length=10)(10)
    with pytest.raises(TypeError):
        build_sampler("equal_mean", spread=3)


FUNCTIONAL = ["none", "sincos", "rope", "alibi", "relative", "kerple_log", "kerple_power", "sandwich",
              "fire", "fire_shared", "p_rope", "fope", "cope"]


@pytest.mark.parametrize("pe", ENCODINGS.names())
def test_float_positions_accepted_by_functional_encodings_only(pe):
    # head dim 8: p_rope's default p = 0.25 rotates int(0.25 * 8 // 2) = 1 pair (none of head dim 4's 2)
    enc = build_encoding(ModelConfig(num_layers=1, num_heads=2, d_model=16, pe=pe))
    sampler = build_sampler("equal_mean")
    if pe in ("learned", "t5"):
        with pytest.raises(LengenError, match="integer"):
            enc.check_sampler(sampler)
    else:
        assert pe in FUNCTIONAL, f"new encoding {pe!r}: add it to one of the lists in this test"
        enc.check_sampler(sampler)
