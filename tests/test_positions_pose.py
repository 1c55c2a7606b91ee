"""PoSE positions (Zhu et al. 2024, section 3.2) against the paper's definition written out here
with explicit loops, plus the runs that use them: `lengen train`, `lengen lm train` + `lm eval`
and `lengen mlm train` end to end, a sweep file with `positions: [pose]`, report labels."""

import itertools
import json
import math
from collections import Counter

import pandas as pd
import pytest
import torch
import yaml

import lengen.lm.train as train_mod
from guards import interrupt_on_call
from lengen.cli import main
from lengen.errors import LengenError
from lengen.lm.model import DecoderLM
from lengen.models.config import ModelConfig
from lengen.positions import build_sampler
from lengen.reports import che_aggregate as che_agg
from lengen.reports import lm_aggregate
from lengen.reports.mlm import add_variants as mlm_variants
from lengen.sweeps.spec import SweepSpecError, expand, load_spec
from tiny_lm import TINY


pytestmark = pytest.mark.usefixtures("private_cache")


# -- the paper's definition, independently ------------------------------------------------------

def paper_ids(lengths: list[int], skips: list[int]) -> list[int]:
    """Chunk i (length l_i, first index st_i = l_0 + ... + l_{i-1}) gets u_i + st_i ... u_i + st_i + l_i - 1."""
    ids, st = [], 0
    for l_i, u_i in zip(lengths, skips):
        for k in range(l_i):
            ids.append(u_i + st + k)
        st += l_i
    return ids


def skip_chains(n: int, top: int):
    """Every (u_0, ..., u_{n-1}) with u_0 = 0 and u_i in {u_{i-1}, ..., top}, with its probability
    under u_i ~ U{u_{i-1} .. top}."""
    def walk(prefix, p):
        if len(prefix) == n:
            yield prefix, p
            return
        for u in range(prefix[-1], top + 1):
            yield from walk(prefix + [u], p / (top - prefix[-1] + 1))
    yield from walk([0], 1.0)


def compositions(length: int, n: int):
    """Every division of `length` into n non-empty chunks, in order."""
    for cuts in itertools.combinations(range(1, length), n - 1):
        edges = [0, *cuts, length]
        yield [b - a for a, b in zip(edges, edges[1:])]


def law(length: int, target: int, chunks: int, split: str) -> dict[tuple, float]:
    """The probability of every id sequence, from the definition (explicit enumeration)."""
    top = target - length
    if split == "half":   # the official code: l_0 ~ U{1 .. floor((L_c + 1) / 2)}, two chunks
        divisions = [([l0, length - l0], 1 / ((length + 1) // 2)) for l0 in range(1, (length + 1) // 2 + 1)]
    else:                 # the paper: every division into min(N, L_c) non-empty chunks alike
        every = list(compositions(length, min(chunks, length)))
        divisions = [(c, 1 / len(every)) for c in every]
    out: dict[tuple, float] = {}
    for lengths, p_div in divisions:
        for skips, p_skip in skip_chains(len(lengths), top):
            ids = tuple(paper_ids(lengths, skips))
            out[ids] = out.get(ids, 0.0) + p_div * p_skip
    return out


def draws(sampler, length: int, count: int, seed: int = 0) -> Counter:
    gen = torch.Generator().manual_seed(seed)
    return Counter(tuple(sampler(length, gen)[0].tolist()) for _ in range(count))


@pytest.mark.parametrize("length,target,chunks,split", [
    (6, 12, 2, "half"),      # the official code's rule
    (7, 10, 2, "half"),      # odd L_c: l_0 up to 4
    (5, 9, 3, "uniform"),    # the paper's rule with three chunks
    (4, 7, 2, "uniform"),
    (2, 6, 3, "uniform"),    # fewer tokens than chunks: one token per chunk
])
def test_the_law_is_the_papers_definition(length, target, chunks, split):
    sampler = build_sampler("pose", target=target, chunks=chunks, split=split)
    expected = law(length, target, chunks, split)
    n = 20000
    seen = draws(sampler, length, n)
    assert set(seen) <= set(expected), set(seen) - set(expected)   # nothing outside the definition
    assert set(seen) == set(expected)                              # every admissible skip reached
    for ids, p in expected.items():                                # with its probability (5 sigma)
        assert abs(seen[ids] / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12, (ids, seen[ids] / n, p)


@pytest.mark.parametrize("length,target,options", [
    (64, 2048, {}), (1, 50, {}), (2, 50, {}), (33, 34, {}), (40, 40, {}),
    (64, 1000, {"chunks": 5, "split": "uniform"}), (3, 900, {"chunks": 8, "split": "uniform"}),
])
def test_every_draw_has_the_skip_structure(length, target, options):
    sampler = build_sampler("pose", target=target, **options)
    gen = torch.Generator().manual_seed(1)
    chunks = options.get("chunks", 2)
    for _ in range(300):
        pos = sampler(length, gen)
        assert pos.shape == (1, length) and pos.dtype == torch.int64
        ids = pos[0].tolist()
        assert ids[0] == 0 and max(ids) <= target - 1          # u_0 = 0; every id <= L_t - 1
        assert all(b > a for a, b in zip(ids, ids[1:]))         # strictly increasing
        bias = [p - k for k, p in enumerate(ids)]               # u of each token's chunk
        assert all(0 <= b <= target - length for b in bias)
        assert all(b2 >= b1 for b1, b2 in zip(bias, bias[1:]))  # non-decreasing skips
        assert len(set(bias)) <= chunks
        if not options:  # the code's split: the first chunk holds at most floor((L_c+1)/2) tokens
            jumps = [k for k in range(1, length) if bias[k] != bias[k - 1]]
            assert all(k <= (length + 1) // 2 for k in jumps)


def test_target_equal_to_the_window_is_standard_positions():
    sampler = build_sampler("pose", target=12)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        assert sampler(12, gen)[0].tolist() == list(range(12))


def test_the_reference_example_by_hand():
    """L_c = 6, L_t = 24, l_0 = 2, u_1 = 10 -> [0, 1, 12, 13, 14, 15] (reference note section 6).
    The sampler draws l_0 then u_1 from its generator (resumed runs rely on that order): find a
    seed whose two draws are (2, 10) and check the sampler turns it into the hand-computed ids."""
    sampler = build_sampler("pose", target=24)
    for seed in range(10000):
        g = torch.Generator().manual_seed(seed)
        l0 = int(torch.randint(1, (6 + 1) // 2 + 1, (1,), generator=g))
        u1 = int(torch.randint(0, 24 - 6 + 1, (1,), generator=g))
        if (l0, u1) == (2, 10):
            break
    else:
        pytest.fail("no seed gives l_0 = 2, u_1 = 10")
    assert sampler(6, torch.Generator().manual_seed(seed))[0].tolist() == [0, 1, 12, 13, 14, 15]
    # and the largest skip u_1 = 18 makes the last id 23 = L_t - 1
    assert paper_ids([2, 4], [0, 18])[-1] == 23


def test_the_default_target_is_max_position():
    sampler = build_sampler("pose", max_position=100)
    assert sampler.target == 100 and sampler.position_bound(10) == 100
    gen = torch.Generator().manual_seed(0)
    assert max(int(sampler(10, gen).max()) for _ in range(500)) == 99


@pytest.mark.parametrize("options,message", [
    ({"chunks": 3}, "split=half is the official code's rule for 2 chunks"),
    ({"chunks": 0, "split": "uniform"}, "chunks must be an integer >= 1"),
    ({"split": "paper"}, "split must be one of half, uniform"),
    ({"target": 0}, "target must be an integer >= 1"),
    ({"target": 2.5}, "target must be an integer >= 1"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(LengenError, match=message):
        build_sampler("pose", **options)


def test_a_window_longer_than_the_target_is_refused():
    with pytest.raises(LengenError, match="exceed the target length 16"):
        build_sampler("pose", target=16).check_length(17)


# -- the decoder takes the sampled positions -----------------------------------------------------

def test_decoder_reads_sampled_positions_and_keeps_the_cache_path():
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=1, num_heads=2, d_model=16, d_ff=32, dropout=0.0, norm="pre", causal=True,
                      pe="rope", embed_scale=False, max_position=256)
    model = DecoderLM(cfg, 257).eval()
    ids = torch.randint(0, 257, (2, 8))
    pose = torch.tensor([[0, 1, 2, 50, 51, 52, 53, 54], [0, 1, 30, 31, 32, 33, 34, 35]])
    with torch.no_grad():
        plain = model(ids)
        torch.testing.assert_close(model(ids, positions=torch.arange(8)[None]), plain)
        # RoPE is shift invariant: the positions reach the encoding (a shift changes nothing, a skip does)
        torch.testing.assert_close(model(ids, positions=torch.arange(8)[None] + 7), plain, atol=1e-5, rtol=0)
        skipped = model(ids, positions=pose)
        torch.testing.assert_close(skipped[:, :2], plain[:, :2])          # before the skip: causal, same
        assert (skipped[:, 3:] - plain[:, 3:]).abs().max() > 1e-4
        # evaluation of a PoSE model is standard positions with the KV cache: equal to the full forward
        cache = model.new_cache()
        steps = torch.cat([model(ids[:, :5], cache=cache), model(ids[:, 5:], cache=cache)], dim=1)
        torch.testing.assert_close(steps, plain, atol=1e-5, rtol=0)
    with pytest.raises(LengenError, match="sampled positions are for training"):
        model(ids, cache=model.new_cache(), positions=pose)


# -- end to end ----------------------------------------------------------------------------------

def test_lm_train_and_eval_with_pose(tmp_path, capsys):
    out = tmp_path / "lm"
    assert main(["lm", "train", *TINY, "--steps", "4", "--positions", "pose", "--position-option", "target=128",
                 "--out", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["positions"] == "pose" and cfg["position_options"] == {"target": 128}
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    assert "positions" in ckpt["rng"]            # the position stream resumes with the run
    assert json.loads((out / "eval.json").read_text())["positions"] == "pose"
    # the sampled positions reach training: the same windows and seed with standard positions
    # end with other weights
    assert main(["lm", "train", *TINY, "--steps", "4", "--out", str(tmp_path / "std")]) == 0
    std = torch.load(tmp_path / "std" / "checkpoint.pt", weights_only=False)["model"]
    assert any(not torch.equal(std[k], ckpt["model"][k]) for k in std)
    # standard positions at every length; the training-free RoPE methods work on top
    assert main(["lm", "eval", str(out), "--lengths", "16,64", "--docs", "2", "--methods", "rope,pi:factor=4",
                 "--no-progress"]) == 0
    rows = pd.read_csv(out / "eval-ppl" / "results.csv")
    assert len(rows) == 4 and set(rows["length"]) == {16, 64} and rows["ppl"].notna().all()


def test_lm_resume_with_pose_equals_an_uninterrupted_run(tmp_path, monkeypatch):
    common = ["lm", "train", *TINY, "--steps", "6", "--positions", "pose", "--position-option", "target=64"]
    assert main([*common, "--out", str(tmp_path / "full")]) == 0
    with monkeypatch.context() as m:
        m.setattr(train_mod, "sample_windows", interrupt_on_call(train_mod.sample_windows, 5))
        assert main([*common, "--out", str(tmp_path / "resumed")]) == 130  # killed after step 3's checkpoint
    assert main([*common, "--out", str(tmp_path / "resumed")]) == 0
    a = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=False)
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], rtol=0, atol=0)


@pytest.mark.parametrize("args", [
    ["--position-option", "target=8"],                                   # L_t below the window
    ["--pe", "learned", "--max-position", "64", "--position-option", "target=128"],  # table too small
    ["--position-option", "chunks=3"],                                   # half split needs 2 chunks
])
def test_lm_train_refuses_bad_pose_combinations(tmp_path, capsys, args):
    out = tmp_path / "bad"
    assert main(["lm", "train", *TINY, "--steps", "2", "--positions", "pose", *args, "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lengen: error:")


def test_mlm_train_and_eval_with_pose(tmp_path):
    out = tmp_path / "mlm"
    assert main(["mlm", "train", *TINY, "--steps", "4", "--positions", "pose", "--position-option", "target=64",
                 "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["positions"] == "pose"
    assert main(["mlm", "eval", str(out), "--lengths", "16,32", "--windows", "4", "--no-progress"]) == 0
    rows = pd.read_csv(out / "eval-mlm" / "results.csv")
    assert set(rows.loc[rows["method"] != "unigram", "test_positions"]) == {"standard"}  # standard at test time


def test_che_train_with_pose(tmp_path):
    out = tmp_path / "che"
    assert main(["train", "--task", "reverse_string", "--positions", "pose", "--position-option", "target=64",
                 "--train-length", "5", "--max-length", "10", "--steps", "4", "--batch-size", "4", "--layers", "1",
                 "--heads", "2", "--d-model", "16", "--eval-samples", "4", "--no-progress", "--out", str(out)]) == 0
    ev = json.loads((out / "eval.json").read_text())
    assert ev["positions"] == "pose" and ev["test_positions"] == "standard"


def test_che_refuses_a_target_below_the_training_sequence(tmp_path, capsys):
    # train length 40: 80 tokens with the output slots
    assert main(["train", "--positions", "pose", "--position-option", "target=50", "--steps", "1",
                 "--no-progress", "--out", str(tmp_path / "x")]) == 2
    assert "exceed the target length 50" in capsys.readouterr().err and not (tmp_path / "x").exists()


# -- sweeps and reports ----------------------------------------------------------------------------

def sweep_file(tmp_path, data) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("command,fixed", [
    ("train", {"steps": 10, "train_length": 5, "max_length": 10}),
    ("lm", {"steps": 10, "train_length": 16, "corpus": TINY[1]}),
    ("mlm", {"steps": 10, "train_length": 16, "corpus": TINY[1]}),
])
def test_sweep_files_accept_pose(tmp_path, command, fixed):
    grid = {"positions": ["pose"], "pe": ["rope", "alibi"], "position_options": [{}, {"target": 64}]}
    runs = expand(load_spec(sweep_file(tmp_path, {"command": command, "grid": grid, "fixed": fixed})))
    assert [r.config.positions for r in runs] == ["pose"] * 4
    assert [r.config.position_options for r in runs] == [{}, {"target": 64}] * 2


def test_sweep_file_refuses_pose_with_a_too_small_table(tmp_path):
    spec = load_spec(sweep_file(tmp_path, {"command": "lm", "grid": {"pe": ["rope", "learned"]},
                                           "fixed": {"positions": "pose", "max_position": 64, "train_length": 16,
                                                     "position_options": {"target": 128}, "corpus": TINY[1]}}))
    with pytest.raises(SweepSpecError, match="grid point {pe: learned}.*'learned' table has only max_position=64"):
        expand(spec)


def test_lm_run_ids_of_standard_runs_are_unchanged():
    # positions joined LMConfig after LM sweeps existed: a standard run's id must not move
    import hashlib
    from lengen.lm.config import LMConfig
    from lengen.sweeps.spec import run_id
    cfg = LMConfig()
    old = cfg.to_dict()
    del old["device"], old["positions"], old["position_options"]
    del old["model"]["layer_pe"], old["model"]["logit_scale_options"]  # added later still (issue 27)
    del old["init_from"]  # added with DroPE (issue 53)
    expected = hashlib.sha256(json.dumps(old, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
    assert run_id(cfg) == expected
    cfg.positions = "pose"
    assert run_id(cfg) != expected


def test_report_labels():
    che = pd.DataFrame({"run_id": ["a", "b", "c"], "task": ["parity_check"] * 3, "pe": ["rope"] * 3,
                        "positions": ["standard", "randomized", "pose"]})
    assert list(che_agg.add_variants(che)["variant"]) == ["rope", "r_rope", "rope (PoSE)"]
    assert lm_aggregate.variant_label("rope", None, {"positions": "pose"}) == "RoPE, PoSE"
    assert lm_aggregate.variant_label("rope", "yarn:factor=8", {"positions": "standard"}) == "RoPE + yarn:factor=8"
    lm = pd.DataFrame({"run_id": ["a", "b"], "pe": ["rope", "rope"], "positions": ["standard", "pose"],
                       "seed": [0, 0]})
    assert list(lm_aggregate.add_groups(lm)["group"]) == ["RoPE", "RoPE, PoSE"]
    mlm = pd.DataFrame({"run_id": ["a", "b"], "pe": ["rope", "rope"], "positions": ["standard", "pose"],
                        "seed": [0, 0]})
    assert list(mlm_variants(mlm)["variant"]) == ["standard", "PoSE"]
