"""Frequency methods and log-n: the reference values of docs/reference training_free.md §10
(d = 64, b = 10000, L0 = 2048, s = 4) and transformers' own ROPE_INIT_FUNCTIONS."""

import math
import warnings

import pytest
import torch

from lengen.encodings.rope import default_inv_freq
from lengen.extrapolation import RopeSpec, build_method
from lengen.extrapolation.logn import logn_scale

ROPE = RopeSpec(rotary_dim=64, base=10000.0, train_length=2048)


def params(spec, seq_len=2048, rope=ROPE):
    inv, af = build_method(spec, rope).rope_params(seq_len)
    assert inv.dtype == torch.float32 and inv.shape == (32,)
    return inv.double(), af


def close(actual, expected, rel=2e-7):
    expected = torch.tensor(expected, dtype=torch.float64)
    torch.testing.assert_close(actual, expected, rtol=rel, atol=0)


TABLE = {  # spec: (first 3, last 3, attention factor, seq_len)
    "rope": ([1.0, 0.7498942093, 0.5623413252], [2.371373706e-4, 1.77827941e-4, 1.333521432e-4], 1.0, 2048),
    "pi:factor=4": ([0.25, 0.1874735523, 0.1405853313], [5.928434264e-5, 4.445698525e-5, 3.33380358e-5], 1.0, 2048),
    "dynamic:factor=4": ([1.0, 0.690345254, 0.4765765697], [2.152404844e-5, 1.485902469e-5, 1.025785717e-5], 1.0, 8192),
    "ntk:factor=4": ([1.0, 0.7170983281, 0.5142300122], [6.483098033e-5, 4.64901876e-5, 3.33380358e-5], 1.0, 2048),
    "yarn:factor=4": ([1.0, 0.7498942093, 0.5623413252], [5.928434264e-5, 4.445698525e-5, 3.33380358e-5],
                      1.1386294361, 2048),
    "llama3:factor=4": ([1.0, 0.7498942093, 0.5623413252], [5.928434264e-5, 4.445698525e-5, 3.33380358e-5], 1.0, 2048),
}


@pytest.mark.parametrize("spec", list(TABLE))
def test_reference_first_last_and_attention_factor(spec):
    first, last, factor, seq_len = TABLE[spec]
    inv, af = params(spec, seq_len)
    close(inv[:3], first)
    close(inv[-3:], last)
    assert af == pytest.approx(factor, rel=1e-9)


def test_yarn_transition_band_truncated():
    inv, _ = params("yarn:factor=4")
    close(inv[8:22], [0.1, 0.07066310819, 0.04974557877, 0.03487105701, 0.02432521277, 0.01687323598,
                      0.01162721153, 0.007949839307, 0.005384615385, 0.003605260622, 0.002379136376,
                      0.001540814147, 0.0009730085108, 0.0005928434264])
    theta = default_inv_freq(64).double()
    torch.testing.assert_close(inv[:9], theta[:9], rtol=1e-7, atol=0)   # ramp 0: unchanged
    torch.testing.assert_close(inv[21:], theta[21:] / 4, rtol=1e-7, atol=0)


def test_yarn_transition_band_not_truncated():
    inv, _ = params("yarn:factor=4,truncate=false")
    close(inv[8:22], [0.1000000015, 0.0706175491, 0.0494530834, 0.0344580002, 0.0238701962, 0.016423082,
                      0.0112079531, 0.0075741792, 0.0050569717, 0.0033251136, 0.0021432224, 0.0013445317,
                      0.0008112905, 0.0005928435], rel=2e-6)


def test_yarn_attention_factor_options():
    assert params("yarn:factor=4,attention_factor=1.0")[1] == 1.0
    assert params("yarn:factor=4,mscale=0.707,mscale_all_dim=0.707")[1] == pytest.approx(1.0)
    assert params("yarn:factor=4,mscale=1,mscale_all_dim=0.5")[1] == pytest.approx(
        (0.1 * math.log(4) + 1) / (0.05 * math.log(4) + 1))
    assert params("yarn:factor=4,beta_fast=0,beta_slow=0")[0].equal(params("yarn:factor=4")[0])  # 0 = default


def test_llama3_transition_band():
    inv, _ = params("llama3:factor=4")
    close(inv[15:22], [0.01333521432, 0.008148733086, 0.004582369362, 0.00257685566, 0.001449072427,
                       0.0008148733086, 0.0005928434264])


@pytest.mark.parametrize("seq_len", [1, 100, 2047, 2048])
def test_dynamic_at_or_below_original_length_is_default_exactly(seq_len):
    inv, af = build_method("dynamic:factor=4", ROPE).rope_params(seq_len)
    assert torch.equal(inv, default_inv_freq(64, 10000.0)) and af == 1.0
    assert not torch.equal(build_method("dynamic:factor=4", ROPE).rope_params(2049)[0], inv)


def test_ntk_keeps_highest_and_divides_lowest_frequency():
    inv, _ = params("ntk:factor=4")
    theta = default_inv_freq(64).double()
    assert inv[0] == theta[0]
    assert inv[-1].item() == pytest.approx(theta[-1].item() / 4, rel=1e-6)


def test_train_length_override_in_spec():
    a, _ = params("yarn:factor=4,train_length=4096")
    b, _ = params("yarn:factor=4", rope=RopeSpec(64, 10000.0, 4096))
    assert torch.equal(a, b) and not torch.equal(a, params("yarn:factor=4")[0])


# ---- against transformers ---------------------------------------------------------------------
def hf(rope_parameters, seq_len, head_dim=64, max_pos=2048, theta=10000.0):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.LlamaConfig(
            hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
            max_position_embeddings=max_pos, rope_parameters={"rope_theta": theta, **rope_parameters},
        )
        return ROPE_INIT_FUNCTIONS[rope_parameters["rope_type"]](cfg, None, seq_len)


CASES = [
    ("pi:factor=4", {"rope_type": "linear", "factor": 4.0}),
    ("pi:factor=2.5", {"rope_type": "linear", "factor": 2.5}),
    ("dynamic:factor=4", {"rope_type": "dynamic", "factor": 4.0}),
    ("dynamic:factor=3", {"rope_type": "dynamic", "factor": 3.0}),
    ("yarn:factor=4", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}),
    ("yarn:factor=8,truncate=false", {"rope_type": "yarn", "factor": 8.0, "truncate": False,
                                       "original_max_position_embeddings": 2048}),
    ("yarn:factor=16,beta_fast=16,beta_slow=2,mscale=1,mscale_all_dim=0.5",
     {"rope_type": "yarn", "factor": 16.0, "beta_fast": 16, "beta_slow": 2, "mscale": 1.0,
      "mscale_all_dim": 0.5, "original_max_position_embeddings": 2048}),
    ("yarn:factor=4,attention_factor=0.9", {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.9,
                                            "original_max_position_embeddings": 2048}),
    ("llama3:factor=4", {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 2048}),
    ("llama3:factor=8,low_freq_factor=2,high_freq_factor=8",
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
      "original_max_position_embeddings": 2048}),
]


@pytest.mark.parametrize("seq_len", [1024, 2048, 5000, 8192])
@pytest.mark.parametrize("spec,hf_params", CASES, ids=[c[0] for c in CASES])
def test_matches_transformers(spec, hf_params, seq_len):
    ours, our_af = build_method(spec, ROPE).rope_params(seq_len)
    theirs, their_af = hf(hf_params, seq_len)
    torch.testing.assert_close(ours, theirs.float(), atol=1e-6, rtol=1e-6)
    assert our_af == pytest.approx(their_af, rel=1e-9)


def test_matches_transformers_partial_head_dim_and_base():
    rope = RopeSpec(rotary_dim=128, base=500000.0, train_length=8192)
    for spec, p in [("yarn:factor=4", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}),
                    ("llama3:factor=8", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
                    ("dynamic:factor=2", {"rope_type": "dynamic", "factor": 2.0})]:
        ours, _ = build_method(spec, rope).rope_params(20000)
        theirs, _ = hf(p, 20000, head_dim=128, max_pos=8192, theta=500000.0)
        torch.testing.assert_close(ours, theirs.float(), atol=1e-6, rtol=1e-6)


# ---- log-n ----------------------------------------------------------------------------------------
def test_logn_reference_value():
    assert logn_scale(torch.tensor([8191]), 2048).item() == pytest.approx(1.181818, abs=1e-6)
    scale = build_method("logn", ROPE).query_scale(torch.tensor([[0, 2047, 8191]]))
    assert scale.shape == (1, 1, 3, 1)
    torch.testing.assert_close(scale.flatten(), torch.tensor([1.0, 1.0, 13 / 11]))
