"""Issue 49's accepted nonsense and misleading messages: refused in one line (exit 2) before
anything is written, named as the user typed it; the one did-you-mean; a zero-step arith run."""

import json

import pandas as pd
import pytest
import torch

import lengen.inspect

from lengen.arith.config import ArithConfig, split_pe
from lengen.cli import main
from lengen.encodings import ENCODINGS
from lengen.errors import LengenError, did_you_mean, reason
from lengen.inspect import check_memory
from lengen.models.config import ModelConfig, model_label
from lengen.options import parse_key_values
from lengen.registry import Registry
from lengen.reports.che_compare import resolve_variant
from lengen.tasks import get_task
from lengen.che.config import TrainConfig

TINY = ["--layers", "1", "--heads", "2", "--d-model", "16", "--d-ff", "32", "--device", "cpu", "--no-progress"]


# -- did you mean ---------------------------------------------------------------------------------
@pytest.mark.parametrize("typed,valid,hints,expected", [
    ("p-rope", ENCODINGS.names(), None, "p_rope"),          # the same name up to - and _
    ("P_RoPE", ENCODINGS.names(), None, "p_rope"),          # and case
    ("nope", ENCODINGS.names(), ENCODINGS.hints, "none"),   # a paper's name for it
    ("sed", ["seed", "steps", "dropout"], None, "seed"),    # a typo
    ("abacuss", ["abacus", "rope"], None, "abacus"),
    ("out", ["dropout", "seed", "steps"], None, None),      # shares letters only: ratio 0.6
    ("xyz", ["rope", "fire"], None, None),
    ("nope", ["fire"], {"nope": "none"}, None),             # a hint to a name that is not valid
])
def test_did_you_mean(typed, valid, hints, expected):
    assert did_you_mean(typed, valid, hints) == expected


def test_a_registry_suggests_and_still_lists_the_valid_names():
    reg = Registry("colour", hints={"grey": "gray"})
    for name in ("red", "gray"):
        reg.add(name, object())
    with pytest.raises(LengenError) as e:
        reg.get("rde")
    assert str(e.value) == "unknown colour 'rde' (did you mean 'red'?); valid: red, gray"
    with pytest.raises(LengenError) as e:
        reg.get("grey")
    assert "(did you mean 'gray'?)" in str(e.value)
    with pytest.raises(LengenError) as e:
        reg.get("blue")
    assert str(e.value) == "unknown colour 'blue'; valid: red, gray"


@pytest.mark.parametrize("pe,guess", [("abacuss", "abacus"), ("abacus+rpoe", "abacus+rope"),
                                      ("p-rope", "p_rope"), ("abacus+nope", "abacus+none")])
def test_arith_pe_is_suggested_among_arith_names(pe, guess):
    with pytest.raises(LengenError) as e:
        split_pe(pe)
    assert f"unknown pe {pe!r} (did you mean {guess!r}?)" in str(e.value)
    assert "abacus, abacus+ENCODING or ENCODING" in str(e.value)


@pytest.mark.parametrize("argv,message", [
    (["train", "--pe", "p-rope"], "unknown positional encoding 'p-rope' (did you mean 'p_rope'?)"),
    (["train", "--pe", "nope"], "unknown positional encoding 'nope' (did you mean 'none'?)"),
    (["train", "--task", "revers_string"], "unknown task 'revers_string' (did you mean 'reverse_string'?)"),
    (["arith", "train", "--pe", "abacuss"], "unknown pe 'abacuss' (did you mean 'abacus'?)"),
    # accepted nonsense: refused in the flag's own terms
    (["arith", "train", "--test-digits", "2", "--train-digits", "3"],
     "test-digits 2 < train-digits 3: the evaluation must cover the training digits"),
    (["arith", "train", "--weight-decay", "-0.5"], "weight-decay must be >= 0, got -0.5"),
    (["lm", "train", "--weight-decay", "-0.5"], "weight-decay must be >= 0, got -0.5"),
    (["arith", "train", "--seed", "-1"], "seed must be >= 0, got -1"),
    (["arith", "train", "--warmup", "-1"], "warmup must be >= 0, got -1"),
    (["arith", "train", "--pe", "alibi", "--positions", "coupled", "--format", "padded", "--max-position", "16"],
     "the causal form of alibi assumes"),
    (["arith", "train", "--pe", "t5", "--positions", "coupled", "--format", "padded", "--max-position", "16"],
     "the causal form of t5 assumes"),
    (["arith", "train", "--pe", "abacus+fire", "--positions", "coupled"], "the causal form of fire assumes"),
    (["arith", "train", "--pe-option", "base=500", "--pe", "rope", "--pe-option", "base=10000"],
     "--pe-option base is given twice ('base=500' and 'base=10000')"),
    (["train", "--pe-option", "base=500", "--pe-option", "base=500"], "--pe-option base is given twice"),
    # an option value the encoding itself refuses: one line from every command that builds a model
    *[([*cmd, "--pe", "sandwich", "--pe-option", "dim=3"],
       "encoding 'sandwich' with options {'dim': 3}: sandwich: dim must be even")
      for cmd in (["train"], ["lm", "train"], ["mlm", "train"], ["arith", "train"])],
    (["lm", "train", "--pe", "relative", "--pe-option", "rel_dim=5"], "relative encoding: rel_dim must be even"),
])
def test_refused_in_one_line_before_anything_is_written(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_the_boundaries_are_accepted():
    # test digits == train digits: a grid of the training cells only
    ArithConfig(train_digits=3, test_digits=3).validate()
    ArithConfig(weight_decay=0.0).validate()
    # coupled ids with encodings that read both signs
    for pe in ("learned", "rope", "abacus+rope"):
        ArithConfig(pe=pe, positions="coupled", format="padded", model=ArithConfig().model).validate()
    assert parse_key_values(["base=500", "scale=2"], "--pe-option") == {"base": 500, "scale": 2}


def test_past_only_encodings_are_the_ones_the_doc_names():
    # docs/arithmetic.md: ALiBi, T5's buckets and FIRE read coupled (non-growing) ids wrongly
    assert sorted(n for n in ENCODINGS if ENCODINGS.get(n).causal_past_only) == ["alibi", "fire", "fire_shared", "t5"]


@pytest.mark.parametrize("flag,value,message", [("--seed", "-1", "--seed must be >= 0, got -1"),
                                                ("--samples", "0", "--samples must be >= 1, got 0"),
                                                ("--test-digits", "0", "--test-digits must be >= 1, got 0")])
def test_arith_eval_names_its_own_flags(tmp_path, capsys, flag, value, message):
    out = tmp_path / "run"
    assert main(["arith", "train", *TINY, "--steps", "0", "--train-digits", "1", "--test-digits", "2",
                 "--eval-samples", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["arith", "eval", str(out), flag, value, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"lengen: error: {message}" and "warmup" not in err


def test_arith_train_with_zero_steps_evaluates_the_untrained_model_and_reruns(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["arith", "train", *TINY, "--steps", "0", "--train-digits", "1", "--test-digits", "1",
            "--eval-samples", "2", "--out", str(out)]
    for _ in range(2):  # the rerun finds the finished zero-step run
        assert main(argv) == 0
        printed = capsys.readouterr().out
        assert " 0 steps\n" in printed and "training loss" not in printed
    record = json.loads((out / "eval.json").read_text())
    assert record["steps"] == 0 and record["train_loss"] is None


def test_a_key_value_flag_refuses_a_key_given_twice():
    with pytest.raises(LengenError, match=r"--pe-option base is given twice \('base=500' and 'base=1e4'\)"):
        parse_key_values(["base=500", "scale=2", "base=1e4"], "--pe-option")
    with pytest.raises(LengenError, match="given twice"):   # the same key, spelled with - and _
        parse_key_values(["init-L=4", "init_L=5"], "--pe-option")


@pytest.mark.parametrize("changes,message", [
    (dict(test_digits=2, train_digits=3), "test-digits 2 < train-digits 3"),
    (dict(weight_decay=-0.5), "weight-decay must be >= 0, got -0.5"),
    (dict(eval_seed=-1), "eval-seed must be >= 0, got -1"),
    (dict(pe="alibi", positions="coupled", format="padded"), "the causal form of alibi assumes"),
])
def test_arith_config_refusals(changes, message):
    with pytest.raises(LengenError, match=message):
        ArithConfig(**changes).validate()
    if "test_digits" in changes:   # arith eval may look at the trained cells only
        ArithConfig(**changes).validate(training=False)


@pytest.mark.parametrize("grid,expected,unexpected", [
    ({"sed": [0, 1]}, "unknown `lengen train` option 'sed' (did you mean 'seed'?)", "valid:"),
    ({"out": ["x"]}, "unknown `lengen train` option 'out'; valid: batch_size, ", "did you mean"),
    ({"pe": ["nope"]}, "unknown positional encoding 'nope' (did you mean 'none'?)", None),
])
def test_sweep_files_use_the_same_did_you_mean(tmp_path, capsys, grid, expected, unexpected):
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({"grid": grid, "fixed": {"steps": 1}}))  # JSON is YAML
    assert main(["sweep", "run", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert expected in err and (unexpected is None or unexpected not in err), err


# -- messages that fit the command ----------------------------------------------------------------
CHE_TINY = ["--task", "reverse_string", "--train-length", "4", "--max-length", "5", "--eval-samples", "2",
            "--batch-size", "4", "--layers", "1", "--heads", "2", "--d-model", "16", "--d-ff", "32",
            "--device", "cpu", "--no-progress"]


def test_reason_keeps_whole_words_and_the_first_sentence():
    torch_text = ("PytorchStreamReader failed reading zip archive: failed finding central directory. This "
                  "is an internal miniz error. If you are seeing this error, there is a high likelihood")
    assert reason(RuntimeError(torch_text)) == ("RuntimeError: PytorchStreamReader failed reading zip archive: "
                                                "failed finding central directory")
    cut = reason(ValueError("word " * 60), limit=22)
    assert cut == "ValueError: word word word word ..."   # 4 words (19 + 1 + 4 = 24 > 22: not 5)
    assert reason(ValueError("")) == "ValueError"


def test_a_damaged_checkpoint_is_named_with_advice_that_fits_the_command(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", *CHE_TINY, "--steps", "2", "--checkpoint-every", "1", "--out", str(run)]
    assert main(argv) == 0
    ckpt = run / "checkpoint.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:3000])
    capsys.readouterr()
    for command in (["eval", str(run)], ["inspect", str(run), "--attention"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{ckpt} is damaged (RuntimeError: PytorchStreamReader failed reading " \
            "zip archive: failed finding central directory); the trained weights cannot be read: put back a " \
            "good copy" in err, err
        assert "restart the run" not in err
    assert main(argv) == 2   # training resumes from it: starting over is what it can do
    assert "is damaged (RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central " \
        "directory); delete it to restart the run from step 0" in capsys.readouterr().err


@pytest.mark.parametrize("checkpoint_every", [10, 500])
def test_a_diverged_run_says_which_checkpoint_is_kept(tmp_path, capsys, checkpoint_every):
    run = tmp_path / "run"
    assert main(["train", *CHE_TINY, "--lr", "1e6", "--steps", "100", "--log-every", "50",
                 "--checkpoint-every", str(checkpoint_every), "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert "training diverged at step 50" in err
    if (run / "checkpoint.pt").exists():
        step = torch.load(run / "checkpoint.pt", weights_only=False)["step"]
        assert f"the checkpoint of step {step} is kept" in err and checkpoint_every == 10
    else:
        assert "no checkpoint was written before it" in err and "kept" not in err


# -- labels ---------------------------------------------------------------------------------------
def test_model_label_names_every_option_that_changes_the_attention():
    assert model_label(ModelConfig(pe="rope")) == "pe=rope"
    cfg = ModelConfig(pe="rope", pe_options={"base": 500}, layer_pe=["rope", "none"],
                      logit_scale="llama4_temperature", logit_scale_options={"floor_scale": 8}, key_norm=True)
    assert model_label(cfg) == ("pe=rope(base=500)  layer-pe=rope,none  "
                                "logit-scale=llama4_temperature(floor_scale=8)  key-norm")
    assert model_label(ModelConfig(architecture="lstm")) == "model=lstm"
    assert model_label(ArithConfig(pe="abacus+rope").model, "abacus+rope") == "pe=abacus+rope"


def test_a_layer_pattern_run_is_labelled_by_it_in_the_summary_eval_json_and_inspect(tmp_path, capsys,
                                                                                     monkeypatch):
    run = tmp_path / "run"
    assert main(["train", *CHE_TINY, "--layers", "2", "--pe", "rope", "--layer-pe", "rope,none",
                 "--logit-scale", "llama4_temperature", "--steps", "1", "--out", str(run)]) == 0
    label = "pe=rope  layer-pe=rope,none  logit-scale=llama4_temperature"
    assert f"reverse_string  {label}  positions=standard" in capsys.readouterr().out
    assert json.loads((run / "eval.json").read_text())["label"] == label
    assert main(["inspect", str(run), "--activations", "--samples", "2"]) == 0
    assert json.loads((run / "inspect_activations.json").read_text())["label"] == label
    titles = []
    monkeypatch.setattr(lengen.inspect, "plot_attention", lambda maps, n, path, title, caption: titles.append(title))
    assert main(["inspect", str(run), "--attention"]) == 0
    assert len(titles) == 2 and all(t.startswith(f"reverse_string  {label}  positions=") for t in titles), titles


# -- inspect's memory ----------------------------------------------------------------------------
def test_inspect_refuses_a_length_whose_maps_do_not_fit_before_any_work(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert main(["train", *CHE_TINY, "--steps", "1", "--max-position", "300000", "--out", str(run)]) == 0
    monkeypatch.setattr(lengen.inspect, "available_memory", lambda: 10**9)
    capsys.readouterr()
    assert main(["inspect", str(run), "--attention", "--length", "100000"]) == 2
    err = capsys.readouterr().err
    # by hand: reverse_string's L input tokens and L answer slots; float32 maps of 1 layer x 2 heads,
    # 2 summaries per layer and 20 while drawing
    tokens = 2 * 100000
    need = 4 * tokens**2 * (1 * 2 + 2 * 1 + 20)
    largest = int((10**9 / (4 * 24)) ** 0.5) // 2
    assert err.strip() == (f"lengen: error: --length 100000 needs about {need / 1e9:,.1f} GB of memory for the "
                           f"attention maps ({tokens:,} tokens), 1.0 GB are available; the largest length "
                           f"that fits is {largest}"), err
    assert not list(run.glob("inspect_*"))
    cfg, task = TrainConfig.from_dict(json.loads((run / "config.json").read_text())), get_task("reverse_string")
    check_memory(cfg, task, largest, True, False, 1, 10**9)   # the boundary: the largest passes
    with pytest.raises(LengenError):
        check_memory(cfg, task, largest + 1, True, False, 1, 10**9)
    check_memory(cfg, task, 100000, True, False, 1, None)     # memory unknown: no refusal


# -- report --compare: the sweep file's variant names, labels with commas ---------------------------
def test_compare_takes_the_sweep_files_variant_names_and_quotes_labels(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({
        "name": "v", "grid": {"task": ["parity_check"], "seed": [0, 1]},
        "fixed": {"steps": 4, "batch_size": 4, "train_length": 3, "max_length": 4, "eval_samples": 4, "heads": 2,
                  "d_model": 8, "d_ff": 16, "checkpoint_every": 4, "log_every": 2, "pe": "rope"},
        "variants": {"plain": {"layers": 2}, "mixed": {"layers": 2, "layer_pe": "rope,none"},
                     "alibi": {"layers": 1, "pe": "alibi"}}}))
    sweep = tmp_path / "sweep"
    assert main(["sweep", "run", str(spec), "--out", str(sweep), "--workers", "1", "--device", "cpu",
                 "--no-progress"]) == 0
    capsys.readouterr()
    # the file's names stand for the labels the tables use: mixed -> "rope, layers=2, RoPE/NoPE 1:1"
    assert main(["report", str(sweep), "--compare", "mixed", "plain"]) == 0
    by_name = capsys.readouterr().out
    assert main(["report", str(sweep), "--compare", "rope, layers=2, RoPE/NoPE 1:1", "rope, layers=2"]) == 0
    assert capsys.readouterr().out == by_name and "| rope, layers=2, RoPE/NoPE 1:1 - rope, layers=2 |" in by_name
    assert main(["report", str(sweep), "--versus", "plain"]) == 0
    assert main(["report", str(sweep), "--compare", "mixed", "nothing"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("its variants: 'rope, layers=2' | 'rope, layers=2, RoPE/NoPE 1:1' | "
                                     "'alibi, layers=1'") in err, err


def test_a_file_variant_crossed_with_the_grid_asks_for_one_label():
    runs = pd.DataFrame({"variant": ["rope, lr=0.1", "alibi, lr=0.1"], "variant_order": [(0, 0), (0, 1)]})
    named = {"fast": ["rope, lr=0.1", "alibi, lr=0.1"], "one": ["rope, lr=0.1"]}
    assert resolve_variant(runs, "one", "--compare", named) == "rope, lr=0.1"
    assert resolve_variant(runs, "alibi, lr=0.1", "--compare", named) == "alibi, lr=0.1"
    with pytest.raises(LengenError) as e:
        resolve_variant(runs, "fast", "--compare", named)
    assert str(e.value) == ("--compare: the sweep file's variant 'fast' has runs under 2 labels (it is crossed "
                            "with the grid): give one of 'rope, lr=0.1' | 'alibi, lr=0.1'")


@pytest.mark.parametrize("argv,guess", [
    (["train", "--stpes", "10"], "--steps"),                        # the command's own flags
    (["arith", "train", "--train-digts=3"], "--train-digits"),      # a subcommand's, KEY=VALUE form
    (["train", "--out-dir", "x"], None),                            # nothing close: no guess
])
def test_an_unknown_flag_gets_a_did_you_mean_among_the_commands_flags(tmp_path, capsys, argv, guess):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--no-progress"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("lengen: error: unrecognized arguments: ")
    assert (f"(did you mean {guess}?)" in err) if guess else "did you mean" not in err, err


@pytest.mark.parametrize("argv,message", [
    (["arith", "train", "--format", "revesed"], "unknown format 'revesed' (did you mean 'reversed'?); valid: reversed,"),
    (["sweep", "presets", "--show", "ruoss2023-mnii"], "unknown sweep preset 'ruoss2023-mnii' (did you mean "
                                                        "'ruoss2023-mini'?)"),
])
def test_other_unknown_names_share_the_did_you_mean(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err
