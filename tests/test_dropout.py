import torch

from lengen.models.dropout import Dropout, bernoulli_keep_mask


def test_keep_rate_and_independence():
    torch.manual_seed(0)
    mask = bernoulli_keep_mask((400, 1000), 0.1)
    rate = mask.float().mean().item()
    assert abs(rate - 0.9) < 0.003           # 400k draws: std ~ 0.0005
    # each of the four 16-bit lanes of a 64-bit word is unbiased on its own
    lanes = mask.view(-1, 4).float().mean(0)
    assert torch.all((lanes - 0.9).abs() < 0.005)
    # neighbouring elements are uncorrelated
    flat = mask.view(-1).float()
    corr = torch.corrcoef(torch.stack([flat[:-1], flat[1:]]))[0, 1]
    assert abs(corr) < 0.01


def test_expectation_preserved_and_eval_identity():
    torch.manual_seed(1)
    d = Dropout(0.25)
    x = torch.ones(200, 500)
    y = d.train()(x)
    values = torch.unique(y)
    assert len(values) == 2 and values[0] == 0 and torch.isclose(values[1], torch.tensor(1 / 0.75))
    assert abs(y.mean().item() - 1.0) < 0.01
    assert torch.equal(d.eval()(x), x)


def test_gradient_uses_the_same_mask():
    torch.manual_seed(2)
    x = torch.randn(30, 40, requires_grad=True)
    y = Dropout(0.5).train()(x)
    y.sum().backward()
    assert torch.equal(x.grad != 0, y != 0)
