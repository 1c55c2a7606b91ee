"""`lengen hf tune` end to end on the tiny random Llama (tests/tiny_llama.py): the reported score is
the last-segment perplexity of the evaluation slice, computed again here by hand."""

import csv
import json
import math
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from lengen.cli import main  # noqa: E402
from lengen.hf import extend, restore  # noqa: E402

from guards import ModelLoaded, no_model  # noqa: E402
from tiny_llama import TEXT, bos_char_tokenizer, save_tiny_llama  # noqa: E402

CHARS = [chr(i) for i in range(32, 127)] + ["\n"]   # the char tokenizer's ids: 2 + index here
# three different documents (the tiny_llama corpus repeats one text three times)
TEXTS = {"a.txt": TEXT,
         "b.txt": "".join(f"x{i} = {i * i} + y{i % 7}  # square\n" for i in range(200)),
         "c.txt": "The quick brown fox jumps over the lazy dog. " * 60}
L, SEGMENT = 128, 32


def ids_of(text):
    return [CHARS.index(c) + 2 for c in text]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = save_tiny_llama(tmp_path_factory.mktemp("hf"))
    for name in ("texts", "other"):
        (root / name).mkdir()
    for name, text in TEXTS.items():
        (root / "texts" / name).write_text(text)
    (root / "other" / "d.txt").write_text("".join(f"line {i}: {'ab' * (i % 5)} end\n" for i in range(100)))
    return root


pytestmark = pytest.mark.usefixtures("private_cache")


def tune_args(model_dir, out, *extra):
    return ["hf", "tune", str(model_dir / "model"), "--text", str(model_dir / "texts"), "--length", str(L),
            "--segment", str(SEGMENT), "--methods", "rerope", "self_extend", "--budget", "10",
            "--out", str(out), "--no-progress", *extra]


def last_segment_ppl(model, seqs, spec):
    """exp(mean NLL of the final SEGMENT targets), by hand from the full logits, float64."""
    if spec != "rope":
        extend(model, spec)
    try:
        nll = []
        with torch.no_grad():
            for s in seqs:
                ids = torch.tensor([s])
                logits = model(ids[:, :-1]).logits[0, -SEGMENT:].double()
                nll += (-logits.log_softmax(-1)[torch.arange(SEGMENT), ids[0, -SEGMENT:]]).tolist()
    finally:
        if spec != "rope":
            restore(model)
    return math.exp(sum(nll) / len(nll))


def test_reported_scores_are_last_segment_perplexity_on_the_evaluation_slice(model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(tune_args(model_dir, out)) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "tune.json").read_text())
    meta = result["meta"]
    # slices, by hand: a.txt's first two sequences of L + 1 tokens to tune on; the evaluation slice
    # from the other documents (b.txt's first two), no document in both
    a, b = ids_of(TEXTS["a.txt"]), ids_of(TEXTS["b.txt"])
    tune_seqs, eval_seqs = [a[:L + 1], a[L + 1:2 * L + 2]], [b[:L + 1], b[L + 1:2 * L + 2]]
    assert [s["documents"] for s in meta["tune_slice"]] == [["a.txt"], ["a.txt"]]
    assert [(s["documents"], s["start"]) for s in meta["eval_slice"]] == [(["b.txt"], 0), (["b.txt"], L + 1)]
    assert not {d for s in meta["tune_slice"] for d in s["documents"]} & \
        {d for s in meta["eval_slice"] for d in s["documents"]}
    assert meta["shared_documents"] == []
    assert meta["search_seconds"] > 0 and meta["new_evaluations"] > 0
    # what computed it, as lengen hf eval records it
    assert meta["environment"]["torch"] == torch.__version__ and meta["environment"]["device"] == "cpu"

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir / "model").eval()
    chosen = result["chosen"]
    evaluation = {e["role"]: e for e in result["evaluation"]}
    assert evaluation["chosen"]["spec"] == chosen and evaluation["rope"]["spec"] == "rope"
    assert evaluation["default"]["spec"] == {"rerope": "rerope:window=16",
                                             "self_extend": "self_extend:group=8,window=16"}[chosen.split(":")[0]]
    for e in evaluation.values():
        assert e["eval_ppl"] == pytest.approx(last_segment_ppl(model, eval_seqs, e["spec"]), rel=1e-5)
        assert e["sequences"] == 2
    # the tune-slice number is the objective's, and differs from the reported one
    tune_ppl = last_segment_ppl(model, tune_seqs, chosen)
    assert result["tune_ppl"] == pytest.approx(tune_ppl, rel=1e-5)
    assert abs(evaluation["chosen"]["eval_ppl"] - tune_ppl) > 1e-3
    # the chosen setting is the best finished one on the tune slice, first in the ranking
    ranking = result["ranking"]
    done = [r for r in ranking if r["status"] == "done"]
    assert ranking[0]["spec"] == chosen and ranking[0]["tune_ppl"] == min(r["tune_ppl"] for r in done)
    for r in done[:3]:   # a few rows of the table, recomputed
        assert r["tune_ppl"] == pytest.approx(last_segment_ppl(model, tune_seqs, r["spec"]), rel=1e-5)
    assert {r["spec"] for r in ranking if r["default"]} == {
        "rerope:window=16", "rerope:window=16+logn", "self_extend:group=8,window=16",
        "self_extend:group=8,window=16+logn"}
    with open(out / "tune.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["spec"] for r in rows] == [r["spec"] for r in ranking]
    assert list(rows[0])[:4] == ["rank", "spec", "method", "tune_ppl"]
    pandas = pytest.importorskip("pandas")
    frame = pandas.read_csv(out / "tune.csv")
    assert len(frame) == len(ranking) and frame["tune_ppl"].iloc[0] == pytest.approx(ranking[0]["tune_ppl"])
    call = f'lengen.hf.extend(model, "{chosen}")'
    assert call in printed and result["call"] == call
    assert printed.splitlines()[0].replace(" ", "") == "|rank|spec|tuneppl|sequences|status|default|"


def test_rerun_resumes_from_the_cache_and_other_settings_are_refused(model_dir, tmp_path, capsys, monkeypatch):
    import lengen.hf.tuning as tuning

    out = tmp_path / "out"
    assert main(tune_args(model_dir, out, "--no-refine", "--no-logn")) == 0
    first = json.loads((out / "tune.json").read_text())
    assert first["meta"]["new_evaluations"] == len(first["ranking"]) * 2

    def refuse(self, setting, i):
        raise AssertionError("a cached sequence was scored again")

    monkeypatch.setattr(tuning.ModelObjective, "__call__", refuse)
    monkeypatch.setattr(tuning, "load", no_model)   # every score is cached: the model is not even loaded
    assert main(tune_args(model_dir, out, "--no-refine", "--no-logn")) == 0
    again = json.loads((out / "tune.json").read_text())
    assert again["meta"]["new_evaluations"] == 0
    assert again["ranking"] == first["ranking"] and again["evaluation"] == first["evaluation"]
    capsys.readouterr()
    assert main(tune_args(model_dir, out, "--segment", "16")) == 2
    err = capsys.readouterr().err
    assert "holds scores of other settings (segment: 32 there, 16 now)" in err and "use another --out" in err
    assert len(err.strip().splitlines()) == 1


def test_eval_text_reports_on_another_source(model_dir, tmp_path):
    from lengen.hf import tune

    result = tune(model_path=str(model_dir / "model"), length=L, text=str(model_dir / "texts"),
                  eval_text=str(model_dir / "other"), segment=SEGMENT, methods=["rerope"], logn=False,
                  refine=False, budget=5, out=tmp_path / "out", progress=False)
    assert [s["documents"] for s in result["meta"]["eval_slice"]] == [["d.txt"], ["d.txt"]]
    d = ids_of((model_dir / "other" / "d.txt").read_text())
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir / "model").eval()
    chosen = next(e for e in result["evaluation"] if e["role"] == "chosen")
    assert chosen["eval_ppl"] == pytest.approx(
        last_segment_ppl(model, [d[:L + 1], d[L + 1:2 * L + 2]], result["chosen"]), rel=1e-5)


def test_the_evaluation_slice_never_holds_tune_slice_tokens(model_dir, tmp_path):
    """A text of one document: both slices come from it, so the evaluation slice is the sequences
    after the tune slice's (other tokens of the same document, said in shared_documents), and its
    reported perplexities are of those sequences, scored by hand here."""
    from lengen.hf import tune

    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.txt").write_text(TEXTS["a.txt"])
    result = tune(model_path=str(model_dir / "model"), length=L, text=str(tmp_path / "one"), segment=SEGMENT,
                  methods=["rerope"], logn=False, refine=False, budget=5, out=tmp_path / "out", progress=False)
    meta = result["meta"]

    def spans(slice_):
        return [(s["start"], s["start"] + s["tokens"]) for s in slice_]

    assert {d for s in meta["tune_slice"] + meta["eval_slice"] for d in s["documents"]} == {"a.txt"}
    assert all(stop <= start or end <= begin
               for begin, stop in spans(meta["tune_slice"]) for start, end in spans(meta["eval_slice"]))
    assert spans(meta["tune_slice"]) + spans(meta["eval_slice"]) == [(k * (L + 1), (k + 1) * (L + 1))
                                                                      for k in range(4)]
    assert meta["shared_documents"] == ["a.txt"] and meta["tune_tokens"] != meta["eval_tokens"]
    a = ids_of(TEXTS["a.txt"])
    eval_seqs = [a[2 * L + 2:3 * L + 3], a[3 * L + 3:4 * L + 4]]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir / "model").eval()
    for e in result["evaluation"]:
        assert e["eval_ppl"] == pytest.approx(last_segment_ppl(model, eval_seqs, e["spec"]), rel=1e-5)


def test_slices_begin_with_the_bos_the_tokenizer_adds(model_dir, tmp_path):
    """As in hf eval: a tokenizer that begins every text with BOS gets sequences BOS + L tokens of
    the text (the text cut into consecutive pieces of L), scored by hand here."""
    import shutil

    from lengen.hf import tune

    model_path = tmp_path / "bos-model"
    shutil.copytree(model_dir / "model", model_path)
    tok = bos_char_tokenizer()
    tok.save_pretrained(model_path)
    result = tune(model_path=str(model_path), length=L, text=str(model_dir / "texts"),
                  eval_text=str(model_dir / "other"), segment=SEGMENT, methods=["rerope"], logn=False,
                  refine=False, budget=5, out=tmp_path / "out", progress=False)
    d = ids_of((model_dir / "other" / "d.txt").read_text())
    bos = tok.bos_token_id
    model = transformers.AutoModelForCausalLM.from_pretrained(model_path).eval()
    chosen = next(e for e in result["evaluation"] if e["role"] == "chosen")
    assert chosen["eval_ppl"] == pytest.approx(
        last_segment_ppl(model, [[bos] + d[:L], [bos] + d[L:2 * L]], result["chosen"]), rel=1e-5)


@pytest.mark.parametrize("args,message", [
    (["--methods", "string"], "lengen hf tune searches the methods self_extend, dca, rerope"),
    (["--length", "64"], "--length 64 is not beyond the trained length 64"),
    (["--length", "1k,2k"], "--length takes one length, got 1024, 2048"),
    (["--budget", "0"], "--budget must be > 0 minutes, got 0.0"),
    (["--budget", "-3"], "--budget must be > 0 minutes, got -3.0"),
    (["--text", "/nonexistent/t.txt"], "corpus '/nonexistent/t.txt' does not exist"),
    (["--eval-text", "/nonexistent/t.txt"], "corpus '/nonexistent/t.txt' does not exist"),
    (["--segment", "0"], "--segment must be in 1..128"),
    (["--tune-docs", "0"], "--tune-docs and --eval-docs must be >= 1"),
    (["--methods", "dca", "dca"], "a method is given twice"),
    (["--seed", "3"], "--seed applies to --passkey only"),
    (["--passkey", "-1"], "--passkey and --seed must be >= 0"),
    (["--length", "48"], "--length 48 is not beyond the trained length 64"),
])
def test_bad_input_exits_2_with_one_line_before_the_model_loads(model_dir, tmp_path, capsys, monkeypatch,
                                                                args, message):
    import lengen.hf.tuning as tuning

    monkeypatch.setattr(tuning, "load", no_model)
    monkeypatch.setattr(tuning, "load_tokenizer", no_model)
    assert main(tune_args(model_dir, tmp_path / "out", *args)) == 2
    err = capsys.readouterr().err
    assert err.startswith("lengen: error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_missing_model_folder_and_too_little_text_exit_2(model_dir, tmp_path, capsys, monkeypatch):
    import lengen.hf.tuning as tuning

    monkeypatch.setattr(tuning, "load", no_model)
    assert main(tune_args(model_dir, tmp_path / "out")[:2] + [str(tmp_path / "none")]
                + tune_args(model_dir, tmp_path / "out")[3:]) == 2
    assert "is not a local folder" in capsys.readouterr().err
    # 2 + 2 sequences of 4097 tokens: more than the texts hold (checked before the model loads)
    assert main(tune_args(model_dir, tmp_path / "out", "--length", "4096")) == 2
    err = capsys.readouterr().err
    assert "the text gives 2 sequences of 4097 tokens" in err and len(err.strip().splitlines()) == 1


def test_a_budget_too_small_for_one_setting_says_so(model_dir, tmp_path, capsys, monkeypatch):
    import lengen.hf.tuning as tuning

    real = tuning.search
    monkeypatch.setattr(tuning, "search",
                        lambda spaces, objective, n, budget_s, **k: real(spaces, objective, n, 0, **k))
    assert main(tune_args(model_dir, tmp_path / "out")) == 2
    assert "ended before any setting was scored" in capsys.readouterr().err


def test_help_teaches_with_examples(capsys):
    with pytest.raises(SystemExit):
        main(["hf", "tune", "--help"])
    text = capsys.readouterr().out
    for says in ("examples:", "lengen hf tune $M --gguf-file", "early stopping:", "--eval-text",
                 "evaluation slice", "tune_cache.json", "lengen.hf.tune("):
        assert says in text, says


NEEDLE = re.compile(r"The pass key is (\d+)\. Remember it\. \1 is the pass key\.")


@pytest.mark.parametrize("knows", ["rerope", "yarn"])
def test_passkey_chooses_the_method_that_retrieves_and_reports_on_other_prompts(model_dir, tmp_path, monkeypatch,
                                                                               knows):
    """A stand-in decoder answers the key only when the model is extended with a `knows` method:
    that method's best setting must be chosen whatever the perplexities say."""
    import lengen.hf.tuning as tuning
    from lengen.hf import extension_of

    keys = {}

    def greedy_fn(model, pad_token_id):
        def generate(ids, n):
            (key,) = NEEDLE.findall("".join(CHARS[i - 2] for i in ids if i >= 2))
            spec = extension_of(model) or "rope"
            keys.setdefault(spec, []).append(int(key))
            answer = key if spec.startswith(knows) else "0"
            return ids_of(f" {answer}. The grass")[:n]
        return generate

    monkeypatch.setattr(tuning, "greedy_fn", greedy_fn)
    out = tmp_path / "out"
    assert main(["hf", "tune", str(model_dir / "model"), "--text", str(model_dir / "texts"), "--length", "320",
                 "--segment", "32", "--methods", "rerope", "yarn", "--no-logn", "--no-refine", "--passkey", "3",
                 "--out", str(out), "--no-progress"]) == 0
    result = json.loads((out / "tune.json").read_text())
    assert result["chosen"].startswith(knows)
    finalists = [r for r in result["ranking"] if r["tune_passkey"] is not None]
    assert sorted(r["method"] for r in finalists) == ["rerope", "yarn"]
    assert all(r["tune_passkey"] == (1.0 if r["method"] == knows else 0.0) for r in finalists)
    evaluation = {e["role"]: e for e in result["evaluation"]}
    assert evaluation["chosen"]["eval_passkey"] == 1.0 and evaluation["rope"]["eval_passkey"] == 0.0
    # the report's prompts (seed 1) are not the ones the choice was made on (seed 0)
    chosen_keys = keys[result["chosen"]]
    assert len(chosen_keys) == 6 and chosen_keys[:3] != chosen_keys[3:]


def test_says_when_the_choice_is_no_better_than_rope_or_the_default_on_the_evaluation_slice(model_dir, tmp_path,
                                                                                          capsys):
    """The note and tune.json's no_better_than follow the evaluation slice's numbers (here the
    chosen setting's lead on the tune slice does not carry over to --eval-text)."""
    out = tmp_path / "out"
    assert main(["hf", "tune", str(model_dir / "model"), "--text", str(model_dir / "texts"), "--eval-text",
                 str(model_dir / "other"), "--length", str(L), "--segment", str(SEGMENT), "--methods", "self_extend",
                 "--no-logn", "--no-refine", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    result = json.loads((out / "tune.json").read_text())
    ppl = {e["role"]: e["eval_ppl"] for e in result["evaluation"]}
    worse = [r for r in ("rope", "default") if ppl["chosen"] >= ppl[r]]
    assert result["no_better_than"] == worse
    assert ("is no better than" in printed) == bool(worse)


@pytest.mark.parametrize("chosen,rope,default,expected", [
    (({"eval_ppl": 9.0}, "a"), {"eval_ppl": 10.0}, ({"eval_ppl": 9.5}, "d"), []),
    # a tie is no better
    (({"eval_ppl": 10.0}, "a"), {"eval_ppl": 10.0}, ({"eval_ppl": 9.5}, "d"), ["rope", "default"]),
    (({"eval_ppl": 9.6}, "a"), {"eval_ppl": 10.0}, ({"eval_ppl": 9.5}, "d"), ["default"]),
    (({"eval_ppl": 9.6}, "d"), {"eval_ppl": 10.0}, ({"eval_ppl": 9.6}, "d"), []),   # the default itself
    # with passkey scores the choice is by accuracy, ties by perplexity
    (({"eval_ppl": 11.0, "eval_passkey": 0.5}, "a"), {"eval_ppl": 10.0, "eval_passkey": 0.0},
     ({"eval_ppl": 9.0, "eval_passkey": 0.5}, "d"), ["default"]),
])
def test_no_better_than_compares_on_the_evaluation_slice(chosen, rope, default, expected):
    from lengen.hf.tune_report import format_result, no_better_than

    evaluation = [{"role": "chosen", "spec": chosen[1], **chosen[0]}, {"role": "rope", "spec": "rope", **rope},
                  {"role": "default", "spec": default[1], **default[0]}]
    assert no_better_than(evaluation) == expected
    meta = {"tune_slice": [{}], "eval_slice": [{}], "passkey": 1, "eval_text": None, "shared_documents": [],
            "segment": 8, "length": 128, "out_of_budget": False}
    text = format_result({"meta": meta, "ranking": [], "chosen": chosen[1], "tune_ppl": 9.0,
                          "evaluation": evaluation, "call": "x"})
    def score(e):
        return f"ppl {e['eval_ppl']:.4f}" + (f", passkey {e['eval_passkey']:.2f}" if "eval_passkey" in e else "")

    names = {"rope": f"plain RoPE ({score(rope)})", "default": f"the method's default ({score(default[0])})"}
    note = (f"note: on the evaluation slice the chosen setting ({score(chosen[0])}) is no better than "
            + " or ".join(names[r] for r in expected) + ": its lead on the tune slice did not carry over")
    assert (note in text.splitlines()) == bool(expected) and ("no better" in text) == bool(expected)


def planted_dpe(optimum):
    """ModelObjective.__call__'s stand-in: NLL 1 + sum_g (log2 s_g - log2 s*_g)^2 for a dpe spec
    (+ 0.01 with +logn), 9 for plain RoPE; no model."""
    def call(self, setting, i):
        spec = setting if isinstance(setting, str) else setting.spec
        if spec == "rope":
            return 9.0
        scales = [int(v) for v in spec.split("scales=")[1].split(",")[0].split("-")]
        return 1.0 + sum((math.log2(s) - math.log2(o)) ** 2 for s, o in zip(scales, optimum)) + 0.01 * ("+logn" in spec)
    return call


def test_methods_dpe_sweeps_one_group_at_a_time_and_reports_the_assembled_vector(model_dir, tmp_path, monkeypatch):
    """`--methods dpe` end to end through the CLI with a planted objective in place of the model
    (so the dpe method itself is not needed): L0 = 64, L = 128, so W = 8, the other groups at
    2 x 128 / 64 = 4 and each group over 1, 2, 4, 8, 16."""
    import lengen.hf.tuning as tuning

    monkeypatch.setattr(tuning.ModelObjective, "__call__", planted_dpe((16, 1, 4, 4, 2, 4, 4, 8)))
    monkeypatch.setattr(tuning, "load", no_model)
    out = tmp_path / "out"
    assert main(tune_args(model_dir, out, "--methods", "dpe", "--no-refine")) == 0
    result = json.loads((out / "tune.json").read_text())
    assert result["chosen"] == "dpe:scales=16-1-4-4-2-4-4-8,window=8" and result["tune_ppl"] == pytest.approx(math.e)
    ranking = result["ranking"]
    assert ranking[0]["stage"] == "assemble" and ranking[0]["status"] == "done"
    # 8 groups x 4 scales besides the base, the all-4 vector (the default), the assembled one and
    # it with +logn (which the planted objective scores 0.01 worse)
    assert len(ranking) == 8 * 4 + 3 and {r["status"] for r in ranking} == {"done", "stopped"}
    assert ranking[1]["spec"] == "dpe:scales=16-1-4-4-2-4-4-8,window=8+logn"
    # a setting its own group's best beats by > 0.5 nats stops after one sequence
    assert result["meta"]["new_evaluations"] == sum(r["sequences"] for r in ranking) < (8 * 4 + 2) * 2
    assert [r["spec"] for r in ranking if r["default"]] == ["dpe:scales=4-4-4-4-4-4-4-4,window=8"]
    evaluation = {e["role"]: e["spec"] for e in result["evaluation"]}
    assert evaluation == {"chosen": "dpe:scales=16-1-4-4-2-4-4-8,window=8", "rope": "rope",
                          "default": "dpe:scales=4-4-4-4-4-4-4-4,window=8"}
    assert result["call"] == 'lengen.hf.extend(model, "dpe:scales=16-1-4-4-2-4-4-8,window=8")'


def test_methods_dpe_on_the_tiny_model_reports_last_segment_perplexity(model_dir, tmp_path, monkeypatch):
    """Also: every calibration (the search's and the evaluation slice's) reads with the run's
    tokenizer, not the model folder's, which a GGUF model's folder may not have (SmolLM2's did not:
    the evaluation slice then ended the run), and reads the run's --text, not the running Python's
    standard library (a GPU machine's differs from the one the CPU records read)."""
    import lengen.hf.calibration as calibration

    def no_folder_tokenizer(model, who):
        raise AssertionError("calibrated with the model folder's tokenizer")

    read = []

    def documents(source, *args, **kwargs):
        read.append(source)
        return load_documents(source, *args, **kwargs)

    load_documents = calibration.load_documents
    monkeypatch.setattr(calibration, "_folder_tokenizer", no_folder_tokenizer)
    monkeypatch.setattr(calibration, "load_documents", documents)
    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))   # calibrated here, not read from a cache
    out = tmp_path / "out"
    assert main(tune_args(model_dir, out, "--methods", "dpe", "--no-refine")) == 0
    monkeypatch.undo()
    assert read and set(read) == {str(model_dir / "texts")}
    result = json.loads((out / "tune.json").read_text())
    b = ids_of(TEXTS["b.txt"])
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir / "model").eval()
    for e in result["evaluation"]:
        assert e["eval_ppl"] == pytest.approx(last_segment_ppl(model, [b[:L + 1], b[L + 1:2 * L + 2]], e["spec"]),
                                              rel=1e-5)
    assert {r["stage"] for r in result["ranking"]} <= {"default", "grid", "assemble"}
