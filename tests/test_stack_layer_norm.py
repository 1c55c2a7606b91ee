"""lengen.kernels.layer_norm: one model alone and a vmapped stack of models, each with its own
weight and bias, against layer norm written out per model (mean, biased variance, eps)."""

import torch
from torch import nn
from torch.func import functional_call, vmap

from lengen.kernels.layer_norm import LayerNorm


def naive(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def test_one_model_is_nn_layer_norm_exactly():
    g = torch.Generator().manual_seed(0)
    ref = nn.LayerNorm(6)
    ours = LayerNorm(6)
    with torch.no_grad():
        for m in (ref, ours):
            m.weight.copy_(torch.randn(6, generator=g.manual_seed(1)))
            m.bias.copy_(torch.randn(6, generator=g.manual_seed(2)))
    x = torch.randn(3, 5, 6, generator=g).requires_grad_()
    dout = torch.randn(3, 5, 6, generator=g)
    a, b = ours(x), ref(x)
    assert torch.equal(a, b)
    ga = torch.autograd.grad(a, (x, ours.weight, ours.bias), dout)
    gb = torch.autograd.grad(b, (x, ref.weight, ref.bias), dout)
    for u, v in zip(ga, gb):
        assert torch.equal(u, v)
    torch.testing.assert_close(a.double(), naive(x.double(), ours.weight.double(), ours.bias.double(), 1e-5))


def test_stack_of_models_matches_each_model_written_out():
    N, d, eps = 3, 8, 1e-5
    g = torch.Generator().manual_seed(3)
    module = LayerNorm(d, eps=eps)
    w = torch.randn(N, d, generator=g).requires_grad_()
    b = torch.randn(N, d, generator=g).requires_grad_()
    x = (3 * torch.randn(N, 2, 5, d, generator=g) + 1).requires_grad_()

    def one(wi, bi, xi):
        return functional_call(module, {"weight": wi, "bias": bi}, (xi,))

    out = vmap(one)(w, b, x)
    ref = torch.stack([naive(x[i].double(), w[i].double(), b[i].double(), eps) for i in range(N)])
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    dout = torch.randn(out.shape, generator=g)
    for u, v in zip(torch.autograd.grad(out, (x, w, b), dout), torch.autograd.grad(ref, (x, w, b), dout.double())):
        torch.testing.assert_close(u.double(), v.double(), atol=1e-4, rtol=1e-4)


def test_under_vmap_the_rule_runs_one_addcmul_and_no_separate_scale_or_shift():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    module = LayerNorm(4)
    w, b = torch.ones(2, 4, requires_grad=True), torch.zeros(2, 4, requires_grad=True)
    x = torch.randn(2, 3, 4)
    ops = Ops()
    with ops:
        vmap(lambda wi, bi, xi: functional_call(module, {"weight": wi, "bias": bi}, (xi,)))(w, b, x)
    assert "aten.addcmul.default" in ops.names
    assert not any(n.startswith(("aten.mul.", "aten.add.")) for n in ops.names)
