"""`lengen hf export --format gguf`: an extended model leaves lengen as one GGUF file that llama.cpp
runs with the method built in.

Checked here independently of the export's own check: llama-cpp-python (real llama.cpp, loaded
in this process) runs each exported file on a sequence past the trained length, and its logits
equal `lengen.hf.extend`'s on the source model (tested elsewhere against transformers' own rope
functions); the file's keys, read back with the gguf package, are the ones written out by hand
below. Refusals are one line, exit 2, nothing written. Skipped without the gguf package; the
llama.cpp comparisons are skipped without llama-cpp-python (bash scripts/llama_cpp_wheel.sh)."""

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install gguf)")

from guards import refused  # noqa: E402
from tiny_llama import TEXT, save_tiny_llama  # noqa: E402

from lengen.cli import main  # noqa: E402
from lengen.hf import exporting as ex  # noqa: E402
from lengen.hf import export, extend, restore  # noqa: E402
from lengen.hf import gguf_export as gx  # noqa: E402

LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None
needs_llama_cpp = pytest.mark.skipif(not LLAMA_CPP, reason="llama-cpp-python is not installed "
                                     "(bash scripts/llama_cpp_wheel.sh)")
L0 = 64        # the tiny Llama's max_position_embeddings
VOCAB = 320    # the model's rows; the BPE tokenizer has 300 tokens, the rest are llama.cpp padding
#: llama.cpp against lengen.hf.extend, max |difference| over max(1, max |logit|) at 133 tokens (L0
#: 64): f32 runs the same arithmetic in another order, measured 2.3e-6 to 6.2e-6 (llama.cpp 0.3.36's,
#: 2 threads); f16 rounds weights and activations to 11 bits, measured 7.3e-3. YaRN's attention
#: factor written wrong (llama.cpp's own 0.1 ln s + 1 not divided out) is 5.0 apart
RTOL = {"f32": 1e-4, "f16": 2e-2}
S4 = 0.1 * math.log(4) + 1   # YaRN's default attention factor at s = 4
#: each method and the GGUF keys llama.cpp must find (head dim 16, base 10000, L0 64)
EXPECTED = {
    "rope": {"llama.rope.freq_base": 10000.0, "llama.rope.scaling.type": "none", "llama.context_length": 64},
    "pi:factor=4": {"llama.rope.freq_base": 10000.0, "llama.rope.scaling.type": "linear",
                    "llama.rope.scaling.factor": 4.0, "llama.context_length": 256},
    "ntk:factor=4": {"llama.rope.freq_base": 10000.0 * 4 ** (16 / 14), "llama.rope.scaling.type": "none",
                     "llama.context_length": 256},
    "yarn:factor=4": {"llama.rope.freq_base": 10000.0, "llama.rope.scaling.type": "yarn",
                      "llama.rope.scaling.factor": 4.0, "llama.rope.scaling.original_context_length": 64,
                      "llama.context_length": 256},
    # an attention factor of its own: llama.cpp multiplies its 0.1 ln s + 1 by rope.scaling.attn_factor
    "yarn:factor=4,attention_factor=1.5": {
        "llama.rope.freq_base": 10000.0, "llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
        "llama.rope.scaling.original_context_length": 64, "llama.rope.scaling.attn_factor": 1.5 / S4,
        "llama.context_length": 256},
    "llama3:factor=4": {"llama.rope.freq_base": 10000.0, "llama.rope.scaling.type": "none",
                        "llama.context_length": 256},
}


def bpe_tokenizer():
    """A byte-level BPE tokenizer (llama.cpp's gpt2 kind) trained on the tiny corpus: 300 tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 2-layer random Llama (2 heads, 1 KV head, 64 positions) with a byte-level BPE tokenizer."""
    root = tmp_path_factory.mktemp("tiny-bpe")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=VOCAB, max_position_embeddings=L0, eos_token_id=1,
        initializer_range=0.3)   # logits of a few units, peaked attention: a wrong rope shows
    transformers.LlamaForCausalLM(config).save_pretrained(root / "model")
    bpe_tokenizer().save_pretrained(root / "model")
    return root / "model"


def lengen_logits(model_dir: Path, spec: str, ids: torch.Tensor) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    extend(model, spec)
    with torch.no_grad():
        logits = model(ids).logits[0]
    restore(model)
    return logits


def llama_cpp_logits(path: Path, ids: torch.Tensor) -> torch.Tensor:
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=ids.shape[1], logits_all=True, n_threads=2,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
    llm.eval(ids[0].tolist())
    logits = torch.from_numpy(np.array(llm.scores[:ids.shape[1]], dtype=np.float32))
    llm.close()
    return logits


def gguf_keys(path: Path) -> dict:
    reader = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in reader.fields.items()}, {t.name: t for t in reader.tensors}


def export_cli(tiny, spec, out, *extra) -> dict:
    assert main(["hf", "export", str(tiny), "--method", spec, "--format", "gguf", "--out", str(out), *extra]) == 0
    return json.loads((out / ex.RECORD).read_text())


def relative_diff(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).abs().max()) / max(1.0, float(expected.abs().max()))


@needs_llama_cpp
@pytest.mark.parametrize("spec", list(EXPECTED))
def test_llama_cpp_runs_the_gguf_as_lengen_extends_the_model(tiny, spec, tmp_path, capsys):
    out = tmp_path / "export"
    record = export_cli(tiny, spec, out)
    assert "checked: llama.cpp" in capsys.readouterr().out
    path = out / record["file"]
    ids = torch.randint(0, VOCAB, (1, 2 * L0 + 5), generator=torch.Generator().manual_seed(1))   # past L0
    diff = relative_diff(llama_cpp_logits(path, ids), lengen_logits(tiny, spec, ids))
    print(f"{spec}: llama.cpp vs lengen.hf.extend, relative max |difference| {diff:.3g}")
    assert diff < RTOL["f32"], diff
    keys, tensors = gguf_keys(path)
    for key, value in EXPECTED[spec].items():
        assert keys[key] == (pytest.approx(value, rel=1e-6) if isinstance(value, float) else value), key
    assert "llama.rope.scaling.attn_factor" in keys or "attention_factor" not in spec
    assert keys["general.architecture"] == "llama" and keys["llama.rope.dimension_count"] == 16
    assert ("rope_freqs.weight" in tensors) == spec.startswith("llama3")
    assert record["engine"] == "llama.cpp" and record["gguf_type"] == "f32"
    assert record["source"]["fingerprint"].startswith("sha256:")
    check = record["verified"]
    assert check["tokens"] == L0 + L0 // 4 and check["max_abs_diff"] <= check["tolerance"]
    assert check["relative_tolerance"] == gx.TOLERANCE["f32"]


@needs_llama_cpp
def test_llama3_s_rope_freqs_are_the_method_s_frequency_divisors(tiny, tmp_path):
    """Llama 3's wavelength bands: fast pairs kept (1), slow ones divided by the factor (4)."""
    record = export_cli(tiny, "llama3:factor=4", tmp_path / "out")
    freqs = record["rope_freqs"]
    assert len(freqs) == 8 and freqs[0] == pytest.approx(1.0) and freqs[-1] == pytest.approx(4.0)
    _, tensors = gguf_keys(tmp_path / "out" / record["file"])
    assert tensors["rope_freqs.weight"].data.tolist() == pytest.approx(freqs)


@needs_llama_cpp
def test_an_f16_gguf_is_half_the_size_and_close(tiny, tmp_path):
    f32 = export_cli(tiny, "yarn:factor=4", tmp_path / "f32")
    f16 = export_cli(tiny, "yarn:factor=4", tmp_path / "f16", "--gguf-type", "f16")
    size = {k: (tmp_path / k / r["file"]).stat().st_size for k, r in (("f32", f32), ("f16", f16))}
    assert size["f16"] < 0.6 * size["f32"]
    ids = torch.randint(0, VOCAB, (1, 2 * L0 + 5), generator=torch.Generator().manual_seed(1))
    diff = relative_diff(llama_cpp_logits(tmp_path / "f16" / f16["file"], ids), lengen_logits(tiny, "yarn:factor=4", ids))
    print(f"f16: relative max |difference| {diff:.3g}")
    assert diff < RTOL["f16"], diff
    assert f16["verified"]["relative_tolerance"] == gx.TOLERANCE["f16"]
    keys, tensors = gguf_keys(tmp_path / "f16" / f16["file"])
    assert tensors["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32   # norms stay f32


@needs_llama_cpp
def test_llama_cpp_tokenizes_text_as_the_source_tokenizer(tiny, tmp_path):
    import llama_cpp

    record = export_cli(tiny, "pi:factor=2", tmp_path / "out")
    keys, _ = gguf_keys(tmp_path / "out" / record["file"])
    assert keys["tokenizer.ggml.model"] == "gpt2" and len(keys["tokenizer.ggml.tokens"]) == VOCAB
    assert keys["tokenizer.ggml.pre"] == "gpt-2" and "pre-tokenizer 'gpt-2'" in record["tokenizer"]
    assert keys["tokenizer.ggml.tokens"][-1] == f"[PAD{VOCAB - 1}]"
    llm = llama_cpp.Llama(model_path=str(tmp_path / "out" / record["file"]), n_ctx=64, verbose=False,
                          vocab_only=True)
    hf = transformers.AutoTokenizer.from_pretrained(tiny)
    for text in ("def area(r):\n    return 3.14159 * r * r", "The grass is green."):
        assert llm.tokenize(text.encode(), add_bos=False, special=False) == hf(text)["input_ids"], text
    llm.close()


def test_an_export_whose_logits_differ_is_not_kept(tiny, tmp_path, monkeypatch):
    """The export's own check: YaRN's attention factor written wrong (llama.cpp's own 0.1 ln s + 1
    applied twice) is caught and nothing is left."""
    if not LLAMA_CPP:
        pytest.skip("llama-cpp-python is not installed (bash scripts/llama_cpp_wheel.sh)")
    real = gx._rope
    monkeypatch.setattr(gx, "_rope", lambda method, L0: gx.GgufRope(**{**vars(real(method, L0)), "attn_factor": S4}))
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny, local_files_only=True)
    with pytest.raises(Exception, match="differ"):
        export(model, "yarn:factor=4", tmp_path / "out", format="gguf")
    assert list(tmp_path.iterdir()) == []


def test_without_llama_cpp_the_file_is_written_and_the_record_says_unchecked(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gx, "llama_cpp_missing", lambda: "llama-cpp-python is not importable here")
    record = export_cli(tiny, "yarn:factor=4", tmp_path / "out")
    assert record["verified"] is None and record["unverified"] == "llama-cpp-python is not importable here"
    assert capsys.readouterr().out.splitlines()[-1] == "not checked: llama-cpp-python is not importable here"
    keys, _ = gguf_keys(tmp_path / "out" / record["file"])
    assert keys["llama.rope.scaling.type"] == "yarn"


def test_self_extend_is_the_unchanged_file_and_its_llama_completion_flags(tiny, tmp_path, capsys):
    record = export_cli(tiny, "self_extend:group=4,window=16", tmp_path / "out")
    printed = capsys.readouterr().out
    command = f"llama-completion -m {record['file']} -c 208 --grp-attn-n 4 --grp-attn-w 16"   # (64-16)*4+16
    assert record["command"] == command and record["verified"] is None
    assert "not compared" in record["unverified"]
    assert f"run it with: {command.replace(record['file'], str(tmp_path / 'out' / record['file']))}" in printed
    keys, tensors = gguf_keys(tmp_path / "out" / record["file"])
    assert keys["llama.rope.scaling.type"] == "none" and keys["llama.context_length"] == L0
    assert "rope_freqs.weight" not in tensors


@pytest.mark.parametrize("spec, says", [
    ("rerope:window=16", "no engine implements rerope"),
    ("dca", "dca runs natively in vLLM, SGLang, not in llama.cpp"),
    ("dynamic:factor=2", "dynamic runs natively in transformers, not in llama.cpp"),
    ("longrope:short_factor=1/1/1/1/1/1/1/1,long_factor=1/1/1/1/1/1/1/1,factor=2", "Phi-3's rope_factors"),
    ("yarn:factor=4+logn", "no engine implements logn"),
    ("pi:factor=2+yarn:factor=2", "a GGUF holds one rope scaling"),
    ("yarn:factor=4,beta_fast=16", "reads no GGUF key for them"),
    ("self_extend:group=3,window=16", "not a multiple of its group 3"),
])
def test_a_method_the_gguf_cannot_hold_is_refused(tiny, spec, says, tmp_path, capsys):
    err = refused(["hf", "export", str(tiny), "--method", spec, "--format", "gguf", "--out",
                   str(tmp_path / "out")], capsys)
    assert says in err, err
    if "self_extend" not in spec:
        assert "--format gguf writes: rope, pi, ntk, yarn, llama3, self_extend" in err or "reads no" in err \
            or "one rope scaling" in err
    assert not (tmp_path / "out").exists()


def test_another_family_is_refused_naming_the_supported_ones(tmp_path, capsys):
    torch.manual_seed(0)
    config = transformers.Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, vocab_size=VOCAB,
                                      max_position_embeddings=L0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(tmp_path / "qwen2")
    bpe_tokenizer().save_pretrained(tmp_path / "qwen2")
    capsys.readouterr()
    err = refused(["hf", "export", str(tmp_path / "qwen2"), "--method", "pi:factor=2", "--format", "gguf",
                   "--out", str(tmp_path / "out")], capsys)
    assert "model_type 'qwen2' is not written as GGUF" in err and "supported: llama, mistral" in err
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_llama_cpp_has_no_kind_for_is_refused(tmp_path, capsys):
    model = save_tiny_llama(tmp_path / "char") / "model"   # a character (WordLevel) tokenizer
    capsys.readouterr()
    err = refused(["hf", "export", str(model), "--method", "pi:factor=2", "--format", "gguf",
                   "--out", str(tmp_path / "out")], capsys)
    assert "WordLevel model" in err and "byte-level BPE" in err
    assert not (tmp_path / "out").exists()


def test_options_of_the_other_format_are_refused(tiny, tmp_path, capsys):
    err = refused(["hf", "export", str(tiny), "--method", "pi:factor=2", "--gguf-type", "f16",
                   "--out", str(tmp_path / "out")], capsys)
    assert "--gguf-type goes with --format gguf" in err
    err = refused(["hf", "export", str(tiny), "--method", "pi:factor=2", "--format", "gguf", "--dtype", "bfloat16",
                   "--out", str(tmp_path / "out")], capsys)
    assert "--dtype goes with --format transformers" in err
    assert not (tmp_path / "out").exists()


def test_an_out_that_is_something_else_is_refused_and_left_alone(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    err = refused(["hf", "export", str(tiny), "--method", "pi:factor=4", "--format", "gguf", "--out", str(out)],
                  capsys)
    assert "is not a lengen export" in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_an_earlier_export_is_kept_when_it_is_the_same_and_refused_when_not(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gx, "llama_cpp_missing", lambda: "skipped here")   # the check is tested above
    out = tmp_path / "out"
    record = export_cli(tiny, "pi:factor=4", out)
    stamp = (out / record["file"]).stat().st_mtime_ns
    capsys.readouterr()
    assert main(["hf", "export", str(tiny), "--method", "pi:factor=4", "--format", "gguf", "--out", str(out)]) == 0
    assert "already holds this export" in capsys.readouterr().out
    assert (out / record["file"]).stat().st_mtime_ns == stamp   # found done, not rewritten
    for argv, says in [
        (["--method", "yarn:factor=4", "--format", "gguf"], "holds another export ('pi:factor=4'"),
        (["--method", "pi:factor=4", "--format", "gguf", "--gguf-type", "f16"], "as f32 GGUF"),
        (["--method", "pi:factor=4"], "for llama.cpp"),   # the transformers folder of the same spec
    ]:
        assert says in refused(["hf", "export", str(tiny), *argv, "--out", str(out)], capsys)
    # tampered: the record without its file
    (out / record["file"]).unlink()
    err = refused(["hf", "export", str(tiny), "--method", "pi:factor=4", "--format", "gguf", "--out", str(out)],
                  capsys)
    assert f"{record['file']} is missing" in err


def test_the_table_s_llama_cpp_column_covers_what_the_gguf_export_writes(capsys):
    for method in gx.METHODS[1:]:
        assert "llama.cpp" in ex.SUPPORT[method], method
    assert main(["hf", "export", "--list"]) == 0
    assert "with --format gguf, llama.cpp's pi, ntk, yarn, llama3" in capsys.readouterr().out
    assert "--format gguf writes it for llama.cpp" in ex.refusal("self_extend")


def test_a_gguf_source_s_tokenizer_is_carried_over(tiny, tmp_path, capsys):
    """A model read from a GGUF file (--gguf-file, as transformers dequantizes it) keeps that file's
    tokenizer keys, byte for byte; here the source is the tiny model's own plain GGUF export."""
    first = export_cli(tiny, "rope", tmp_path / "plain")
    record = export_cli(tmp_path / "plain", "yarn:factor=4", tmp_path / "yarn", "--gguf-file", first["file"])
    assert record["tokenizer"] == f"carried over from {first['file']}"
    assert record["file"] == "model-rope-f32-yarn-f32.gguf"
    source, _ = gguf_keys(tmp_path / "plain" / first["file"])
    written, _ = gguf_keys(tmp_path / "yarn" / record["file"])
    tokenizer_keys = sorted(k for k in source if k.startswith("tokenizer."))
    assert len(tokenizer_keys) >= 6
    assert {k: written[k] for k in tokenizer_keys} == {k: source[k] for k in tokenizer_keys}
    assert written["llama.rope.scaling.type"] == "yarn"
    if LLAMA_CPP:
        assert record["verified"]["max_abs_diff"] <= record["verified"]["tolerance"]


@needs_llama_cpp
def test_a_mistral_layout_model_is_written_as_llama_cpp_s_llama(tmp_path, capsys):
    """Mistral (no sliding window) is llama.cpp's llama architecture; a head_dim of its own (8,
    not hidden / heads = 16) goes into attention.key_length."""
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        head_dim=8, vocab_size=VOCAB, max_position_embeddings=L0, sliding_window=None, initializer_range=0.3)
    transformers.MistralForCausalLM(config).save_pretrained(tmp_path / "mistral")
    bpe_tokenizer().save_pretrained(tmp_path / "mistral")
    record = export_cli(tmp_path / "mistral", "yarn:factor=4", tmp_path / "out")
    keys, _ = gguf_keys(tmp_path / "out" / record["file"])
    assert keys["general.architecture"] == "llama" and keys["llama.attention.key_length"] == 8
    assert keys["llama.rope.dimension_count"] == 8
    ids = torch.randint(0, VOCAB, (1, 2 * L0 + 5), generator=torch.Generator().manual_seed(1))
    diff = relative_diff(llama_cpp_logits(tmp_path / "out" / record["file"], ids),
                         lengen_logits(tmp_path / "mistral", "yarn:factor=4", ids))
    assert diff < RTOL["f32"], diff


SMOLLM2 = Path(__file__).parent.parent / "docs" / "data" / "export" / "smollm2-yarn4-gguf" / ex.RECORD


def test_the_committed_smollm2_record_is_a_checked_yarn_export():
    """SmolLM2-135M-Instruct (its Q4_1 GGUF, trained to 8,192 tokens) at YaRN x4 as an f32 GGUF:
    llama.cpp gave lengen.hf.extend's logits at 10,240 tokens within the export's tolerance (the
    run is minutes on 2 cores, so its record is committed instead of run here)."""
    record = json.loads(SMOLLM2.read_text())
    assert record["spec"] == "yarn:factor=4" and record["engine"] == "llama.cpp" and record["gguf_type"] == "f32"
    assert record["train_length"] == 8192 and record["tokenizer"].startswith("carried over from SmolLM2")
    assert record["gguf_keys"]["llama.rope.scaling.type"] == "yarn"
    assert record["gguf_keys"]["llama.rope.scaling.original_context_length"] == 8192
    assert record["gguf_keys"]["llama.context_length"] == 32768
    check = record["verified"]
    assert check["tokens"] == 10240 and check["max_abs_diff"] <= check["tolerance"]
    assert check["tolerance"] == pytest.approx(check["relative_tolerance"] * max(1.0, check["max_abs_logit"]))
