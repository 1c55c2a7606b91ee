"""The CHE benchmark's recurrent baselines (RNN, LSTM, Stack-RNN, Tape-RNN): memory updates against
hand-computed examples, every model against a naive step-by-step version of the reference
equations (Deletang et al. 2023, arXiv 2207.02098) written here, gradients, learning, and their
place in the command line, sweeps, run ids and reports."""

import hashlib
import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from lengen.errors import LengenError
from lengen.models import ModelConfig
from lengen.models.recurrent import (
    LSTMModel,
    RNNModel,
    StackRNNModel,
    TapeRNNModel,
    build_model,
    stack_update,
    tape_update,
)
from lengen.reports import che_aggregate as agg
from lengen.sweeps import expand, parse_spec, run_id
from lengen.che.config import TrainConfig
from lengen.che.loop import load_trained, train
from lengen.training.run_dir import RunDir
from lengen.che.setup import build_run

RECURRENT = ["rnn", "lstm", "stack_rnn", "tape_rnn"]
T = torch.tensor


# -- the stack ----------------------------------------------------------------------------------

STACK = T([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]])   # B=1, D=3 cells of d=2, row 0 the top
VALUE = T([[7.0, 8.0]])


def test_pure_push_puts_the_value_on_top_and_drops_the_bottom():
    out = stack_update(STACK, T([[1.0, 0.0, 0.0]]), VALUE)
    assert torch.equal(out, T([[[7.0, 8.0], [1.0, 2.0], [3.0, 4.0]]]))


def test_pure_pop_removes_the_top_and_brings_in_a_zero_cell():
    out = stack_update(STACK, T([[0.0, 1.0, 0.0]]), VALUE)
    assert torch.equal(out, T([[[3.0, 4.0], [5.0, 6.0], [0.0, 0.0]]]))


def test_pure_noop_keeps_the_stack_and_a_mixture_mixes():
    assert torch.equal(stack_update(STACK, T([[0.0, 0.0, 1.0]]), VALUE), STACK)
    out = stack_update(STACK, T([[0.5, 0.25, 0.25]]), VALUE)
    # 0.5 * push + 0.25 * pop + 0.25 * no-op, cell by cell
    expected = T([[[0.5 * 7 + 0.25 * 3 + 0.25 * 1, 0.5 * 8 + 0.25 * 4 + 0.25 * 2],
                   [0.5 * 1 + 0.25 * 5 + 0.25 * 3, 0.5 * 2 + 0.25 * 6 + 0.25 * 4],
                   [0.5 * 3 + 0.25 * 0 + 0.25 * 5, 0.5 * 4 + 0.25 * 0 + 0.25 * 6]]])
    assert torch.allclose(out, expected)


def test_hard_coded_actions_make_the_stack_reverse_a_string():
    bits = [0, 1, 1, 0, 1, 0, 0]
    push, pop = T([[1.0, 0.0, 0.0]]), T([[0.0, 1.0, 0.0]])
    stack = torch.zeros(1, len(bits), 2)
    for b in bits:                                   # push the one-hot of each bit
        stack = stack_update(stack, push, F.one_hot(T([b]), 2).float())
    read = []
    for _ in bits:                                   # read the top, then pop it
        read.append(int(stack[0, 0].argmax()))
        assert stack[0, 0].sum() == 1
        stack = stack_update(stack, pop, torch.zeros(1, 2))
    assert read == bits[::-1]
    assert torch.equal(stack, torch.zeros(1, len(bits), 2))


# -- the tape -----------------------------------------------------------------------------------

TAPE = T([[[10.0], [11.0], [12.0], [13.0], [14.0]]])   # B=1, S=5 cells of d=1, row 0 under the head
WRITE = T([[99.0]])
JUMP = 2  # L


@pytest.mark.parametrize("action,expected", [
    (0, [99, 11, 12, 13, 14]),   # stay: the written tape as it is
    (1, [11, 12, 13, 14, 99]),   # left: new[m] = W[m+1]
    (2, [14, 99, 11, 12, 13]),   # right: new[m] = W[m-1]
    (3, [12, 13, 14, 99, 11]),   # jump left: new[m] = W[m+L]
    (4, [13, 14, 99, 11, 12]),   # jump right: new[m] = W[m-L]
])
def test_pure_tape_actions_write_the_head_then_shift(action, expected):
    actions = F.one_hot(T([action]), 5).float()
    out = tape_update(TAPE, actions, WRITE, JUMP)
    assert torch.equal(out, T(expected, dtype=torch.float)[None, :, None])


def test_tape_actions_mix_linearly():
    actions = T([[0.1, 0.2, 0.3, 0.15, 0.25]])
    out = tape_update(TAPE, actions, WRITE, JUMP)[0, :, 0]
    rows = T([[99, 11, 12, 13, 14], [11, 12, 13, 14, 99], [14, 99, 11, 12, 13], [12, 13, 14, 99, 11],
              [13, 14, 99, 11, 12]], dtype=torch.float)
    assert torch.allclose(out, actions[0] @ rows)


# -- every model against the reference equations, written out here ------------------------------

def one_hots(model, inputs, out_len):
    B = inputs.shape[0]
    tokens = torch.cat([inputs, torch.full((B, out_len), model.empty_token)], 1)
    return F.one_hot(tokens, model.width).double()


def naive_rnn(m, x, L):
    Wx, bx = m.input_to_hidden.weight, m.input_to_hidden.bias
    Wh, bh = m.hidden_to_hidden.weight, m.hidden_to_hidden.bias
    h = torch.zeros(x.shape[0], Wh.shape[0], dtype=x.dtype)
    hs = []
    for t in range(x.shape[1]):
        h = torch.relu(x[:, t] @ Wx.T + bx + h @ Wh.T + bh)
        hs.append(h)
    return hs


def naive_lstm(m, x, L):
    W, b = m.gates.weight, m.gates.bias
    H = W.shape[0] // 4
    h = torch.zeros(x.shape[0], H, dtype=x.dtype)
    c = torch.zeros_like(h)
    hs = []
    for t in range(x.shape[1]):
        z = torch.cat([x[:, t], h], 1) @ W.T + b
        i, g, f, o = z[:, :H], z[:, H:2 * H], z[:, 2 * H:3 * H], z[:, 3 * H:]   # haiku order i, g, f, o
        c = torch.sigmoid(f + 1) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        hs.append(h)
    return hs


def naive_stack_rnn(m, x, L):
    Wx, bx = m.input_to_hidden.weight, m.input_to_hidden.bias
    Wh, bh = m.hidden_to_hidden.weight, m.hidden_to_hidden.bias
    B, N, _ = x.shape
    D, d = N, m.cell                                     # default depth: L + T steps
    S = torch.zeros(B, D, d, dtype=x.dtype)
    h = torch.zeros(B, Wh.shape[0], dtype=x.dtype)
    hs = []
    for t in range(N):
        h = torch.relu(torch.cat([x[:, t], S[:, 0]], 1) @ Wx.T + bx + h @ Wh.T + bh)
        a = torch.softmax(h @ m.actions.weight.T + m.actions.bias, -1)
        v = h @ m.push_value.weight.T + m.push_value.bias
        new = torch.zeros_like(S)
        for i in range(D):
            above = v if i == 0 else S[:, i - 1]
            below = S[:, i + 1] if i + 1 < D else torch.zeros_like(v)
            new[:, i] = a[:, 0:1] * above + a[:, 1:2] * below + a[:, 2:3] * S[:, i]
        S = new
        hs.append(h)
    return hs


def naive_tape_rnn(m, x, L):
    Wx, bx = m.input_to_hidden.weight, m.input_to_hidden.bias
    Wh, bh = m.hidden_to_hidden.weight, m.hidden_to_hidden.bias
    l1, _, l2, _, l3 = m.write_mlp
    B, N, _ = x.shape
    size, d = N, m.cell
    M = torch.zeros(B, size, d, dtype=x.dtype)
    h = torch.zeros(B, Wh.shape[0], dtype=x.dtype)
    hs = []
    for t in range(N):
        h = torch.relu(torch.cat([x[:, t], M[:, 0]], 1) @ Wx.T + bx + h @ Wh.T + bh)
        w = torch.relu(h @ l1.weight.T + l1.bias)
        w = torch.relu(w @ l2.weight.T + l2.bias)
        w = w @ l3.weight.T + l3.bias
        a = torch.softmax(h @ m.actions.weight.T + m.actions.bias, -1)
        W = M.clone()
        W[:, 0] = w
        new = torch.zeros_like(M)
        for j in range(size):
            new[:, j] = (a[:, 0:1] * W[:, j] + a[:, 1:2] * W[:, (j + 1) % size] + a[:, 2:3] * W[:, (j - 1) % size]
                         + a[:, 3:4] * W[:, (j + L) % size] + a[:, 4:5] * W[:, (j - L) % size])
        M = new
        hs.append(h)
    return hs


NAIVE = {"rnn": naive_rnn, "lstm": naive_lstm, "stack_rnn": naive_stack_rnn, "tape_rnn": naive_tape_rnn}
SMALL = dict(hidden_size=12, memory_cell_size=3)


def small_model(arch, vocab_in=3, vocab_out=4, seed=0):
    torch.manual_seed(seed)
    kw = SMALL if arch in ("stack_rnn", "tape_rnn") else {"hidden_size": 12}
    m = build_model(ModelConfig(architecture=arch, **kw), vocab_in, vocab_out).double()
    with torch.no_grad():  # haiku's biases start at zero: give them values so they are tested too
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    return m


@pytest.mark.parametrize("arch", RECURRENT)
@pytest.mark.parametrize("L,out_len", [(5, 3), (1, 1), (4, 8)])
def test_model_matches_the_reference_equations_step_by_step(arch, L, out_len):
    m = small_model(arch)
    inputs = torch.randint(0, 3, (4, L), generator=torch.Generator().manual_seed(L))
    x = one_hots(m, inputs, out_len)
    hs = NAIVE[arch](m, x, L)
    expected = torch.stack([torch.relu(h) @ m.readout.weight.T + m.readout.bias for h in hs[L:]], 1)
    got = m(inputs, out_len, positions=torch.arange(L + out_len)[None])
    assert got.shape == (4, out_len, 4)
    assert torch.allclose(got, expected, atol=1e-10), (got - expected).abs().max()


@pytest.mark.parametrize("arch", RECURRENT)
def test_gradients_match_finite_differences(arch):
    m = small_model(arch)
    inputs = torch.randint(0, 3, (2, 3), generator=torch.Generator().manual_seed(1))
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in m.parameters())

    def logits(*values):
        return torch.func.functional_call(m, dict(zip(names, values)), (inputs, 2))

    assert torch.autograd.gradcheck(logits, params, eps=1e-6, atol=1e-5)


def test_memory_updates_pass_gradcheck():
    g = torch.Generator().manual_seed(0)
    stack, value = torch.randn(2, 4, 3, generator=g, dtype=torch.float64), torch.randn(2, 3, generator=g,
                                                                                         dtype=torch.float64)
    actions = torch.softmax(torch.randn(2, 3, generator=g, dtype=torch.float64), -1)
    tape, write = torch.randn(2, 5, 3, generator=g, dtype=torch.float64), value.clone()
    tape_actions = torch.softmax(torch.randn(2, 5, generator=g, dtype=torch.float64), -1)
    for t in (stack, value, actions, tape, write, tape_actions):
        t.requires_grad_()
    assert torch.autograd.gradcheck(stack_update, (stack, actions, value))
    assert torch.autograd.gradcheck(lambda a, b, c: tape_update(a, b, c, 2), (tape, tape_actions, write))


def test_haiku_init_truncated_normal_and_zero_bias():
    torch.manual_seed(0)
    m = build_model(ModelConfig(architecture="lstm"), 2, 2)    # gates: fan_in 3 + 256
    w = m.gates.weight
    std = 1 / (3 + 256) ** 0.5
    assert w.abs().max() <= 2 * std
    assert abs(w.std().item() / std - 0.88) < 0.03    # a normal truncated at 2 std has std 0.88 s
    assert torch.equal(m.gates.bias, torch.zeros_like(m.gates.bias))
    assert [type(build_model(ModelConfig(architecture=a), 2, 2)) for a in RECURRENT] == \
        [RNNModel, LSTMModel, StackRNNModel, TapeRNNModel]


def test_memory_size_is_the_sequence_length_unless_fixed():
    m = small_model("stack_rnn")
    assert m.memory_size(17) == 17
    fixed = build_model(ModelConfig(architecture="tape_rnn", memory_size=6), 2, 2)
    assert fixed.memory_size(17) == 6
    fixed(torch.zeros(2, 9, dtype=torch.long), 9)      # a tape shorter than the jump still runs


# -- learning -----------------------------------------------------------------------------------

def test_stack_rnn_learns_reverse_string_and_its_stack_carries_it_beyond(tmp_path):
    cfg = TrainConfig(task="reverse_string", model=ModelConfig(architecture="stack_rnn", hidden_size=32),
                      steps=400, batch_size=32, train_length=6, max_length=12, eval_samples=64, lr=1e-2,
                      checkpoint_every=1000, log_every=50, seed=0)
    record = train(cfg, tmp_path / "run", progress=False)
    # chance is 0.5 per bit. Measured: 1.0 at lengths 1..6 and 1.0 at 7..12. A 32-wide state can
    # hold 6 bits without the stack, so lengths 7..12 are the check on the stack: the RNN alone
    # (same setting) reached 0.76 there, and a Stack-RNN whose pop did nothing 0.78
    assert record["accuracy_in_train_range"] > 0.95, record["accuracy_by_length"]
    assert record["score"] > 0.95, record["accuracy_by_length"]


@pytest.mark.parametrize("arch", RECURRENT)
def test_runs_train_checkpoint_and_reload(arch, tmp_path):
    cfg = TrainConfig(task="duplicate_string", model=ModelConfig(architecture=arch, hidden_size=8), steps=3,
                      batch_size=4, train_length=3, max_length=4, eval_samples=4, checkpoint_every=2, log_every=1)
    record = train(cfg, tmp_path / "run", progress=False)
    assert set(record["accuracy_by_length"]) == {"1", "2", "3", "4"}
    saved = TrainConfig.from_dict(json.loads((tmp_path / "run" / "config.json").read_text()))
    assert saved.model.architecture == arch
    parts = load_trained(RunDir(tmp_path / "run"), saved)
    trained = build_run(cfg).model
    trained.load_state_dict(torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=False)["model"])
    x = torch.randint(0, 2, (2, 5))
    assert torch.equal(parts.model(x, 10), trained(x, 10))
    assert record["model"] == arch  # eval.json says which model it scored


def test_inspect_refuses_a_recurrent_run(tmp_path, capsys):
    from lengen.cli import main

    cfg = TrainConfig(task="parity_check", model=ModelConfig(architecture="lstm", hidden_size=8), steps=1,
                      batch_size=2, train_length=2, max_length=2, eval_samples=2)
    train(cfg, tmp_path / "run", progress=False)
    assert main(["inspect", str(tmp_path / "run"), "--out", str(tmp_path / "ins")]) == 2
    err = capsys.readouterr().err
    assert "is a lstm run: lengen inspect shows a Transformer's" in err and "Traceback" not in err
    assert not (tmp_path / "ins").exists()


# -- configs, run ids, command line, sweeps, reports --------------------------------------------

def test_old_configs_load_and_keep_their_run_ids():
    cfg = TrainConfig()
    old = cfg.to_dict()
    del old["device"]
    for key in ("architecture", "hidden_size", "memory_cell_size", "memory_size",
                "layer_pe", "logit_scale_options"):  # the last two: added later still (issue 27)
        del old["model"][key]
    expected = hashlib.sha256(json.dumps(old, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    assert run_id(cfg) == expected
    assert TrainConfig.from_dict(old).model.architecture == "transformer"
    assert run_id(TrainConfig(model=ModelConfig(architecture="lstm"))) != expected


def test_configs_refuse_settings_the_model_does_not_read():
    with pytest.raises(LengenError, match="pe do not apply|pe does not apply"):
        TrainConfig(model=ModelConfig(architecture="rnn", pe="alibi")).validate()
    with pytest.raises(LengenError, match="positions does not apply to model 'tape_rnn'"):
        TrainConfig(model=ModelConfig(architecture="tape_rnn"), positions="randomized").validate()
    with pytest.raises(LengenError, match="memory-size does not apply to model 'lstm'"):
        TrainConfig(model=ModelConfig(architecture="lstm", memory_size=10)).validate()
    with pytest.raises(LengenError, match="hidden-size does not apply to model 'transformer'"):
        TrainConfig(model=ModelConfig(hidden_size=10)).validate()
    with pytest.raises(LengenError, match="unknown model 'gru'"):
        TrainConfig(model=ModelConfig(architecture="gru")).validate()
    with pytest.raises(LengenError, match="test positions 'uniform' do not apply"):
        build_run(TrainConfig(model=ModelConfig(architecture="rnn")), test_mode="uniform")
    TrainConfig(model=ModelConfig(architecture="stack_rnn", memory_size=50), test_positions="standard").validate()


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "lengen", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args,message", [
    (["--model", "lstm", "--pe", "rope"], "--pe does not apply to model 'lstm'"),
    (["--model", "stack_rnn", "--positions", "standard", "--layers", "5"],
     "--positions, --layers do not apply to model 'stack_rnn'"),
    (["--model", "tape_rnn", "--pe-option", "base=10", "--key-norm"], "--pe-option, --key-norm do not apply"),
    (["--model", "rnn", "--memory-size", "40"], "--memory-size does not apply to model 'rnn'"),
    (["--hidden-size", "64"], "--hidden-size does not apply to model 'transformer'"),
    (["--model", "gru"], "invalid choice: 'gru'"),
])
def test_cli_refuses_transformer_options_for_a_recurrent_model(tmp_path, args, message):
    out = tmp_path / "run"
    r = run_cli("train", "--steps", "2", "--train-length", "4", "--max-length", "6", "--out", str(out), *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()
    if "invalid choice" not in message:
        assert len(r.stderr.strip().splitlines()) == 1


TINY = {"task": "parity_check", "steps": 2, "batch_size": 4, "train_length": 3, "max_length": 4,
        "eval_samples": 4}


def test_sweep_with_models_expands_and_refuses_positions_for_recurrent_points():
    runs = expand(parse_spec({"grid": {"model": ["transformer", "stack_rnn"]}, "fixed": TINY}))
    assert [r.config.model.architecture for r in runs] == ["transformer", "stack_rnn"]
    with pytest.raises(LengenError) as e:
        expand(parse_spec({"grid": {"model": ["transformer", "stack_rnn"], "pe": ["rope", "alibi"]},
                           "fixed": TINY}))
    assert "grid point {model: stack_rnn, pe: alibi}: pe does not apply to model 'stack_rnn'" in str(e.value)
    with pytest.raises(LengenError, match="{model: rnn, positions: randomized}: positions does not apply"):
        expand(parse_spec({"grid": {"model": ["transformer", "rnn"], "positions": ["standard", "randomized"]},
                           "fixed": TINY}))
    # the positions grid crosses the models; the recurrent x randomized points are excluded
    runs = expand(parse_spec({"grid": {"model": ["transformer", "rnn"], "positions": ["standard", "randomized"]},
                              "exclude": [{"model": "rnn", "positions": "randomized"}], "fixed": TINY}))
    assert [(r.config.model.architecture, r.config.positions) for r in runs] == [
        ("transformer", "standard"), ("transformer", "randomized"), ("rnn", "standard")]


def test_sweep_across_models_applies_fixed_sizes_where_they_are_read():
    # `fixed` sets the Transformer's size and the recurrent hidden size in one sweep: each run
    # takes the options its model reads; a grid value that does not apply is still refused
    fixed = {**TINY, "d_model": 32, "layers": 2, "hidden_size": 48}
    runs = expand(parse_spec({"grid": {"model": ["transformer", "lstm"]}, "fixed": fixed}))
    t, lstm = (r.config.model for r in runs)
    default = ModelConfig()
    assert (t.architecture, t.d_model, t.num_layers, t.hidden_size) == ("transformer", 32, 2, default.hidden_size)
    assert (lstm.architecture, lstm.d_model, lstm.num_layers, lstm.hidden_size) == (
        "lstm", default.d_model, default.num_layers, 48)
    # the Transformer run's id is that of a Transformer-only sweep with the same sizes
    alone = expand(parse_spec({"grid": {"seed": [0]}, "fixed": {**TINY, "d_model": 32, "layers": 2}}))
    assert runs[0].run_id == alone[0].run_id
    # with the model fixed (not crossed), an option it does not read is a mistake, as on the command line
    with pytest.raises(LengenError, match="layers, d-model do not apply to model 'lstm'"):
        expand(parse_spec({"grid": {"seed": [0]}, "fixed": {**fixed, "model": "lstm"}}))
    with pytest.raises(LengenError, match="{model: lstm, d_model: 16}: d-model does not apply"):
        expand(parse_spec({"grid": {"model": ["transformer", "lstm"], "d_model": [16]}, "fixed": TINY}))


def test_sweep_preset_expands():
    from lengen.sweeps import load_spec

    runs = expand(load_spec("che-baselines-mini"))
    archs = {r.config.model.architecture for r in runs}
    assert archs == {"transformer", *RECURRENT}


def test_report_columns_name_the_architecture_after_the_transformer():
    rows = []
    for model, pe, positions, score in [("stack_rnn", "rope", "standard", 0.9), ("transformer", "rope", "standard", 0.5),
                                        ("transformer", "rope", "randomized", 0.7), ("rnn", "rope", "standard", 0.6)]:
        rows.append({"run_id": model + positions, "task": "reverse_string", "pe": pe, "positions": positions,
                     "test_positions": "standard", "lr": 1e-3, "seed": 0, "score": score, "seconds": 1.0,
                     "done": True, "model": model})
    runs = agg.add_variants(pd.DataFrame(rows))
    t1 = agg.table1(runs)
    assert list(t1.columns) == ["rope", "r_rope", "RNN", "Stack-RNN"]
    assert t1.loc["reverse_string"].tolist() == pytest.approx([50.0, 70.0, 60.0, 90.0])
    # the randomized gain compares Transformer columns only
    assert agg.randomized_gain(t1)["reverse_string"] == pytest.approx(20.0)
