"""`lengen hf eval` end to end on a tiny random Llama saved to disk with a character tokenizer."""

import csv
import json
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from lengen.cli import main  # noqa: E402
from lengen.cli.hf import parse_length  # noqa: E402
from lengen.hf import protocols  # noqa: E402

TEXT = ("def area(r):\n    return 3.14159 * r * r\n\nclass Point:\n    x = 0\n    y = 1\n\n"
        "# The grass is green. The sky is blue. Here we go.\n") * 20


def char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(i) for i in range(32, 127)] + ["\n"]
    vocab = {"<unk>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=100, max_position_embeddings=64, eos_token_id=1)
    transformers.LlamaForCausalLM(config).save_pretrained(root / "model")
    char_tokenizer().save_pretrained(root / "model")
    for i in range(3):
        (root / "corpus").mkdir(exist_ok=True)
        (root / "corpus" / f"part{i}.txt").write_text(TEXT)
    return root


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_ppl_writes_csv_json_and_plot(model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["hf", "eval", str(model_dir / "model"), "--corpus", str(model_dir / "corpus"),
               "--methods", "rope", "yarn:factor=2", "rerope:window=16+logn",
               "--lengths", "32", "64", "128", "--docs", "2", "--out", str(out), "--no-progress"])
    assert rc == 0
    rows = read_csv(out / "results.csv")
    assert list(rows[0]) == ["method", "length", "ppl"]
    assert [(r["method"], int(r["length"])) for r in rows] == [
        (m, n) for m in ["rope", "yarn:factor=2", "rerope:window=16+logn"] for n in (32, 64, 128)]
    assert all(math.isfinite(float(r["ppl"])) and float(r["ppl"]) > 1 for r in rows)
    result = json.loads((out / "results.json").read_text())
    assert result["meta"]["train_length"] == 64 and len(result["rows"]) == 9
    assert (out / "plot.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "rerope:window=16+logn" in printed and "| ppl \\ length" in printed


def test_last_segment_and_passkey(model_dir, tmp_path):
    out = tmp_path / "seg"
    assert main(["hf", "eval", str(model_dir / "model"), "--corpus", str(model_dir / "corpus" / "*.txt"),
                 "--protocol", "last-segment", "--segment", "16", "--methods", "rope", "dynamic:factor=2",
                 "--lengths", "32", "96", "--docs", "1", "--out", str(out), "--no-progress"]) == 0
    assert len(read_csv(out / "results.csv")) == 4
    out = tmp_path / "pk"
    assert main(["hf", "eval", str(model_dir / "model"), "--protocol", "passkey", "--trials", "2",
                 "--methods", "rope", "self_extend:group=4,window=32", "--lengths", "320",
                 "--out", str(out), "--no-progress", "--attn", "eager"]) == 0
    rows = read_csv(out / "results.csv")
    assert list(rows[0]) == ["method", "length", "accuracy"] and len(rows) == 2
    assert all(0 <= float(r["accuracy"]) <= 1 for r in rows)


def test_rerun_into_the_same_out_adds_methods_and_refuses_other_settings(model_dir, tmp_path, capsys):
    base = ["hf", "eval", str(model_dir / "model"), "--corpus", str(model_dir / "corpus"), "--docs", "1",
            "--lengths", "32", "64", "--out", str(tmp_path), "--no-progress"]
    assert main(base + ["--methods", "rope"]) == 0
    first = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert main(base + ["--methods", "rope", "pi:factor=2"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert rows[:2] == first and [r["method"] for r in rows] == ["rope", "rope", "pi:factor=2", "pi:factor=2"]
    assert len(read_csv(tmp_path / "results.csv")) == 4
    capsys.readouterr()
    assert main(base + ["--methods", "rope", "--docs", "2"]) == 2
    assert "other settings (docs: 1 there, 2 now)" in capsys.readouterr().err


def test_bad_model_path_exits_2_with_one_clear_message(model_dir, tmp_path, capsys):
    assert main(["hf", "eval", str(tmp_path / "missing"), "--lengths", "64", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lengen: error: MODEL_PATH") and "not a local folder" in err
    assert len(err.splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert main(["hf", "eval", str(tmp_path / "empty"), "--lengths", "64", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lengen: error: cannot load a model from") and len(err.splitlines()) == 1
    assert main(["hf", "eval", str(model_dir / "model"), "--lengths", "64", "--methods", "yarn:nope=1",
                 "--no-progress"]) == 2
    assert "unknown option" in capsys.readouterr().err


def test_lengths_accept_k_suffix():
    assert parse_length("4k") == 4096 and parse_length("16384") == 16384


def test_protocols_on_a_toy_model():
    # a "model" that predicts token t+1 = t + 1 (mod 10) perfectly: ppl 1 on counting documents
    def logits_fn(ids):
        return torch.nn.functional.one_hot((ids + 1) % 10, 10).float() * 50

    nll = protocols.nll_from_logits(logits_fn)
    docs = [[i % 10 for i in range(s, s + 40)] for s in range(3)]
    assert protocols.perplexity(nll, docs, 32) == pytest.approx(1.0)
    docs[0][-1] = (docs[0][-2] + 5) % 10     # one wrong target in the shared last segment
    values = [protocols.last_segment_perplexity(nll, docs, n, 8) for n in (16, 40)]
    assert values[0] == pytest.approx(values[1]) and values[0] > 2
    assert math.isnan(protocols.perplexity(nll, docs, 41))


def test_passkey_prompt_fits_the_length_and_is_scored():
    def encode(text):
        return list(text.encode())

    ids = protocols.fit_prompt(encode, 1000, 12345, 0.5)
    text = bytes(ids).decode()
    assert 950 <= len(ids) <= 1000 and "The pass key is 12345. Remember it." in text
    assert text.endswith("What is the pass key? The pass key is")

    def oracle(ids, n):   # reads the key back from the prompt
        return list(bytes(ids).decode().split("The pass key is ")[1].split(".")[0].encode())

    assert protocols.passkey_accuracy(oracle, encode, lambda t: bytes(t).decode(), 600, 5) == 1.0
    assert protocols.passkey_accuracy(lambda ids, n: list(b" 7"), encode,
                                      lambda t: bytes(t).decode(), 600, 5) == 0.0


def test_default_corpus_is_the_stdlib_in_sorted_order(tmp_path):
    from lengen.errors import LengenError
    from lengen.hf.corpus import corpus_files, documents

    files = corpus_files(None)
    assert files[0].suffix == ".py" and not any("site-packages" in p.parts for p in files[:200])
    docs = documents(files, lambda t: list(t.encode()), 2, 5000)
    assert [len(d) for d in docs] == [5000, 5000]
    assert documents(files, lambda t: list(t.encode()), 2, 5000) == docs   # deterministic
    (tmp_path / "a.txt").write_text("short")
    with pytest.raises(LengenError, match="gives only 0 documents"):
        documents(corpus_files(str(tmp_path)), lambda t: list(t.encode()), 1, 100)
