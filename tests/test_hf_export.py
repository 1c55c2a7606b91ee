"""`lengen hf export`: an extended model leaves lengen as a folder that plain transformers loads.

Checked here independently of the export's own check: a fresh interpreter in which `import lengen`
fails loads each exported folder with AutoModelForCausalLM, and its logits past the trained length
equal `lengen.hf.extend`'s on the source model (tested elsewhere against transformers' own rope
functions); its config.json holds the keys written out by hand below, and transformers warns about
none of them. Refusals are one line, exit 2, nothing written."""

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from guards import refused  # noqa: E402
from hf_families import tiny_family  # noqa: E402
from tiny_llama import save_tiny_llama  # noqa: E402

from lengen.cli import main  # noqa: E402
from lengen.extrapolation import METHODS  # noqa: E402
from lengen.hf import exporting as ex  # noqa: E402
from lengen.hf import extend, restore  # noqa: E402

L0 = 64   # the tiny Llama's max_position_embeddings
# each method, and the rope_parameters transformers must find in the exported config.json
# (head dim 16, base 10000, L0 64; the yarn attention factor is 0.1 ln 4 + 1)
EXPECTED = {
    "pi:factor=4": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    "ntk:factor=4": {"rope_type": "default", "rope_theta": 10000.0 * 4 ** (16 / 14)},
    "dynamic:factor=4": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0},
    "yarn:factor=4": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                      "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True,
                      "attention_factor": 0.1 * 1.3862943611198906 + 1, "rope_theta": 10000.0},
    "llama3:factor=4": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 64, "rope_theta": 10000.0},
    "longrope:short_factor=1/1/1/1/1/1/1/1,long_factor=1/1/1.5/2/3/4/6/8,factor=4": {
        "rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1, 1, 1.5, 2, 3, 4, 6, 8],
        "factor": 4.0, "original_max_position_embeddings": 64,
        "attention_factor": (1 + 1.3862943611198906 / 4.1588830833596715) ** 0.5, "rope_theta": 10000.0},
}
MAX_POSITIONS = {"dynamic:factor=4": 64}   # dynamic NTK reads L0 from max_position_embeddings

#: a fresh interpreter: lengen cannot be imported; the folder loaded by plain transformers
LOAD = textwrap.dedent("""
    import json, logging, sys
    sys.modules["lengen"] = None
    import torch, transformers
    caught = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: caught.append(record.getMessage())
    logging.getLogger("transformers").addHandler(handler)
    try:
        import lengen
        lengen_importable = True
    except ImportError:
        lengen_importable = False
    model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], local_files_only=True).eval()
    ids = torch.tensor([json.loads(sys.argv[2])])
    with torch.no_grad():
        torch.save(model(ids).logits, sys.argv[3])
    # transformers 5.0 warns that rope_theta is not a key of rope_type dynamic: a bug of that
    # release (it moved rope_theta there itself and warns about its own configs too)
    caught = [m for m in caught if not m.endswith("'dynamic': {'rope_theta'}")]
    print(json.dumps({"lengen_importable": lengen_importable, "warnings": caught}))
""")


def load_plain(folder: Path, ids: torch.Tensor, tmp_path: Path):
    out = tmp_path / "plain-logits.pt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", LOAD, str(folder), json.dumps(ids[0].tolist()), str(out)],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return torch.load(out), json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny")) / "model"


def lengen_logits(model_dir: Path, spec: str, ids: torch.Tensor) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    extend(model, spec)
    with torch.no_grad():
        logits = model(ids).logits
    restore(model)
    return logits


@pytest.mark.parametrize("spec", list(EXPECTED))
def test_plain_transformers_without_lengen_gives_lengen_s_extended_logits(tiny, spec, tmp_path, capsys):
    out = tmp_path / "export"
    assert main(["hf", "export", str(tiny), "--method", spec, "--out", str(out)]) == 0
    assert "checked: plain transformers" in capsys.readouterr().out
    ids = torch.randint(0, 100, (1, 2 * L0 + 5), generator=torch.Generator().manual_seed(1))   # past L0
    plain, seen = load_plain(out, ids, tmp_path)
    assert seen == {"lengen_importable": False, "warnings": []}
    torch.testing.assert_close(plain, lengen_logits(tiny, spec, ids), rtol=1e-5, atol=1e-5)
    config = json.loads((out / "config.json").read_text())
    written, expected = dict(config["rope_parameters"]), dict(EXPECTED[spec])
    for key in ("short_factor", "long_factor"):   # lists: approx does not nest
        assert written.pop(key, None) == pytest.approx(expected.pop(key, None))
    assert written == pytest.approx(expected)
    assert config["max_position_embeddings"] == MAX_POSITIONS.get(spec, 4 * L0)
    # the weights are the source's, unchanged; the tokenizer came along
    assert (out / "model.safetensors").read_bytes() == (tiny / "model.safetensors").read_bytes()
    assert (out / "tokenizer.json").exists()
    record = json.loads((out / ex.RECORD).read_text())
    assert record["spec"].split(":")[0] == spec.split(":")[0] and record["lengen"]
    assert record["source"]["fingerprint"].startswith("sha256:")
    assert record["verified"]["tokens"] == L0 + L0 // 4 and record["verified"]["max_abs_diff"] < 1e-4


LONGROPE = "longrope:short_factor=1/1/1/1/1/1/1/1,long_factor=1/1/1.5/2/3/4/6/8,factor=2"
#: every family lengen.hf extends whose export transformers runs as lengen does, and a method
#: (Phi-3's config takes longrope only); the hybrids' L0 is 32 (hf_families.TRAIN)
FAMILY_CASES = {"mistral": "yarn:factor=2", "qwen2": "pi:factor=2", "qwen3": "llama3:factor=2",
                "phi3": LONGROPE, "smollm3": "yarn:factor=2", "granite": "yarn:factor=2",
                "olmo2": "dynamic:factor=2", "qwen3_moe": "ntk:factor=2", "gemma3": "pi:factor=2"}
# Not here, as the release decides: OLMo 3 (transformers 5.24 gives its sliding layers their own
# rotary table, and it exports; 5.0 shares one, and it is refused), and a per-layer-type yarn or
# llama3 entry (5.0 cannot load one: the export's own check refuses it on that release)


def family_model(name: str):
    """A tiny random model of a family: the hybrids from hf_families, the Llama-layout types from
    transformers' own config class with the same sizes."""
    if name in ("mistral", "qwen2", "qwen3", "phi3"):
        from hf_families import COMMON

        torch.manual_seed(0)
        config = transformers.AutoConfig.for_model(name, **COMMON)
        config.sliding_window = None
        return transformers.AutoModelForCausalLM.from_config(config).eval()
    return tiny_family(name)


LOAD_MANY = textwrap.dedent("""
    import json, sys
    sys.modules["lengen"] = None
    import torch, transformers
    folders, ids, out = json.loads(sys.argv[1]), torch.tensor([json.loads(sys.argv[2])]), sys.argv[3]
    logits = {}
    with torch.no_grad():
        for name, folder in folders.items():
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
            logits[name] = model(ids).logits
    torch.save(logits, out)
""")


@pytest.fixture(scope="module")
def family_exports(tmp_path_factory):
    """Each family's export and lengen.hf.extend's logits on the same ids (2.5x L0), and what a
    fresh interpreter without lengen computes from each exported folder (one process for all)."""
    root = tmp_path_factory.mktemp("families")
    ids = torch.randint(0, 100, (1, 80), generator=torch.Generator().manual_seed(2))
    folders, expected = {}, {}
    for name, spec in FAMILY_CASES.items():
        model = family_model(name)
        extend(model, spec)
        with torch.no_grad():
            expected[name] = model(ids).logits
        restore(model)
        folders[name] = str(root / name)
        ex.export(model, spec, folders[name])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-I", "-c", LOAD_MANY, json.dumps(folders), json.dumps(ids[0].tolist()),
                           str(root / "plain.pt")], capture_output=True, text=True, cwd=root, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return expected, torch.load(root / "plain.pt")


@pytest.mark.parametrize("family", list(FAMILY_CASES))
def test_every_exportable_family_loads_in_plain_transformers_as_lengen_extends_it(family, family_exports):
    expected, plain = family_exports
    # the hybrids were built with eager attention, plain transformers loads sdpa: ~1e-6 apart
    torch.testing.assert_close(plain[family], expected[family], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family, spec, says", [
    ("gemma2", "yarn:factor=2", "sharing the model's rotary table"),   # sliding layers: one table
    ("llama4", "yarn:factor=2", "interleaved"),
    # Phi-3's config class refuses it (5.24); on 5.0, which has no such check, the folder fails
    # to load in the export's own check
    ("phi3", "yarn:factor=2", "config does not take these rope_parameters|does not load in plain transformers"),
])
def test_a_family_transformers_would_run_otherwise_is_refused(family, spec, says, tmp_path):
    with pytest.raises(Exception, match=says):
        ex.export(family_model(family), spec, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_export_whose_logits_differ_is_not_kept(tiny, tmp_path, monkeypatch):
    """The export's own check: a config written wrong (factor 2 for 4) is caught and removed."""
    real = ex.rope_parameters
    monkeypatch.setattr(ex, "rope_parameters", lambda method, old: {**real(method, old), "factor": 2.0})
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny, local_files_only=True)
    with pytest.raises(Exception, match="differ"):
        ex.export(model, "pi:factor=4", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spec, says", [
    ("rerope:window=16", "no engine implements rerope"),
    ("yarn:factor=4+logn", "no engine implements logn"),
    ("self_extend", "self_extend runs natively in llama.cpp"),
])
def test_a_method_no_export_serves_is_refused_naming_the_engines(tiny, spec, says, tmp_path, capsys):
    err = refused(["hf", "export", str(tiny), "--method", spec, "--out", str(tmp_path / "out")], capsys)
    assert says in err and "exportable: pi (transformers" in err
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_a_causal_lm_is_refused(tmp_path, capsys):
    transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64, architectures=["BertForMaskedLM"]).save_pretrained(tmp_path / "bert")
    err = refused(["hf", "export", str(tmp_path / "bert"), "--method", "yarn:factor=4",
                   "--out", str(tmp_path / "out")], capsys)
    assert "not a causal language model" in err and not (tmp_path / "out").exists()


def test_an_out_that_is_something_else_is_refused_and_left_alone(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    err = refused(["hf", "export", str(tiny), "--method", "pi:factor=4", "--out", str(out)], capsys)
    assert "is not a lengen export" in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_an_earlier_export_is_kept_when_it_is_the_same_and_refused_when_not(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["hf", "export", str(tiny), "--method", "pi:factor=4", "--out", str(out)]) == 0
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert main(["hf", "export", str(tiny), "--method", "pi:factor=4", "--out", str(out)]) == 0
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp   # found done, not rewritten
    capsys.readouterr()
    err = refused(["hf", "export", str(tiny), "--method", "yarn:factor=4", "--out", str(out)], capsys)
    assert "holds another export ('pi:factor=4'" in err


def test_the_list_is_the_table_and_the_table_has_every_method(capsys):
    assert set(ex.SUPPORT) == set(METHODS.names()) - {"rope"}   # a new method needs its row
    assert main(["hf", "export", "--list"]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:2 + len(ex.SUPPORT)]}
    for method, engines in ex.SUPPORT.items():
        assert rows[method] == ["yes" if e in engines else "-" for e in ex.ENGINES], method
        for engine, how in engines.items():
            assert f"{method} in {engine}: {how}" in text
    assert rows["self_extend"] == ["-", "-", "-", "yes"] and rows["rerope"] == ["-"] * 4


# vLLM's get_rope (and SGLang's, which follows it) by rope_type: the keys it reads from a model's
# rope parameters, written out by hand from its source (vLLM 0.10/0.11, SGLang 0.5): an export
# for transformers is also what these engines need when every key they read is there
VLLM_READS = {"linear": {"factor"}, "default": set(), "dynamic": {"factor"},
              "yarn": {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow"},
              "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
              "longrope": {"short_factor", "long_factor", "original_max_position_embeddings"}}


@pytest.mark.parametrize("spec", list(EXPECTED))
def test_each_exported_rope_type_holds_every_key_vllm_reads_for_it(spec):
    params = EXPECTED[spec]   # what the export writes (checked against config.json above)
    assert VLLM_READS[params["rope_type"]] <= set(params) and "rope_theta" in params
    if params["rope_type"] == "yarn":   # vLLM multiplies its own 0.1 ln(factor) + 1 by attn_factor (1)
        assert params["attention_factor"] == pytest.approx(0.1 * math.log(params["factor"]) + 1)


#: Qwen2.5-7B-Instruct-1M's block as its config.json ships it (the model vLLM's DCA was written for)
QWEN_1M_BLOCK = {"chunk_size": 262144, "local_size": 8192, "original_max_position_embeddings": 262144}


def qwen2_model():
    return family_model("qwen2")   # L0 = 32


def test_dca_leaves_as_the_config_block_vllm_and_sglang_read(tmp_path):
    model = qwen2_model()
    ids = torch.randint(0, 100, (1, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        plain_rope = model(ids).logits   # DCA at chunk 24, local 8 (s = 16) is plain RoPE for 16 tokens
    out = tmp_path / "dca"
    record = ex.export(model, "dca:chunk_size=24,local_size=8,original_length=32", out, length=128)
    config = json.loads((out / "config.json").read_text())
    assert config["dual_chunk_attention_config"] == {"chunk_size": 24, "local_size": 8,
                                                     "original_max_position_embeddings": 32}
    assert config["max_position_embeddings"] == 128
    assert config["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}   # unchanged
    assert "dual_chunk_attention_config" not in model.config.__dict__   # the source config as it was
    loaded, seen = load_plain(out, ids, tmp_path)
    assert seen == {"lengen_importable": False, "warnings": []}
    torch.testing.assert_close(loaded, plain_rope, rtol=1e-5, atol=1e-5)
    assert record["engine"] == "vLLM, SGLang" and set(record["serve"]) == {"vLLM", "SGLang"}
    assert "not >= 0.11.0" in record["serve"]["vLLM"] and record["verified"]["tokens"] == 16
    assert ex.dca_schema_problem(config["dual_chunk_attention_config"]) is None


@pytest.mark.parametrize("block, says", [
    (QWEN_1M_BLOCK, None),
    ({"chunk_size": 262144, "local_size": 8192}, "must hold exactly"),
    ({**QWEN_1M_BLOCK, "local_size": 8192.0}, "must be a non-negative int"),
    ({**QWEN_1M_BLOCK, "local_size": 262144}, "local_size must be below chunk_size"),
    ({**QWEN_1M_BLOCK, "local_size": 8200}, "not a multiple of 16"),
    ({**QWEN_1M_BLOCK, "local_size": 262144 - 16}, None),   # s = 16: one whole KV block
])
def test_the_dca_block_is_checked_against_vllm_s_schema(block, says):
    problem = ex.dca_schema_problem(block)
    assert problem is None if says is None else says in problem


@pytest.mark.parametrize("argv, says", [
    (["--method", "dca:chunk_size=24,local_size=8"], "give --length"),
    (["--method", "dca:chunk_size=48,local_size=16+yarn:factor=2", "--length", "256"], "vLLM ignores rope scaling"),
    (["--method", "dca:chunk_size=48,local_size=16", "--length", "256"], "in qwen2 models, not llama"),
])
def test_a_dca_export_vllm_would_not_run_is_refused(tiny, argv, says, tmp_path, capsys):
    err = refused(["hf", "export", str(tiny), *argv, "--out", str(tmp_path / "out")], capsys)
    assert says in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("spec, options, says", [
    ("dca", {}, "not a multiple of 16"),   # the defaults for L0 = 32: chunk 24, local 4
    ("dca:chunk_size=40,local_size=8", {}, "must be <= 32"),
    ("dca:chunk_size=24,local_size=8", {"check_length": 17}, "at most at chunk_size - local_size = 16"),
])
def test_a_dca_export_that_cannot_be_served_or_checked_is_refused(spec, options, says, tmp_path):
    with pytest.raises(Exception, match=says):
        ex.export(qwen2_model(), spec, tmp_path / "out", length=128, **options)
    assert not (tmp_path / "out").exists()


def test_the_same_dca_export_again_is_found_done(tmp_path):
    out = tmp_path / "dca"
    first = ex.export(qwen2_model(), "dca:chunk_size=24,local_size=8", out, length=128,
                      source={"path": None, "fingerprint": "sha256:same"})
    again = ex.export(qwen2_model(), "dca:chunk_size=24,local_size=8", out, length=128,
                      source={"path": None, "fingerprint": "sha256:same"})
    assert again == first and first["engine"] == "vLLM, SGLang"
