"""lm-evaluation-harness on a lengen-extended model (lengen.hf.harness, `lengen hf lm-eval`).

The log-likelihoods lm-eval reports for a tiny random Llama equal the model's own, computed here
independently: a model loaded by plain transformers, extended with lengen.hf.extend, one forward
over the same token ids, log-softmax summed. The documents are shorter than max_length (one
rolling window: the EOS prefix, then every token scored) and longer than the trained 64 tokens,
so the extension methods change the numbers. Nothing is downloaded (HF_HUB_OFFLINE,
HF_DATASETS_OFFLINE); the tasks are YAML files over local JSON lines. Refusals: one line, exit 2,
before the model loads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="lm-eval's HFLM imports accelerate (the lmeval extra)")
pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'lengen[lmeval]')")

import transformers  # noqa: E402
from tiny_llama import save_tiny_llama  # noqa: E402

import lengen.cli.hf_lmeval as cli  # noqa: E402
from lengen.cli import main  # noqa: E402
from lengen.hf import extend, harness  # noqa: E402

MAX_LENGTH = 256   # lm-eval's context: past the tiny model's 64 trained positions
TOL = 2e-3         # nats: lm-eval's float32 log-softmax against this file's float64 one
DOCS = ["def area(r):\n    return 3.14159 * r * r\n\nclass Point:\n    x = 0\n    y = 1\n" * 2,
        "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. " * 2]
PAIRS = [{"question": "The grass is", "answer": "green. The sky is blue." * 3},
         {"question": "def area(r):", "answer": "\n    return 3.14159 * r * r" * 3}]
METHODS = ["rope", "self_extend:group=4,window=16", "yarn:factor=4"]

PPL_TASK = """task: tiny_docs
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
    aggregation: weighted_perplexity
    higher_is_better: false
  - metric: bits_per_byte
    aggregation: bits_per_byte
    higher_is_better: false
"""
LL_TASK = """task: tiny_pairs
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(model folder, task folder): the tiny Llama and two local tasks over JSON lines."""
    root = save_tiny_llama(tmp_path_factory.mktemp("lmeval"))
    # sharper attention than a random init's, so that positions (and the methods) move the
    # log-likelihoods by ~0.1 nats, far above the tolerance below
    model = transformers.AutoModelForCausalLM.from_pretrained(root / "model", local_files_only=True)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight *= 8
            layer.self_attn.k_proj.weight *= 8
    model.save_pretrained(root / "model")
    tasks = root / "tasks"
    tasks.mkdir()
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    (root / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    (tasks / "tiny_docs.yaml").write_text(PPL_TASK.format(data=root / "docs.jsonl"))
    (tasks / "tiny_pairs.yaml").write_text(LL_TASK.format(data=root / "pairs.jsonl"))
    return root / "model", tasks


def own_loglikelihood(model_dir: Path, method: str, context: list[int], continuation: list[int]) -> float:
    """sum log p(continuation | context) by a plain forward of a freshly loaded, extended model."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    if method != "rope":
        extend(model, method)
    ids = torch.tensor([context + continuation[:-1]])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    rows = logp[len(context) - 1:]
    return float(rows.gather(1, torch.tensor(continuation)[:, None]).sum())


def run_tasks(model_dir: Path, tasks_dir: Path, method: str, task: str) -> list[dict]:
    lm = harness.LengenLM(str(model_dir), method=method, max_length=MAX_LENGTH, device="cpu")
    assert lm.max_length == MAX_LENGTH
    manager = harness.task_manager([task], str(tasks_dir))
    return harness.evaluate(lm, [task], manager, log_samples=True)["samples"][task]


@pytest.mark.parametrize("method", METHODS)
def test_rolling_loglikelihoods_are_the_extended_model_s_own(tiny, method):
    model_dir, tasks = tiny
    tok = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    samples = sorted(run_tasks(model_dir, tasks, method, "tiny_docs"), key=lambda s: s["doc_id"])
    assert len(samples) == len(DOCS)
    for sample, doc in zip(samples, DOCS):
        ids = tok(doc, add_special_tokens=False)["input_ids"]
        assert 64 < len(ids) < MAX_LENGTH   # past the trained length, within one window
        reported = sample["resps"][0][0]
        reported = reported[0] if isinstance(reported, (list, tuple)) else reported
        # one window: the prefix token (EOS: the tokenizer has no BOS), then every token scored
        expected = own_loglikelihood(model_dir, method, [tok.eos_token_id], ids)
        assert reported == pytest.approx(expected, rel=0, abs=TOL), (method, doc[:20])


def test_a_method_changes_what_lm_eval_scores(tiny):
    """The patch reaches lm-eval's forward: beyond the trained length the numbers differ from rope's."""
    model_dir, tasks = tiny
    scores = {m: [s["resps"][0][0] for s in sorted(run_tasks(model_dir, tasks, m, "tiny_docs"),
                                                    key=lambda s: s["doc_id"])] for m in METHODS}
    for method in METHODS[1:]:
        assert all(abs(a - b) > 10 * TOL for a, b in zip(scores["rope"], scores[method])), (method, scores)


@pytest.mark.parametrize("method", ["rope", "self_extend:group=4,window=16"])
def test_continuation_loglikelihoods_are_the_extended_model_s_own(tiny, method):
    model_dir, tasks = tiny
    tok = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    for sample in run_tasks(model_dir, tasks, method, "tiny_pairs"):
        context, continuation = sample["arguments"][0]   # lm-eval's strings: the target after " "
        ctx = tok(context, add_special_tokens=False)["input_ids"]
        cont = tok(continuation, add_special_tokens=False)["input_ids"]
        assert len(ctx) + len(cont) > 64
        logprob, _greedy = sample["resps"][0][0]
        assert logprob == pytest.approx(own_loglikelihood(model_dir, method, ctx, cont), rel=0, abs=TOL)


def test_the_command_writes_lm_eval_s_results_and_a_table(tiny, tmp_path, capsys):
    import pandas as pd

    model_dir, tasks = tiny
    out = tmp_path / "out"
    assert main(["hf", "lm-eval", str(model_dir), "--tasks", "tiny_docs", "--include-path", str(tasks),
                 "--method", "self_extend:group=4,window=16", "--max-length", str(MAX_LENGTH),
                 "--log-samples", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tiny_docs" in printed and "bits_per_byte" in printed and f"wrote {out / 'results.json'}" in printed
    results = json.loads((out / "results.json").read_text())
    table = pd.read_csv(out / "results.csv")
    assert set(table.metric) == {"word_perplexity", "bits_per_byte"} and set(table.n) == {2}
    assert (table.method == "self_extend:group=4,window=16").all() and (table.max_length == MAX_LENGTH).all()
    bpb = table.set_index("metric").value["bits_per_byte"]
    assert bpb == pytest.approx(results["results"]["tiny_docs"]["bits_per_byte,none"])
    assert results["lengen"]["method"] == "self_extend:group=4,window=16" and results["lengen"]["fingerprint"]
    assert len((out / "samples_tiny_docs.jsonl").read_text().splitlines()) == 2
    assert not [p for p in out.iterdir() if p.name.startswith(".")]   # atomic writes leave no temporaries


def test_lengen_s_passkey_task_runs_offline(tiny, tmp_path, capsys):
    model_dir, _ = tiny
    out = tmp_path / "out"
    assert main(["hf", "lm-eval", str(model_dir), "--tasks", "lengen_passkey", "--max-length", "400",
                 "--method", "yarn:factor=4", "--metadata", '{"trials": 2}', "--log-samples",
                 "--out", str(out)]) == 0
    samples = [json.loads(line) for line in (out / "samples_lengen_passkey.jsonl").read_text().splitlines()]
    assert len(samples) == 2
    assert all(300 < s["doc"]["prompt_tokens"] <= 390 and s["doc"]["key"] in s["doc"]["prompt"] for s in samples)
    row = json.loads((out / "results.json").read_text())["results"]["lengen_passkey"]
    assert 0 <= row["acc,none"] <= 1


def refused(argv, capsys, monkeypatch) -> str:
    """The command exits 2 with one line, and never reaches the model loader."""
    monkeypatch.setattr(cli, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_an_unknown_method_is_refused(tiny, tmp_path, capsys, monkeypatch):
    err = refused(["hf", "lm-eval", str(tiny[0]), "--tasks", "tiny_docs", "--method", "selfextend",
                   "--max-length", "256", "--out", str(tmp_path / "o")], capsys, monkeypatch)
    assert "selfextend" in err and "self_extend" in err


def test_an_unknown_task_is_refused(tiny, tmp_path, capsys, monkeypatch):
    model_dir, tasks = tiny
    err = refused(["hf", "lm-eval", str(model_dir), "--tasks", "tiny_doc", "--include-path", str(tasks),
                   "--out", str(tmp_path / "o")], capsys, monkeypatch)
    assert "unknown lm-eval task 'tiny_doc'" in err and "did you mean 'tiny_docs'" in err


def test_a_method_without_max_length_is_refused(tiny, tmp_path, capsys, monkeypatch):
    err = refused(["hf", "lm-eval", str(tiny[0]), "--tasks", "tiny_docs", "--method", "yarn:factor=4",
                   "--out", str(tmp_path / "o")], capsys, monkeypatch)
    assert "needs --max-length" in err


def test_missing_lm_eval_is_refused_with_the_install_line(tiny, tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lm_eval" else real(name, *a))
    err = refused(["hf", "lm-eval", str(tiny[0]), "--tasks", "tiny_docs", "--out", str(tmp_path / "o")],
                  capsys, monkeypatch)
    assert "pip install 'lengen[lmeval]'" in err


def test_lm_eval_s_own_command_line_runs_the_lengen_model_type(tiny, tmp_path):
    """python -m lengen.hf.harness_cli: lm-eval's CLI with "lengen" registered (no plugin mechanism)."""
    model_dir, tasks = tiny
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "lengen.hf.harness_cli", "--model", "lengen", "--model_args",
         json.dumps({"pretrained": str(model_dir), "method": "self_extend:group=4,window=16",
                     "max_length": MAX_LENGTH, "device": "cpu"}),
         "--tasks", "tiny_docs", "--include_path", str(tasks), "--output_path", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tiny_docs" in done.stdout and "bits_per_byte" in done.stdout


def test_a_calibrated_method_reads_with_the_loaded_tokenizer(tiny, monkeypatch):
    """DPE calibrates on text through the tokenizer the model was loaded with, not the model
    folder's, which a GGUF model's folder may not have."""
    import lengen.hf.calibration as calibration

    def no_folder_tokenizer(model, who):
        raise AssertionError("calibrated with the model folder's tokenizer")

    monkeypatch.setattr(calibration, "_folder_tokenizer", no_folder_tokenizer)
    model_dir, _ = tiny
    lm = harness.LengenLM(str(model_dir), method="dpe:scales=2-4,window=16", max_length=MAX_LENGTH, device="cpu")
    assert lm.lengen_method == "dpe:scales=2-4,window=16"
