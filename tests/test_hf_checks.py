"""Input `lengen hf eval`, `hf tune` and `hf methods` refuse in one line before the model loads:
--train-length (one rule for the three commands) and a remapping window past the trained length."""

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import lengen.hf.evaluate as evaluate  # noqa: E402
import lengen.hf.tuning as tuning  # noqa: E402
from lengen.cli import main  # noqa: E402

from guards import ModelLoaded, no_model  # noqa: E402
from tiny_llama import save_tiny_llama  # noqa: E402

pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("hf"))   # trained to 64 positions


def commands(model_dir, out, value):
    model = str(model_dir / "model")
    return {"eval": ["hf", "eval", model, "--lengths", "128", "--train-length", value, "--out", str(out),
                     "--no-progress"],
            "tune": ["hf", "tune", model, "--text", str(model_dir / "corpus"), "--length", "128",
                     "--methods", "rerope", "--train-length", value, "--out", str(out), "--no-progress"],
            "methods": ["hf", "methods", model, "--train-length", value]}


@pytest.mark.parametrize("value", ["0", "1", "-64"])
def test_train_length_below_2_is_refused_alike_by_eval_tune_and_methods(model_dir, tmp_path, capsys, monkeypatch,
                                                                        value):
    """hf eval took 0 for "the config's" (64) without a word; hf methods refused < 1, hf tune < 2."""
    monkeypatch.setattr(evaluate, "load", no_model)
    monkeypatch.setattr(tuning, "load", no_model)
    errors = {}
    for name, argv in commands(model_dir, tmp_path / "out", value).items():
        assert main(argv) == 2, name
        errors[name] = capsys.readouterr().err
    assert set(errors.values()) == {f"lengen: error: --train-length must be >= 2 tokens (the context the model was "
                                    f"trained on; leave it out for the config's), got {value}\n"}
    assert not (tmp_path / "out").exists()


def test_train_length_2_is_accepted_by_all_three(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(evaluate, "load", no_model)
    monkeypatch.setattr(tuning, "load", no_model)
    argv = commands(model_dir, tmp_path / "out", "2")
    for name in ("eval", "tune"):
        with pytest.raises(ModelLoaded):
            main(argv[name])
    assert main(argv["methods"]) == 0 and "L0 = 2" in capsys.readouterr().out


@pytest.mark.parametrize("spec,refused", [
    ("rerope:window=1000", "the window (1000) must be <= 64 for a model trained on 64 tokens"),
    ("rerope:window=65+logn", "the window (65) must be <= 64"),
    ("rerope:window=64", None),                       # far pairs at r = 64, as lambda's default
    ("self_extend:group=4,window=64", "the window (64) must be <= 63"),   # far pairs would start at 64
    ("self_extend:group=4,window=63", None),
    ("lambda:window=64", None),
    ("dca:chunk_size=65,local_size=8", "the chunk_size (65) must be <= 64"),
    ("yarn:factor=4+rerope:window=100", None),        # yarn stretches the trained range
])
def test_a_window_past_the_trained_length_is_refused_before_the_weights_are_read(model_dir, tmp_path, capsys,
                                                                                monkeypatch, spec, refused):
    monkeypatch.setattr(evaluate, "model_fingerprint", no_model)   # reads every weight
    argv = ["hf", "eval", str(model_dir / "model"), "--lengths", "128", "--methods", "rope", spec,
            "--out", str(tmp_path / "out"), "--no-progress"]
    if refused is None:
        with pytest.raises(ModelLoaded):
            main(argv)
        return
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lengen: error: {spec}: {refused}") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    # the window is measured against --train-length when given
    with pytest.raises(ModelLoaded):
        main([*argv, "--train-length", "2000"])
