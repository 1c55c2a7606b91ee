"""`hf eval` results and `hf tune` caches follow the model, not its folder: a copy elsewhere
resumes them, another model (same shapes and file sizes, other weights) is refused."""

import json
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import lengen.hf.identity as identity  # noqa: E402
from lengen.cli import main  # noqa: E402
from lengen.hf.identity import model_fingerprint  # noqa: E402

from guards import no_model  # noqa: E402
from tiny_llama import save_tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = save_tiny_llama(tmp_path_factory.mktemp("hf"))
    (root / "texts").mkdir()
    (root / "texts" / "a.txt").write_text("".join(f"x{i} = {i * i} + y{i % 7}  # square\n" for i in range(200)))
    (root / "texts" / "b.txt").write_text("The quick brown fox jumps over the lazy dog. " * 60)
    return root


pytestmark = pytest.mark.usefixtures("private_cache")


def fine_tuned(src, dst):
    """A copy of the model at src with one weight changed (the hardest fine-tune to notice): the
    same shapes and file sizes."""
    model = transformers.AutoModelForCausalLM.from_pretrained(src)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] += 0.5
    model.save_pretrained(dst)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, dst / name)
    return dst


def test_the_fingerprint_is_the_models_not_the_folders(model_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(identity, "CHUNK", 1000)   # several chunks per file
    src = model_dir / "model"
    copy = shutil.copytree(src, tmp_path / "copy")
    (copy / "README.md").write_text("a model card is not the model")
    tuned = fine_tuned(src, tmp_path / "tuned")
    weights = sorted(p.name for p in src.iterdir() if p.suffix == ".safetensors")
    assert weights and all((tuned / w).stat().st_size == (src / w).stat().st_size for w in weights)
    assert model_fingerprint(copy) == model_fingerprint(src)
    assert model_fingerprint(tuned) != model_fingerprint(src)
    # the tokenizer is part of the model: another one scores other tokens
    other_tok = shutil.copytree(src, tmp_path / "other-tok")
    spec = json.loads((other_tok / "tokenizer.json").read_text())
    spec["added_tokens"] = spec.get("added_tokens", []) + [
        {"id": 99, "content": "<extra>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}]
    (other_tok / "tokenizer.json").write_text(json.dumps(spec))
    assert model_fingerprint(other_tok) != model_fingerprint(src)


def eval_args(model, out, *methods, corpus):
    return ["hf", "eval", str(model), "--corpus", str(corpus), "--docs", "1",
            "--protocol", "last-segment", "--segment", "8", "--lengths", "32", "64",
            "--methods", *methods, "--out", str(out), "--no-progress"]


def test_eval_results_resume_from_a_copy_of_the_model_elsewhere(model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(eval_args(model_dir / "model", out, "rope", corpus=model_dir / "texts")) == 0
    first = json.loads((out / "results.json").read_text())["rows"]
    moved = shutil.copytree(model_dir, tmp_path / "elsewhere")
    assert main(eval_args(moved / "model", out, "rope", "pi:factor=2", corpus=model_dir / "texts")) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["rope", "rope", "pi:factor=2", "pi:factor=2"]
    assert rows[:2] == first   # kept, not measured again
    tuned = fine_tuned(model_dir / "model", moved / "tuned")
    capsys.readouterr()
    before = (out / "results.json").read_text()
    assert main(eval_args(tuned, out, "rope", corpus=model_dir / "texts")) == 2
    err = capsys.readouterr().err
    assert "other settings (model: 'sha256:" in err and len(err.strip().splitlines()) == 1
    assert (out / "results.json").read_text() == before


def test_results_written_before_fingerprints_resume_from_the_same_path_only(model_dir, tmp_path, capsys):
    """Older results.json name the model by its resolved path (settings.model_path)."""
    out = tmp_path / "out"
    assert main(eval_args(model_dir / "model", out, "rope", corpus=model_dir / "texts")) == 0
    record = json.loads((out / "results.json").read_text())
    settings = record["meta"]["settings"]
    del settings["model"]
    settings["model_path"] = str((model_dir / "model").resolve())
    (out / "results.json").write_text(json.dumps(record))
    assert main(eval_args(model_dir / "model", out, "rope", "pi:factor=2", corpus=model_dir / "texts")) == 0
    assert len(json.loads((out / "results.json").read_text())["rows"]) == 4
    # the rewritten record is keyed by the fingerprint now; an old one at another path is refused
    settings["model_path"] = "/somewhere/else"
    (out / "results.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert main(eval_args(model_dir / "model", out, "rope", corpus=model_dir / "texts")) == 2
    assert "model: 'the model at /somewhere/else' there" in capsys.readouterr().err


def test_a_tune_cache_resumes_from_a_copy_of_the_model_elsewhere(model_dir, tmp_path, monkeypatch, capsys):
    import lengen.hf.tuning as tuning

    def args(model):
        return ["hf", "tune", str(model), "--text", str(model_dir / "texts"), "--length", "128",
                "--segment", "32", "--methods", "rerope", "--budget", "10", "--no-refine", "--no-logn",
                "--out", str(tmp_path / "out"), "--no-progress"]

    assert main(args(model_dir / "model")) == 0
    first = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert first["meta"]["new_evaluations"] > 0
    moved = shutil.copytree(model_dir, tmp_path / "elsewhere")
    with monkeypatch.context() as m:
        m.setattr(tuning, "load", no_model)   # every score is cached: the model is not even loaded
        assert main(args(moved / "model")) == 0
    again = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert again["meta"]["new_evaluations"] == 0 and again["ranking"] == first["ranking"]
    tuned = fine_tuned(model_dir / "model", moved / "tuned")
    capsys.readouterr()
    assert main(args(tuned)) == 2
    assert "holds scores of other settings (model: 'sha256:" in capsys.readouterr().err


def test_eval_results_follow_the_token_sequences_not_the_corpus_path(model_dir, tmp_path, capsys):
    """A copy of the corpus at another path resumes the rows; another text is refused before the
    model loads, nothing written; a record without sequences_digest compares the corpus path."""
    out = tmp_path / "out"
    assert main(eval_args(model_dir / "model", out, "rope", corpus=model_dir / "texts")) == 0
    record = json.loads((out / "results.json").read_text())
    assert len(record["meta"]["sequences_digest"]) == 20
    moved = shutil.copytree(model_dir / "texts", tmp_path / "elsewhere")
    assert main(eval_args(model_dir / "model", out, "rope", "pi:factor=2", corpus=moved)) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["rope", "rope", "pi:factor=2", "pi:factor=2"] and rows[:2] == record["rows"]
    # another text: the first document changed by one character
    other = shutil.copytree(model_dir / "texts", tmp_path / "other")
    text = (other / "a.txt").read_text()
    (other / "a.txt").write_text("y" + text[1:])
    before = (out / "results.json").read_text()
    capsys.readouterr()
    assert main(eval_args(model_dir / "model", out, "rope", "yarn:factor=2", corpus=other)) == 2
    err = capsys.readouterr().err
    assert "scored on other token sequences" in err and "Loading weights" not in err
    assert (out / "results.json").read_text() == before
    # an older record (no digest): the corpus as given must be the same
    old = json.loads(before)
    del old["meta"]["sequences_digest"]
    old["meta"]["settings"]["corpus"] = str(model_dir / "texts")
    (out / "results.json").write_text(json.dumps(old))
    assert main(eval_args(model_dir / "model", out, "rope", "yarn:factor=2", corpus=moved)) == 2
    assert f"corpus: '{model_dir / 'texts'}' there" in capsys.readouterr().err
    assert main(eval_args(model_dir / "model", out, "rope", "yarn:factor=2", corpus=model_dir / "texts")) == 0
    assert "sequences_digest" in json.loads((out / "results.json").read_text())["meta"]
