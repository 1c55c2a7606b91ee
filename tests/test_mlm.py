"""`lengen mlm`: the masking against its spec, the loss, bidirectionality, learning, resume,
refusals and the test-time log-n switch, on tiny models and a small corpus."""

import json
import math

import pandas as pd
import pytest
import torch

import lengen.mlm.train as train_mod
from lengen.cli import main
from lengen.mlm.config import MLMConfig
from lengen.mlm.masking import IGNORE, MASK_ID, mask_tokens
from lengen.mlm.model import MaskedLM
from lengen.mlm.train import mlm_loss, train_mlm
from lengen.models.config import ModelConfig
from guards import interrupt_on_call
from tiny_lm import CORPUS

TINY = ["--corpus", CORPUS, "--train-length", "16", "--layers", "1", "--heads", "2", "--d-model", "16",
        "--d-ff", "32", "--batch-size", "4", "--warmup", "2", "--checkpoint-every", "3", "--log-every", "2",
        "--val-windows", "4", "--no-progress", "--threads", "1"]


pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture(autouse=True)
def one_thread_each_test():
    # the commands under test set the thread count (--threads); the next test starts from one again
    torch.set_num_threads(1)


def tiny_model(causal=False, pe="rope") -> MaskedLM:
    torch.manual_seed(0)
    return MaskedLM(ModelConfig(num_layers=2, num_heads=2, d_model=16, d_ff=32, dropout=0.0, norm="pre",
                                causal=causal, pe=pe, embed_scale=False, max_position=256, train_tokens=16))


def train(out, *extra):
    return main(["mlm", "train", *TINY, "--steps", "6", "--out", str(out), *extra])


# -- masking ------------------------------------------------------------------------------------
def test_masking_matches_the_bert_spec():
    ids = torch.randint(0, 256, (500, 100), generator=torch.Generator().manual_seed(1))
    inputs, targets = mask_tokens(ids, torch.Generator().manual_seed(2), rate=0.15)
    chosen = targets != IGNORE
    assert (chosen.sum(1) == 15).all()                     # exactly round(0.15 * 100) per sequence
    assert torch.equal(targets[chosen], ids[chosen])       # targets are the original tokens
    assert torch.equal(inputs[~chosen], ids[~chosen])      # unchosen inputs untouched
    assert (targets[~chosen] == IGNORE).all()
    # every position is equally likely to be chosen (no bias to the start or end)
    per_pos = chosen.float().mean(0)
    assert per_pos.min() > 0.09 and per_pos.max() < 0.21
    n = chosen.sum().item()                                # 7,500 chosen tokens
    masked = (inputs[chosen] == MASK_ID).sum().item() / n
    kept = (inputs[chosen] == ids[chosen]).sum().item() / n
    random = 1.0 - masked - kept
    assert abs(masked - 0.8) < 0.025
    assert abs(kept - (0.1 + 0.1 / 256)) < 0.015            # a random byte equals the original 1/256 of the time
    assert abs(random - 0.1 * 255 / 256) < 0.015
    assert inputs[chosen & (inputs != MASK_ID)].max() < 256  # random replacements are bytes
    # the same generator seed gives the same masks
    again = mask_tokens(ids, torch.Generator().manual_seed(2), rate=0.15)
    assert torch.equal(again[0], inputs) and torch.equal(again[1], targets)


def test_loss_is_cross_entropy_over_the_chosen_positions_only():
    model = tiny_model()
    ids = torch.randint(0, 256, (3, 16), generator=torch.Generator().manual_seed(0))
    inputs, targets = mask_tokens(ids, torch.Generator().manual_seed(0), rate=0.25)
    pos = torch.arange(16)[None]
    loss = mlm_loss(model, inputs, targets, pos)
    with torch.no_grad():
        logp = torch.log_softmax(model(inputs, pos), -1)
    chosen = (targets != IGNORE).nonzero().tolist()
    by_hand = sum(-logp[b, t, ids[b, t]].item() for b, t in chosen) / len(chosen)
    assert loss.item() == pytest.approx(by_hand, rel=1e-5)
    # what the unchosen positions hold on the target side does not enter the loss
    everywhere = mlm_loss(model, inputs, ids, pos)
    assert everywhere.item() != pytest.approx(loss.item(), rel=1e-4)


def test_the_model_is_bidirectional_and_a_causal_one_is_not():
    model = tiny_model().eval()
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(0))
    ids[0, 5] = MASK_ID
    later = ids.clone()
    later[0, 12] = (ids[0, 12] + 1) % 256
    with torch.no_grad():
        a, b = model(ids)[0, 5], model(later)[0, 5]
        assert (a - b).abs().max() > 1e-4        # a masked token sees a later token
        model.cfg.causal = True                  # the same weights as a decoder: the control
        a, b = model(ids)[0, 5], model(later)[0, 5]
        assert torch.equal(a, b)


# -- training -------------------------------------------------------------------------------------
def test_a_short_run_beats_the_unigram_baseline(tmp_path):
    cfg = MLMConfig(model=ModelConfig(num_layers=2, num_heads=2, d_model=32, d_ff=64, dropout=0.0, norm="pre",
                                      causal=False, pe="rope", embed_scale=False, max_position=2048),
                    corpus=CORPUS, train_length=32, steps=500, batch_size=16, lr=5e-3, warmup=20,
                    checkpoint_every=500, log_every=100, val_windows=64)
    rec = train_mlm(cfg, tmp_path / "run", progress=False)
    assert rec["val_masked_tokens"] == 64 * 5
    assert rec["val_bpb"] < rec["unigram_bpb"] - 0.5, rec   # ~3.8 against ~4.8 bits per byte
    assert rec["val_accuracy"] > rec["unigram_accuracy"]


@pytest.mark.parametrize("extra", [
    ["--positions", "standard"],
    ["--positions", "randomized", "--max-position", "256"],
    ["--positions", "equal_mean", "--position-option", "distribution=exponential", "--pe", "sincos"],
    ["--positions", "equal_mean", "--position-option", "distribution=beta", "--position-option", "test_length=128",
     "--key-norm"],
])
def test_every_position_sampler_trains(tmp_path, extra):
    out = tmp_path / "run"
    assert main(["mlm", "train", *TINY, "--steps", "2", "--out", str(out), *extra]) == 0
    ev = json.loads((out / "eval.json").read_text())
    assert math.isfinite(ev["val_bpb"]) and ev["steps"] == 2


def test_interrupted_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    extra = ["--positions", "randomized", "--dropout", "0.1"]  # every random stream in play
    assert train(tmp_path / "straight", *extra) == 0
    with monkeypatch.context() as m:
        m.setattr(train_mod, "sample_windows", interrupt_on_call(train_mod.sample_windows, 5))
        assert train(tmp_path / "resumed", *extra) == 130  # killed after the checkpoint at step 3
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)["step"] == 3
    assert train(tmp_path / "resumed", *extra) == 0
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)
    assert b["step"] == 6 and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["metrics"] == [{**r, "seconds": ra["seconds"]} for r, ra in zip(b["metrics"], a["metrics"])]


# -- refusals -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    (["--pe", "learned", "--positions", "equal_mean"], "integer positions"),
    (["--positions", "equal_mean", "--position-option", "distribution=beta"], "test_length"),
    (["--positions", "spiral"], "spiral"),
    (["--mask-rate", "1.5"], "mask-rate"),
    (["--pe", "learned", "--max-position", "8"], "max_position=8"),
])
def test_bad_options_exit_2_and_write_nothing(tmp_path, capsys, extra, message):
    out = tmp_path / "run"
    assert train(out, *extra) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert message in err and err.count("error") == 1


def test_eval_refuses_bad_options_before_scoring(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--steps", "1") == 0
    assert main(["mlm", "eval", str(out), "--log-n", "maybe", "--no-progress"]) == 2
    assert main(["mlm", "eval", str(out), "--test-positions", "diagonal", "--no-progress"]) == 2
    assert main(["mlm", "eval", str(tmp_path / "nothing"), "--no-progress"]) == 2
    assert not (out / "eval-mlm").exists()
    assert "--log-n" in capsys.readouterr().err


# -- evaluation -------------------------------------------------------------------------------------
def test_log_n_changes_the_logits_only_beyond_the_training_length(tmp_path):
    out = tmp_path / "run"
    assert train(out, "--positions", "randomized", "--max-position", "256") == 0
    ev = tmp_path / "ev"
    assert main(["mlm", "eval", str(out), "--lengths", "8,16,64", "--windows", "6", "--log-n", "both",
                 "--test-positions", "random,uniform", "--out", str(ev), "--no-progress", "--threads", "1"]) == 0
    df = pd.read_csv(ev / "results.csv")
    assert set(df["method"]) == {"random", "random+logn", "uniform", "uniform+logn", "unigram"}
    assert set(df["length"]) == {8, 16, 64}
    row = {(r.method, r.length): r for r in df.itertuples()}
    for mode in ("random", "uniform"):
        plain, logn = row[(mode, 16)], row[(mode + "+logn", 16)]
        assert plain.bpb == logn.bpb and plain.accuracy == logn.accuracy   # factor log(16)/log(16) = 1
        assert row[(mode, 64)].bpb != row[(mode + "+logn", 64)].bpb        # factor 1.5
        assert row[(mode, 8)].bpb != row[(mode + "+logn", 8)].bpb          # factor 0.75
    # every variant scores the same masked tokens
    assert df.groupby("length")["masked_tokens"].nunique().eq(1).all()
    meta = json.loads((ev / "results.json").read_text())
    assert meta["train_length"] == 16 and "table_bpb" in meta


def test_eval_at_the_training_length_reproduces_eval_json(tmp_path):
    out = tmp_path / "run"
    assert train(out) == 0
    ev = tmp_path / "ev"
    assert main(["mlm", "eval", str(out), "--lengths", "16", "--windows", "4", "--log-n", "off",
                 "--out", str(ev), "--no-progress"]) == 0
    df = pd.read_csv(ev / "results.csv").set_index("method")
    rec = json.loads((out / "eval.json").read_text())
    assert df.loc["standard", "bpb"] == pytest.approx(rec["val_bpb"], rel=1e-9)
    assert df.loc["unigram", "bpb"] == pytest.approx(rec["unigram_bpb"], rel=1e-9)


def test_each_eval_command_names_the_other_for_the_other_kind_of_run(tmp_path, capsys):
    lm_run, mlm_run = tmp_path / "lm", tmp_path / "mlm"
    assert main(["lm", "train", *TINY, "--steps", "2", "--out", str(lm_run)]) == 0
    assert main(["mlm", "train", *TINY, "--steps", "2", "--out", str(mlm_run)]) == 0
    capsys.readouterr()
    assert main(["mlm", "eval", str(lm_run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"lengen: error: {lm_run}: this is a language-model run: use `lengen lm eval` (or `lengen lm train`)\n"
    assert main(["lm", "eval", str(mlm_run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"lengen: error: {mlm_run}: this is a masked-LM run: use `lengen mlm eval` (or `lengen mlm train`)\n"
