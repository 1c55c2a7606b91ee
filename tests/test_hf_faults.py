"""Faults in `lengen hf eval` and `lengen hf tune` folders: each results file truncated, corrupted or
swapped for another folder's, then the same command again. Each case ends in one line naming the
file (exit 2, every file untouched) or in files rebuilt equal to those of the uninterrupted run,
the damaged file named on stderr. Tiny random Llama (tests/tiny_llama.py)."""

import json
import os
import shutil

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

import lengen.hf.evaluate as evaluate  # noqa: E402
import lengen.hf.tuning as tuning  # noqa: E402
from lengen.cli import main  # noqa: E402

from guards import no_model  # noqa: E402
from tiny_llama import save_tiny_llama  # noqa: E402

pytestmark = pytest.mark.usefixtures("private_cache")

METHODS = ["rope", "rerope:window=16+logn"]
OTHER_TEXT = "".join(f"line {i}: {'ab' * (i % 5)} end\n" for i in range(100))
TUNE_TEXTS = {"b.txt": "".join(f"x{i} = {i * i} + y{i % 7}  # square\n" for i in range(200)),
              "c.txt": "The quick brown fox jumps over the lazy dog. " * 60}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = save_tiny_llama(tmp_path_factory.mktemp("hf"))
    (root / "other").mkdir()
    (root / "other" / "d.txt").write_text(OTHER_TEXT)
    (root / "texts").mkdir()
    for name, text in TUNE_TEXTS.items():
        (root / "texts" / name).write_text(text)
    return root


def eval_args(root, out, corpus="corpus", *extra):
    return ["hf", "eval", str(root / "model"), "--corpus", str(root / corpus), "--docs", "1",
            "--lengths", "32", "64", "--methods", *METHODS, "--out", str(out), "--no-progress", *extra]


def tune_args(root, out, *extra):
    return ["hf", "tune", str(root / "model"), "--text", str(root / "texts"), "--length", "128",
            "--segment", "32", "--methods", "rerope", "--no-logn", "--no-refine", "--budget", "10",
            "--out", str(out), "--no-progress", *extra]


def files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def finished_eval(root, tmp_path_factory):
    """An hf eval folder run to the end, and one finished on another corpus (same methods and lengths)."""
    base = tmp_path_factory.mktemp("eval")
    assert main(eval_args(root, base / "done")) == 0
    assert main(eval_args(root, base / "other-corpus", "other")) == 0
    return base


@pytest.fixture(scope="module")
def finished_tune(root, tmp_path_factory):
    """An hf tune folder run to the end, and one of another target length."""
    base = tmp_path_factory.mktemp("tune")
    assert main(tune_args(root, base / "done")) == 0
    assert main(tune_args(root, base / "longer", "--length", "160")) == 0
    return base


def copy(src, tmp_path):
    return shutil.copytree(src, tmp_path / "out")


def refused(capsys, says):
    err = capsys.readouterr().err
    assert err.startswith("lengen: error: ") and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and all(s in err for s in says), err
    return err


def refused_untouched(capsys, monkeypatch, module, argv, out, says):
    """`argv` exits 2 with one line saying all of `says`, before `module` loads a model, and leaves
    every file of `out` as it was."""
    before = files(out)
    monkeypatch.setattr(module, "load", no_model)
    assert main(argv) == 2
    refused(capsys, says)
    assert files(out) == before


def truncate(path, keep=0.5):
    path.write_bytes(path.read_bytes()[:int(path.stat().st_size * keep)])


# --- hf eval ------------------------------------------------------------------------------------

@pytest.mark.parametrize("damage,says", [
    (lambda p: truncate(p), "not JSON"),
    (lambda p: p.write_text("[]"), "not a lengen hf eval record"),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "rows": [{"method": "rope", "length": 32}]})),
     "row 1 is not a result row"),
])
def test_eval_damaged_results_json_is_refused_and_nothing_is_rewritten(root, finished_eval, tmp_path, capsys,
                                                                       monkeypatch, damage, says):
    """A results.json that is not a whole record: its rows (and results.csv's) cannot be checked,
    and starting over would drop them. One line naming it, before the model loads."""
    out = copy(finished_eval / "done", tmp_path)
    damage(out / "results.json")
    refused_untouched(capsys, monkeypatch, evaluate, eval_args(root, out), out,
                      [str(out / "results.json"), "is damaged", says, "restore it"])


def test_eval_results_csv_without_its_record_is_refused(root, finished_eval, tmp_path, capsys, monkeypatch):
    out = copy(finished_eval / "done", tmp_path)
    (out / "results.json").unlink()
    refused_untouched(capsys, monkeypatch, evaluate, eval_args(root, out), out,
                      [str(out / "results.csv"), "results.json", "is missing"])


@pytest.mark.parametrize("damage", ["truncated", "swapped"])
def test_eval_damaged_results_csv_is_named_and_rebuilt_from_the_record(root, finished_eval, tmp_path, capsys, damage):
    out = copy(finished_eval / "done", tmp_path)
    if damage == "truncated":
        truncate(out / "results.csv", 0.8)   # mid-row: a row that is not in results.json
    else:
        shutil.copy(finished_eval / "other-corpus" / "results.csv", out / "results.csv")
    capsys.readouterr()
    assert main(eval_args(root, out)) == 0
    err = capsys.readouterr().err
    assert f"note: {out / 'results.csv'} disagrees with results.json" in err
    done = files(finished_eval / "done")
    assert (out / "results.csv").read_bytes() == done["results.csv"]
    assert json.loads((out / "results.json").read_text())["rows"] == json.loads(done["results.json"])["rows"]


def test_eval_rerun_on_another_corpus_is_refused_when_nothing_is_left_to_compute(root, finished_eval, tmp_path,
                                                                                capsys, monkeypatch):
    """The same methods and lengths on another --corpus: the old rows would be printed and relabelled
    with the new corpus; the token sequences' digest is checked first."""
    out = copy(finished_eval / "done", tmp_path)
    refused_untouched(capsys, monkeypatch, evaluate, eval_args(root, out, "other"), out,
                      ["scored on other token sequences", "use another --out"])


def test_eval_says_it_resumes_only_after_the_rows_are_checked(root, finished_eval, tmp_path, capsys, monkeypatch):
    """"resuming: N results already in ..." is printed for rows that passed the checks, never before a
    refusal (the rows on another corpus are not resumed)."""
    out = copy(finished_eval / "done", tmp_path)
    monkeypatch.setattr(evaluate, "load", no_model)
    with_progress = [a for a in eval_args(root, out, "other") if a != "--no-progress"]
    assert main(with_progress) == 2
    assert "resuming" not in capsys.readouterr().out
    monkeypatch.undo()   # the tiny model loads even with nothing left to score
    assert main([a for a in eval_args(root, out) if a != "--no-progress"]) == 0   # same corpus: all rows reused
    assert f"resuming: {2 * len(METHODS)} results already in {out / 'results.json'}" in capsys.readouterr().out


def test_eval_results_json_swapped_for_another_corpus_is_refused(root, finished_eval, tmp_path, capsys, monkeypatch):
    out = copy(finished_eval / "done", tmp_path)
    for name in ("results.json", "results.csv"):
        shutil.copy(finished_eval / "other-corpus" / name, out / name)
    refused_untouched(capsys, monkeypatch, evaluate, eval_args(root, out), out,
                      ["scored on other token sequences"])


# --- model weights ------------------------------------------------------------------------------

@pytest.fixture
def truncated_model(root, tmp_path):
    model = shutil.copytree(root / "model", tmp_path / "model")
    weights = model / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 1000)
    return tmp_path


@pytest.mark.parametrize("command", ["eval", "tune"])
def test_truncated_weights_are_one_line_before_any_work(root, truncated_model, tmp_path, capsys, monkeypatch, command):
    monkeypatch.setattr(evaluate, "load", no_model)
    monkeypatch.setattr(tuning, "load", no_model)
    monkeypatch.setattr(tuning, "make_slices", no_model)   # hf tune: before the text is cut into slices
    for name in ("corpus", "texts"):
        shutil.copytree(root / name, truncated_model / name)
    out = tmp_path / "out"
    argv = eval_args(truncated_model, out) if command == "eval" else tune_args(truncated_model, out)
    assert main(argv) == 2
    refused(capsys, [str(truncated_model / "model" / "model.safetensors"), "is damaged", "truncated",
                     "download or save the model again"])
    assert not out.exists()


# --- hf tune ------------------------------------------------------------------------------------

SAME = ("ranking", "chosen", "tune_ppl", "evaluation", "call")


def same_result(out, finished):
    """tune.json's results (not its timings) and tune.csv equal the uninterrupted run's."""
    got, want = (json.loads((f / "tune.json").read_text()) for f in (out, finished))
    assert {k: got[k] for k in SAME} == {k: want[k] for k in SAME}
    assert (out / "tune.csv").read_bytes() == (finished / "tune.csv").read_bytes()


def test_tune_truncated_cache_is_refused_and_nothing_is_rewritten(root, finished_tune, tmp_path, capsys, monkeypatch):
    out = copy(finished_tune / "done", tmp_path)
    truncate(out / "tune_cache.json")
    refused_untouched(capsys, monkeypatch, tuning, tune_args(root, out), out,
                      [str(out / "tune_cache.json"), "is damaged (not JSON", "restore it", "search again"])


def test_tune_damaged_cache_entries_are_named_and_scored_again(root, finished_tune, tmp_path, capsys):
    out = copy(finished_tune / "done", tmp_path)
    cache = json.loads((out / "tune_cache.json").read_text())
    spec = next(iter(cache["tune"]))
    cache["tune"][spec]["nll"] = "garbled"
    (digest,) = cache["eval"]
    cache["eval"][digest]["rope"] = [float("nan")]
    (out / "tune_cache.json").write_text(json.dumps(cache))
    capsys.readouterr()
    assert main(tune_args(root, out)) == 0
    err = capsys.readouterr().err
    assert f"{out / 'tune_cache.json'}: 2 damaged entries dropped ({spec}, eval rope)" in err
    same_result(out, finished_tune / "done")
    assert json.loads((out / "tune.json").read_text())["meta"]["new_evaluations"] == 2   # the dropped entry's two


def test_tune_records_without_their_cache_are_refused(root, finished_tune, tmp_path, capsys, monkeypatch):
    """tune.json and tune.csv without tune_cache.json: the search would start over and replace them."""
    out = copy(finished_tune / "done", tmp_path)
    (out / "tune_cache.json").unlink()
    refused_untouched(capsys, monkeypatch, tuning, tune_args(root, out), out,
                      [f"{out} holds tune.json and tune.csv but not tune_cache.json", "restore it"])


@pytest.mark.parametrize("file,damage,says", [
    ("tune.json", "truncated", "tune.json is damaged (not JSON"),
    ("tune.json", "swapped", "tune.json records a search of other settings (length: 160 there, 128 now"),
    ("tune.json", "corrupted", "tune.json is not a lengen hf tune record"),
    ("tune.csv", "truncated", "tune.csv disagrees with tune.json"),
    ("tune.csv", "swapped", "tune.csv disagrees with tune.json"),
])
def test_tune_damaged_records_are_named_and_rebuilt_from_the_cache(root, finished_tune, tmp_path, capsys,
                                                                   monkeypatch, file, damage, says):
    out = copy(finished_tune / "done", tmp_path)
    if damage == "truncated":
        truncate(out / file)
    elif damage == "corrupted":
        (out / file).write_text(json.dumps({"meta": {}, "ranking": "?"}))
    else:
        shutil.copy(finished_tune / "longer" / file, out / file)
    monkeypatch.setattr(tuning, "load", no_model)   # every score is cached: rebuilt without the model
    capsys.readouterr()
    assert main(tune_args(root, out)) == 0
    err = capsys.readouterr().err
    assert f"note: {out / says}" in err and "written again from tune_cache.json" in err
    same_result(out, finished_tune / "done")
