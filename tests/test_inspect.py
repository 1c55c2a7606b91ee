"""`lengen inspect`: attention probabilities checked against the fused forward pass, the activation
PCA checked against numpy's SVD, and the command's files and errors."""

import json

import numpy as np
import pytest
import torch

from lengen.cli import main
from lengen.errors import LengenError
from lengen.inspect import (
    activation_pca,
    attention_maps,
    block_outputs,
    fit_pca,
    open_run,
)
from lengen.inspect.attention import attention_modules
from lengen.models import CHEModel, ModelConfig
from lengen.che.config import TrainConfig
from lengen.che.loop import train
from lengen.training.run_dir import RunDir

N, L = 4, 8
FILES = ["inspect_attention_N4.png", "inspect_attention_L8.png", "inspect_activations.png",
         "inspect_activations.json"]


def tiny_config(**model) -> TrainConfig:
    m = {"num_layers": 2, "num_heads": 2, "d_model": 16, "d_ff": 32, "dropout": 0.0}
    m.update(model)
    return TrainConfig(task="parity_check", model=ModelConfig(**m), steps=30, batch_size=16,
                       train_length=N, max_length=L, eval_samples=16, checkpoint_every=10,
                       log_every=10, device="cpu")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("inspect") / "run"
    train(tiny_config(), path, progress=False)
    return path


# -- attention probabilities ---------------------------------------------------------------------

def test_attention_maps_are_distributions_and_leave_no_hooks(run):
    insp = open_run(run)
    inputs, out_len, pos = insp.sample(L, batch=3, seed=1)
    maps = attention_maps(insp.model, inputs, out_len, pos)
    T = inputs.shape[1] + out_len
    assert len(maps) == 2
    for p in maps:
        assert p.shape == (3, 2, T, T)
        assert torch.all(p >= 0)
        assert torch.allclose(p.sum(-1), torch.ones(3, 2, T), atol=1e-5)
    assert not torch.allclose(maps[0], maps[1])  # each layer's own input, not the same map twice
    for m in attention_modules(insp.model):
        assert not m._forward_hooks
    assert not insp.model.training


def record_layers(model, inputs, out_len, pos):
    """Each attention module's real input and output (the fused kernel / SDPA path)."""
    seen = []

    def hook(module, args, output):
        seen.append((args[0], output))

    handles = [m.register_forward_hook(hook) for m in attention_modules(model)]
    try:
        with torch.no_grad():
            model(inputs, out_len, pos)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("options", [
    {"pe": "rope"},
    {"pe": "alibi"},
    {"pe": "rope", "key_norm": True, "logit_scale": "log_n"},
    {"pe": "alibi", "causal": True, "logit_scale": "log_n_position"},
    {"pe": "relative"},
    {"pe": "t5"},
], ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_probs_times_values_reproduce_the_forward_output(options):
    """softmax probabilities @ v, through the out projection, equal the module's own output: the
    probabilities carry the same transforms, scale, bias and mask as the fused path."""
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, num_heads=2, d_model=16, d_ff=32, dropout=0.0, train_tokens=6, **options)
    model = CHEModel(cfg, input_vocab_size=3, output_vocab_size=2).eval()
    B, Lin, out_len = 2, 9, 3   # 12 tokens != train_length: log-n factors differ from 1
    inputs = torch.randint(0, 3, (B, Lin))
    pos = torch.sort(torch.randperm(40)[:Lin + out_len]).values[None]  # gaps, as with randomized positions
    maps = attention_maps(model, inputs, out_len, pos)
    seen = record_layers(model, inputs, out_len, pos)
    for layer, (attn, p, (x, out)) in enumerate(zip(attention_modules(model), maps, seen)):
        T = x.shape[1]
        assert torch.allclose(p.sum(-1), torch.ones(B, 2, T), atol=1e-5)
        if cfg.causal:
            assert torch.all(p.triu(1) == 0)
        with torch.no_grad():
            v = attn.project(x)[2]
            want = attn.out((p @ v).transpose(1, 2).reshape(B, T, cfg.d_model))
        assert torch.allclose(out, want, atol=1e-5), f"layer {layer}: {(out - want).abs().max():.2e}"


# -- activations and PCA -------------------------------------------------------------------------

def test_block_outputs_end_in_the_encoder_output(run):
    insp = open_run(run)
    inputs, out_len, pos = insp.sample(N, batch=4, seed=0)
    outs = block_outputs(insp.model, inputs, out_len, pos)
    model = insp.model
    tokens = torch.cat([inputs, torch.full((4, out_len), model.empty_token)], dim=1)
    with torch.no_grad():
        h = model.encoder(model.embed(tokens) * model.embed_scale, pos)  # post-norm: no final norm
    assert len(outs) == 2 and outs[-1].shape == h.shape
    assert torch.allclose(outs[-1], h, atol=1e-6)
    assert not torch.allclose(outs[0], outs[1])


def test_pca_matches_numpy_svd(run):
    insp = open_run(run)
    layers = activation_pca(insp, samples=8, seed=3)
    train_acts = block_outputs(insp.model, *insp.sample(N, 8, 3))
    long_acts = block_outputs(insp.model, *insp.sample(L, 8, 3))
    for d, a, b in zip(layers, train_acts, long_acts):
        X = a.reshape(-1, a.shape[-1]).double().numpy()
        Y = b.reshape(-1, b.shape[-1]).double().numpy()
        mean = X.mean(axis=0)
        _, S, Vt = np.linalg.svd(X - mean, full_matrices=False)
        var = S**2 / (len(X) - 1)
        np.testing.assert_allclose(d["pca"].explained_variance, var[:2], rtol=1e-6)
        np.testing.assert_allclose(d["ratio"], var[:2] / var.sum(), rtol=1e-6)
        np.testing.assert_allclose(d["pca"].mean, mean, atol=1e-9)
        for got, rows in ((d["train"], X), (d["long"], Y)):
            want = (rows - mean) @ Vt[:2].T
            assert got.shape == (len(rows), 2)
            for c in range(2):  # a principal direction is defined up to its sign
                sign = np.sign(got[:, c] @ want[:, c])
                np.testing.assert_allclose(got[:, c], sign * want[:, c], atol=1e-6)
        T_N, T_L = a.shape[1], b.shape[1]
        assert list(d["train_index"][:T_N + 1]) == list(range(T_N)) + [0]
        assert d["long_index"].max() == T_L - 1


def test_fit_pca_recovers_a_known_direction():
    rng = np.random.default_rng(0)
    direction = np.array([3.0, 4.0, 0.0]) / 5
    X = np.outer(rng.normal(size=500) * 10, direction) + rng.normal(size=(500, 3)) * 0.1 + 7
    pca = fit_pca(X)
    assert abs(pca.components[0] @ direction) > 0.999
    assert pca.explained_variance_ratio[0] > 0.99
    assert pca.components.shape == (2, 3) and pca.explained_variance_ratio.sum() <= 1 + 1e-12


# -- the command ---------------------------------------------------------------------------------

def test_cli_writes_the_figures_and_the_json(run, tmp_path, capsys):
    out = tmp_path / "figs"
    assert main(["inspect", str(run), "--out", str(out), "--samples", "4"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    for name in FILES[:3]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record = json.loads((out / "inspect_activations.json").read_text())
    assert (record["train_length"], record["length"], record["samples"]) == (N, L, 4)
    assert [layer["layer"] for layer in record["layers"]] == [1, 2]
    for layer in record["layers"]:
        r1, r2 = layer["explained_variance_ratio"]
        assert 1 >= r1 >= r2 >= 0 and r1 + r2 <= 1 + 1e-9
    assert record["command"].startswith(f"lengen inspect {run} ")
    assert not any(p.name.startswith("inspect_") for p in run.iterdir())  # --out, not the run dir
    assert capsys.readouterr().out.count("wrote ") == 4


def test_cli_attention_only_with_a_length(run, tmp_path):
    out = tmp_path / "figs"
    assert main(["inspect", str(run), "--attention", "--length", "6", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["inspect_attention_L6.png", "inspect_attention_N4.png"]


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("lengen: error: ")
    return err


def test_cli_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    folder = tmp_path / "plain"
    folder.mkdir()
    out = tmp_path / "figs"
    assert main(["inspect", str(folder), "--out", str(out)]) == 2
    assert "not a lengen run directory" in error_line(capsys)
    assert not out.exists() and not any(folder.iterdir())


def test_cli_refuses_bad_lengths_and_missing_checkpoints(run, tmp_path, capsys):
    out = tmp_path / "figs"
    assert main(["inspect", str(run), "--length", "0", "--out", str(out)]) == 2
    assert "--length must be >= 1" in error_line(capsys)
    # a learned position table of 12 rows serves length 8 (9 tokens) but not length 20 (21 tokens)
    learned = RunDir(tmp_path / "learned")
    learned.claim(tiny_config(pe="learned", max_position=12).to_dict())
    assert main(["inspect", str(learned.path), "--length", "20", "--out", str(out)]) == 2
    assert "max_position=12" in error_line(capsys)
    assert main(["inspect", str(learned.path), "--out", str(out)]) == 2
    assert "no checkpoint" in error_line(capsys)
    assert not out.exists()
    with pytest.raises(LengenError):
        open_run(run, length=-3)
