"""A group in precision bf16 runs on bf16 activations (lengen.che.stack): the forward on a bf16
copy of the weights, the weights, their gradients and Adam's state float32. Checked against the
same group in float32 from the same start and data: every registered encoding trains, and the
first step's losses agree to bf16's precision."""

import numpy as np
import pytest
import torch

from lengen.che.config import TrainConfig
from lengen.che.group_step import group_step, step_buckets
from lengen.che.setup import build_run
from lengen.che.stack import ModelStack
from lengen.encodings import ENCODINGS
from lengen.models import ModelConfig

CPU = torch.device("cpu")


def group(pe, precision, n=2):
    model = ModelConfig(num_layers=2, num_heads=2, d_model=16, d_ff=32, dropout=0.0, pe=pe, max_position=64)
    cfgs = [TrainConfig(task="reverse_string", model=model, batch_size=4, train_length=5, max_length=7, seed=s,
                        lr=1e-3 * (1 + s), precision=precision, device="cpu") for s in range(n)]
    parts = []
    for c in cfgs:
        torch.manual_seed(c.seed)
        parts.append(build_run(c))
    stack = ModelStack([p.model for p in parts], cfgs, [torch.Generator().manual_seed(c.seed) for c in cfgs], CPU)
    stack.train(True)
    rngs = [np.random.default_rng(c.seed) for c in cfgs]
    gens = [torch.Generator().manual_seed(c.seed) for c in cfgs]
    return cfgs, parts, stack, rngs, gens


@pytest.mark.parametrize("pe", ENCODINGS.names())
def test_bf16_group_step_matches_fp32_to_bf16_precision(pe):
    losses = {}
    for precision in ("fp32", "bf16"):
        cfgs, parts, stack, rngs, gens = group(pe, precision)
        before = {n: p.detach().clone() for n, p in stack.params.items()}
        loss, _, _ = group_step(stack, parts, cfgs, rngs, gens, CPU, buckets=2)
        losses[precision] = loss
        assert all(p.dtype == torch.float32 for p in stack.params.values())
        assert all(m.dtype == torch.float32 for m in stack.exp_avg.values())
        assert all(torch.isfinite(p).all() for p in stack.params.values())
        assert any(not torch.equal(before[n], p) for n, p in stack.params.items())  # it stepped
    assert torch.isfinite(losses["bf16"]).all()
    torch.testing.assert_close(losses["bf16"], losses["fp32"], atol=3e-2, rtol=0)


@pytest.mark.parametrize("precision, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_the_stack_computes_in_the_activation_dtype(precision, dtype):
    cfgs, parts, stack, rngs, gens = group("rope", precision)
    (members, _, padded), *_ = step_buckets(parts, cfgs, rngs, gens, CPU, buckets=1)
    tokens, pos, key_bias, n_keys, out_idx, *_ = padded
    logits = stack(tokens, pos, key_bias, n_keys, out_idx)
    assert logits.dtype == dtype
    logits.float().sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in stack.params.values())
