"""`lengen hf eval` end to end on a tiny random Llama saved to disk with a character tokenizer."""

import csv
import json
import math
import re
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from lengen.cli import main  # noqa: E402
from lengen.cli.parsers.common import parse_lengths  # noqa: E402

from tiny_llama import TEXT, bos_char_tokenizer, char_tokenizer, save_tiny_llama  # noqa: E402
from guards import ModelLoaded, no_model  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("hf"))


pytestmark = pytest.mark.usefixtures("private_cache")


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
    assert "rerope:window=16+logn" in printed and printed.splitlines()[0].replace(" ", "") == "|method|32|64|128|"


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
    # results.json keeps every prompt's key and what the model generated, for inspection
    for row in json.loads((out / "results.json").read_text())["rows"]:
        assert len(row["answers"]) == 2 and all(isinstance(a["generated"], str) for a in row["answers"])
        assert row["accuracy"] == sum(a["answer"] == a["key"] for a in row["answers"]) / 2


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


def test_rerun_with_other_lengths_keeps_the_sequences_the_rows_were_measured_on(model_dir, tmp_path, capsys):
    """Sequences are max(lengths) + 1 tokens: a shorter length added later must be measured on the
    same sequences (the same last segment) as the rows already there, and a longer one is refused."""
    base = ["hf", "eval", str(model_dir / "model"), "--corpus", str(model_dir / "corpus"), "--docs", "1",
            "--protocol", "last-segment", "--segment", "8", "--methods", "rope", "--no-progress"]
    assert main(base + ["--lengths", "16", "96", "--out", str(tmp_path / "a")]) == 0
    assert main(base + ["--lengths", "48", "--out", str(tmp_path / "a")]) == 0
    assert main(base + ["--lengths", "16", "48", "96", "--out", str(tmp_path / "b")]) == 0
    added, fresh = (read_csv(tmp_path / d / "results.csv") for d in "ab")
    assert sorted(added, key=lambda r: int(r["length"])) == fresh
    capsys.readouterr()
    assert main(base + ["--lengths", "128", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "sequences of 97 tokens" in err and "use another --out" in err


def test_bad_model_path_exits_2_with_one_clear_message(model_dir, tmp_path, capsys):
    assert main(["hf", "eval", str(tmp_path / "missing"), "--lengths", "64", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lengen: error: MODEL_PATH") and "not a local folder" in err
    assert len(err.splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert main(["hf", "eval", str(tmp_path / "empty"), "--lengths", "64", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a Hugging Face model folder (no config.json)" in err and len(err.splitlines()) == 1
    assert err.rstrip().endswith("--gguf-file")  # the whole reason, not cut mid-sentence
    assert main(["hf", "eval", str(model_dir / "model"), "--lengths", "64", "--methods", "yarn:nope=1",
                 "--no-progress"]) == 2
    assert "unknown option" in capsys.readouterr().err


def test_lengths_accept_k_suffix_and_commas(model_dir, tmp_path, capsys):
    assert parse_lengths("4k") == [4096] and parse_lengths("16384") == [16384]
    assert parse_lengths("2k, 4k,8192,") == [2048, 4096, 8192] and parse_lengths("1.5k") == [1536]
    # spaces and commas mix on the command line; a bad piece is one clear error, exit 2
    out = tmp_path / "out"
    assert main(["hf", "eval", str(model_dir / "model"), "--corpus", str(model_dir / "corpus"), "--docs", "1",
                 "--lengths", "32,64", "48", "--out", str(out), "--no-progress"]) == 0
    assert sorted(int(r["length"]) for r in read_csv(out / "results.csv")) == [32, 48, 64]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["hf", "eval", str(model_dir / "model"), "--lengths", "4k,lots", "--no-progress"])
    assert e.value.code == 2 and "not a length: 'lots'" in capsys.readouterr().err


def test_nll_fn_follows_the_shared_convention(model_dir):
    # lengen.protocols scores a window of L + 1 tokens as a context of L tokens: the chunked
    # nll_fn must give [B, last] equal to the full logits' cross-entropy
    from lengen.hf.scoring import nll_fn
    from lengen.protocols import nll_from_logits, perplexity_vs_length

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir / "model").eval()
    ids = torch.randint(2, 100, (2, 21), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reference = nll_from_logits(lambda x: model(x).logits)(ids, 7)
        mine = nll_fn(model, chunk=3)(ids, 7)
    assert mine.shape == (2, 7)
    torch.testing.assert_close(mine.double(), reference.double(), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        point = perplexity_vs_length(nll_fn(model, chunk=4), list(ids), [20])[0]
        full = nll_from_logits(lambda x: model(x).logits)(ids, 20)
    assert point.tokens == 40 and point.ppl == pytest.approx(math.exp(float(full.mean())), rel=1e-4)


def test_corpus_sequences_come_from_lengen_data_with_the_model_tokenizer(model_dir, tmp_path):
    from lengen.errors import LengenError
    from lengen.hf.loading import corpus_encoder
    from lengen.hf.scoring import sequences
    from lengen.hf.settings import EvalSettings

    tok = char_tokenizer()
    settings = EvalSettings(str(model_dir / "model"), ["rope"], [32, 100], corpus=str(model_dir / "corpus"),
                            docs=2)
    seqs = sequences(settings, tok)
    assert [len(s) for s in seqs] == [101, 101]   # max length + 1: a context of L tokens, L targets
    assert tok.decode(seqs[0].tolist()) == TEXT[:101] and tok.decode(seqs[1].tolist()) == TEXT[:101]
    again = sequences(settings, tok)              # from the token cache now: the same sequences
    assert all((a == b).all() for a, b in zip(seqs, again))
    assert list(tmp_path.joinpath("cache").glob("corpus-*.npz"))
    assert corpus_encoder(tok).name == corpus_encoder(char_tokenizer()).name
    assert corpus_encoder(tok).EOS == 1
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "a.txt").write_text("short")
    settings.corpus = str(tmp_path / "short")
    with pytest.raises(LengenError, match="gives only 0 sequences of 101 tokens, 2 needed"):
        sequences(settings, tok)


def test_sequences_begin_with_the_bos_the_tokenizer_adds(model_dir):
    """A model whose tokenizer begins every text with BOS (Gemma: it degrades without it) is scored
    on sequences that begin so: BOS, then the text's first L tokens, L + 1 in all. A tokenizer that
    adds none (the char tokenizer, SmolLM2's) gets the text alone, as before."""
    from lengen.hf.loading import bos_prefix
    from lengen.hf.scoring import sequences
    from lengen.hf.settings import EvalSettings

    tok = bos_char_tokenizer()
    assert tok("ab")["input_ids"] == [tok.bos_token_id, tok.convert_tokens_to_ids("a"), tok.convert_tokens_to_ids("b")]
    assert bos_prefix(tok) == [tok.bos_token_id] and bos_prefix(char_tokenizer()) == []
    settings = EvalSettings(str(model_dir / "model"), ["rope"], [32], corpus=str(model_dir / "corpus"), docs=2)
    seqs = sequences(settings, tok)
    assert [len(s) for s in seqs] == [33, 33]
    for s in seqs:
        assert s[0] == tok.bos_token_id
        assert tok.decode(s[1:].tolist()) == TEXT[:32]
    assert tok.decode(sequences(settings, char_tokenizer())[0].tolist()) == TEXT[:33]


def test_last_segment_windows_begin_with_bos_at_every_length(model_dir, tmp_path):
    """hf eval's last-segment rows at a shorter length score BOS + the text's final tokens, as the
    longest does: checked against the model's own logits on windows built here."""
    from lengen.hf.evaluate import run
    from lengen.hf.settings import EvalSettings

    model_path = tmp_path / "bos-model"
    shutil.copytree(model_dir / "model", model_path)
    tok = bos_char_tokenizer()
    tok.save_pretrained(model_path)
    settings = EvalSettings(str(model_path), ["rope"], [16, 48], corpus=str(model_dir / "corpus"), docs=1,
                            protocol="last-segment", segment=4)
    rows = {r["length"]: r["ppl"] for r in run(settings, progress=False)["rows"]}
    model = transformers.AutoModelForCausalLM.from_pretrained(model_path).eval()
    text = [tok.convert_tokens_to_ids(c) for c in TEXT[:48]]
    for L in (16, 48):
        window = torch.tensor([[tok.bos_token_id] + text[48 - L:]])
        with torch.no_grad():
            logp = model(window[:, :-1]).logits[0, -4:].double().log_softmax(-1)
        nll = -logp[torch.arange(4), window[0, -4:]].mean().item()
        assert rows[L] == pytest.approx(math.exp(nll), rel=1e-5)


def test_resuming_rows_scored_without_bos_is_refused(model_dir, tmp_path, capsys):
    """Rows of an output folder scored before lengen added the BOS (records without
    sequence_prefix) are not mixed with rows that begin with it: exit 2, nothing written."""
    import json

    model = tmp_path / "bos-model"
    shutil.copytree(model_dir / "model", model)
    bos_char_tokenizer().save_pretrained(model)
    out = tmp_path / "out"
    args = ["hf", "eval", str(model), "--corpus", str(model_dir / "corpus"), "--docs", "1",
            "--protocol", "last-segment", "--segment", "8", "--no-progress", "--out", str(out)]
    assert main([*args, "--lengths", "32"]) == 0
    record = json.loads((out / "results.json").read_text())
    assert record["meta"]["sequence_prefix"] == [bos_char_tokenizer().bos_token_id]
    del record["meta"]["sequence_prefix"]          # as written before 2026-11-28
    (out / "results.json").write_text(json.dumps(record))
    before = (out / "results.json").read_text()
    assert main([*args, "--lengths", "32", "16"]) == 2
    assert "scored on sequences beginning with no BOS" in capsys.readouterr().err
    assert (out / "results.json").read_text() == before


@pytest.mark.parametrize("cls,version,problem", [
    ("GemmaTokenizer", "5.17.0", "other merges"), ("GemmaTokenizer", "5.0.0", "other merges"),
    ("GemmaTokenizer", "5.18.0", "no BOS"), ("GemmaTokenizer", "5.22.2", "no BOS"),
    ("GemmaTokenizer", "5.23.0", None), ("GemmaTokenizer", "5.24.0", None), ("GemmaTokenizer", "6.0.0.dev0", None),
    ("GPT2Tokenizer", "5.17.0", None)])
def test_gguf_gemma_tokenizer_needs_transformers_5_23(cls, version, problem):
    """Measured on Gemma 3 270M's GGUF (docs/huggingface.md): the releases that read it wrongly."""
    from lengen.hf.loading import gguf_tokenizer_problem

    got = gguf_tokenizer_problem(cls, version)
    assert (got is None) if problem is None else (problem in got and version in got)


def test_short_documents_are_joined_by_eos(tmp_path):
    from lengen.data import TextEncoder, load_documents, long_sequences

    for name, text in [("a.txt", "abc"), ("b.txt", "defg"), ("c.txt", "x" * 30)]:
        (tmp_path / name).write_text(text)
    enc = TextEncoder(lambda t: [ord(c) for c in t], "ord-v1", EOS=0)
    docs = load_documents(str(tmp_path / "*.txt"), enc)
    assert docs.names == ["a.txt", "b.txt", "c.txt"] and docs.docs[2].tolist() == [ord("x")] * 30
    assert load_documents(str(tmp_path / "*.txt"), enc).from_cache
    seqs = long_sequences(docs.docs, 8, 2, docs.eos)
    assert [s.tolist() for s in seqs] == [[ord("x")] * 8, [97, 98, 99, 0, 100, 101, 102, 103]]


# -- passkey through the CLI with a stand-in for the model's greedy decoder ----------------------

CHARS = [chr(i) for i in range(32, 127)] + ["\n"]   # the tiny model's ids: 2 + index here


def text_of(ids):
    return "".join(CHARS[i - 2] for i in ids if i >= 2)


def ids_of(text):
    return [CHARS.index(c) + 2 for c in text]


NEEDLE = re.compile(r"The pass key is (\d+)\. Remember it\. \1 is the pass key\.")


def oracle(ids, n):
    """Reads the key out of the prompt (its own id table and pattern) and answers it."""
    (key,) = NEEDLE.findall(text_of(ids))
    return ids_of(f" {key}. The grass")[:n]


def constant(ids, n):
    return ids_of(" 0. The grass")[:n]   # keys are 1..50000: never right


@pytest.mark.parametrize("answer,accuracy", [(oracle, 1.0), (constant, 0.0)])
def test_passkey_eval_scores_an_oracle_one_and_a_constant_zero(model_dir, tmp_path, monkeypatch, answer, accuracy):
    import lengen.hf.evaluate as evaluate_mod

    prompts = []

    def greedy_fn(model, pad_token_id):   # what hf eval builds from the model, per prompt
        def generate(ids, n):
            prompts.append(list(ids))
            return answer(ids, n)
        return generate

    monkeypatch.setattr(evaluate_mod, "greedy_fn", greedy_fn)
    out = tmp_path / "pk"
    assert main(["hf", "eval", str(model_dir / "model"), "--protocol", "passkey", "--trials", "3",
                 "--methods", "rope", "yarn:factor=2", "--lengths", "320", "400", "--out", str(out),
                 "--no-progress"]) == 0
    assert len(prompts) == 2 * 2 * 3   # methods x lengths x trials
    rows = read_csv(out / "results.csv")
    assert [(r["method"], int(r["length"]), float(r["accuracy"])) for r in rows] == [
        (m, n, accuracy) for m in ("rope", "yarn:factor=2") for n in (320, 400)]
    result = json.loads((out / "results.json").read_text())
    assert [r["accuracy"] for r in result["rows"]] == [accuracy] * 4
    keys = [int(NEEDLE.search(text_of(p)).group(1)) for p in prompts]
    answers = [a for r in result["rows"] for a in r["answers"]]   # rows by method, prompts by length
    assert sorted(a["key"] for a in answers) == sorted(keys)
    assert all(a["answer"] == (a["key"] if answer is oracle else 0) for a in answers)


# -- options a protocol does not use: the same rule as `lengen lm eval` ----------------------------

@pytest.mark.parametrize("args,message", [
    (["--segment", "8"], "--segment applies to --protocol last-segment only, not ppl"),
    (["--protocol", "passkey", "--segment", "8"], "--segment applies to --protocol last-segment only, not passkey"),
    (["--protocol", "passkey", "--corpus", "x"],
     "--corpus applies to --protocol ppl and last-segment only, not passkey"),
    (["--protocol", "passkey", "--docs", "2"], "--docs applies to --protocol ppl and last-segment only, not passkey"),
    (["--trials", "3"], "--trials applies to --protocol passkey and ruler only, not ppl"),
    (["--protocol", "last-segment", "--seed", "1"], "--seed applies to --protocol passkey and ruler only, not last-segment"),
    (["--protocol", "last-segment", "--segment", "0"], "--segment must be >= 1, got 0"),
    (["--docs", "0"], "--docs must be >= 1, got 0"),
    (["--protocol", "passkey", "--trials", "-2"], "--trials must be >= 1, got -2"),
    (["--protocol", "passkey", "--seed", "-1"], "--seed must be >= 0, got -1"),
])
def test_eval_refuses_options_the_protocol_ignores_before_loading_the_model(model_dir, tmp_path, capsys,
                                                                            monkeypatch, args, message):
    import lengen.hf.evaluate as evaluate_mod

    monkeypatch.setattr(evaluate_mod, "load", no_model)
    assert main(["hf", "eval", str(model_dir / "model"), "--lengths", "64", *args, "--out", str(tmp_path),
                 "--no-progress"]) == 2
    assert capsys.readouterr().err == f"lengen: error: {message}\n"
    assert not list(tmp_path.iterdir())


FLAGS = {"--segment": "8", "--docs": "2", "--trials": "3", "--seed": "1"}   # in both commands
USES = {"--segment": {"last-segment"}, "--docs": {"ppl", "last-segment"}, "--trials": {"passkey", "ruler"},
        "--seed": {"passkey", "ruler"}}


@pytest.mark.parametrize("protocol", ["ppl", "last-segment", "passkey", "ruler"])
@pytest.mark.parametrize("flag", FLAGS)
def test_lm_eval_and_hf_eval_apply_the_same_rule(model_dir, tmp_path, capsys, monkeypatch, protocol, flag):
    """Every option both commands have, with every protocol: refused by both with the same message,
    or taken by both as far as loading the model."""
    import lengen.hf.evaluate as hf_evaluate
    import lengen.lm.evaluate as lm_evaluate

    monkeypatch.setattr(hf_evaluate, "load", no_model)
    monkeypatch.setattr(lm_evaluate, "load_run", no_model)
    option = [flag, FLAGS[flag], "--protocol", protocol, "--lengths", "800", "--no-progress"]
    commands = {"lm": ["lm", "eval", str(tmp_path / "run"), *option],
                "hf": ["hf", "eval", str(model_dir / "model"), *option, "--out", str(tmp_path / "out")]}
    errors = {}
    for name, argv in commands.items():
        if protocol in USES[flag]:
            with pytest.raises(ModelLoaded):
                main(argv)
        else:
            assert main(argv) == 2
            errors[name] = capsys.readouterr().err
    if protocol not in USES[flag]:
        assert errors["lm"] == errors["hf"] and errors["lm"].startswith(f"lengen: error: {flag} applies to")


@pytest.mark.parametrize("command", ["lm", "hf"])
def test_help_says_which_protocols_use_each_option(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    only = {"--segment": "last-segment only", "--docs": "ppl and last-segment only",
            "--trials": "passkey and ruler only", "--seed": "passkey and ruler only",
            **({"--batch-size": "ppl and last-segment only"} if command == "lm" else
               {"--corpus": "ppl and last-segment only"})}
    for flag, says in only.items():
        assert re.search(re.escape(flag) + r" [A-Z_]+ " + re.escape(says), text), flag


def test_attn_banded_loads_lengen_banded_and_scores_as_sdpa(model_dir, tmp_path, monkeypatch):
    """--attn banded loads with sdpa and switches to lengen.hf.banded (a Llama has no sliding
    layers, so every row equals sdpa's; the band itself: tests/test_hf_banded.py)."""
    from lengen.hf import evaluate

    loaded = []
    real_load = evaluate.load

    def recording_load(settings, tokenizer=None):
        model, tok = real_load(settings, tokenizer)
        loaded.append(model.config._attn_implementation)
        return model, tok

    monkeypatch.setattr(evaluate, "load", recording_load)
    rows = {}
    for attn in ("sdpa", "banded"):
        out = tmp_path / attn
        assert main(["hf", "eval", str(model_dir / "model"), "--corpus", str(model_dir / "corpus"),
                     "--methods", "rope", "rerope:window=16", "--lengths", "96", "--docs", "1",
                     "--attn", attn, "--out", str(out), "--no-progress"]) == 0
        rows[attn] = [float(r["ppl"]) for r in read_csv(out / "results.csv")]
        assert json.loads((out / "results.json").read_text())["meta"]["attn"] == attn
    assert loaded == ["sdpa", "lengen_banded"]
    assert rows["banded"] == pytest.approx(rows["sdpa"], rel=1e-6)


def test_calibrated_methods_read_the_runs_corpus(model_dir, tmp_path, monkeypatch):
    """dpe and dope calibrate on --corpus (the text the run scores), not on the running Python's
    standard library: a GPU machine's Python differs from the one the CPU records read."""
    import lengen.hf.calibration as calibration

    read = []
    load_documents = calibration.load_documents

    def documents(source, *args, **kwargs):
        read.append(source)
        return load_documents(source, *args, **kwargs)

    monkeypatch.setattr(calibration, "load_documents", documents)
    corpus = str(model_dir / "corpus")
    assert main(["hf", "eval", str(model_dir / "model"), "--corpus", corpus, "--methods",
                 "dpe:scales=2-2-4-4,window=16,topk=5", "dope:factor=2,count=2", "--lengths", "96",
                 "--docs", "1", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert read == [corpus, corpus]   # one calibration each, both on the run's corpus
