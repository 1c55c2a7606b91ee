"""The contract of lengen/encodings/base.py, checked for every registered encoding on every path
that runs one: a new `ENCODINGS.add` line is tested here without editing this file, and an
encoding that breaks any path fails here.

For each name in ENCODINGS (the parametrizations are read from the registries at collection):
  * a tiny CHE model trains through `lengen.che.loop.train` and writes its run files;
  * grouped = solo: `train_group` over two configs differing in seed and lr gives each member the
    losses, weights, logits and evaluation of training it alone (dropout 0 and 0.1): the hooks
    run under torch.func.vmap there, so this is the vmap-safety check;
  * a DecoderLM decoding token by token (and in chunks) with its KV cache gives the logits of
    one full forward pass;
  * a masked LM and an arithmetic model (standard and coupled ids) train;
  * every position sampler trains it, and the positions past a short table.
A path that does not apply must be refused with one line naming the encoding (a LengenError,
before training), never a crash: which paths refuse is read from what the encoding declares
(`accepts_float_positions`, `causal_past_only`, `position_table_size`, which hooks it overrides)
where it declares something, and discovered by trying where it declares nothing.
Beside them: every sampler x rope and t5 grouped = solo, every logit scaling solo and
grouped = solo, and encodings that break the contract on purpose (registered for one test) to
show that the checks fail on them.
"""

import json
import math

import pytest
import torch

from lengen import kernels
from lengen.arith.options import arith_config_from_options
from lengen.arith.train import train_arith
from lengen.che.config import TrainConfig
from lengen.che.group import train_group
from lengen.che.loop import train
from lengen.che.setup import build_run
from lengen.encodings import ENCODINGS, build_encoding
from lengen.encodings.base import PositionalEncoding, relative_distance
from lengen.errors import LengenError
from lengen.lm.model import DecoderLM
from lengen.mlm.config import MLMConfig
from lengen.mlm.train import train_mlm
from lengen.models import ModelConfig
from lengen.models.logit_scaling import LOGIT_SCALES
from lengen.positions import SAMPLERS, build_sampler
from test_group_training import null_direction, outputs, weight_diffs  # the comparison of grouped and solo runs
from tiny_lm import CORPUS

ENCODING_NAMES = ENCODINGS.names()
SAMPLER_NAMES = SAMPLERS.names()
#: the members of a group: they differ in seed and learning rate (test_group_training's first two)
SEEDS_LRS = [(0, 3e-4), (1, 1e-3)]
#: the hooks an encoding may override (base.py); one that overrides none reads no positions
HOOKS = ("embed", "prepare", "transform_qk", "bias", "qk_bias")


# -- configs ------------------------------------------------------------------------------------------
def che_cfg(pe, seed=0, lr=1e-3, positions="standard", model=None, **kw) -> TrainConfig:
    """The smallest CHE run that still has two layers (per-layer tables), two heads and a head dim
    of 8 (p_rope keeps one of its 4 frequency pairs), 3 steps of lengths 1..5 (10 tokens: FoPE
    keeps a frequency) and an evaluation one length beyond."""
    m = dict(num_layers=2, num_heads=2, d_model=16, d_ff=32, dropout=0.0, pe=pe, max_position=64)
    m.update(model or {})
    base = dict(task="reverse_string", model=ModelConfig(**m), positions=positions, steps=3, batch_size=4,
                train_length=5, max_length=6, eval_samples=4, lr=lr, seed=seed, checkpoint_every=3, log_every=1,
                device="cpu")
    base.update(kw)
    return TrainConfig(**base)


def group_cfgs(pe, dropout=0.0, model=None, **kw):
    """A group's configs (seeds and learning rates of SEEDS_LRS), as a function: a run fills in
    its config, so the solo runs get fresh ones."""
    return lambda: [che_cfg(pe, seed, lr, model={"dropout": dropout, **(model or {})}, **kw)
                    for seed, lr in SEEDS_LRS]


# -- what an encoding declares ----------------------------------------------------------------------------
def sampler_refused(cfg: TrainConfig) -> bool:
    """Whether the run's encoding declares that it cannot read the run's positions: floats from a
    float sampler without `accepts_float_positions`, or positions beyond its `position_table_size`
    (as far as the sampler says it may draw them, for the longest evaluation sequence)."""
    enc = build_encoding(cfg.model)
    sampler = build_sampler(cfg.positions, max_position=cfg.model.max_position)
    rows = enc.position_table_size
    longest = 2 * cfg.max_length  # reverse_string: the input and as many output slots
    return ((not sampler.integer and not enc.accepts_float_positions)
            or (rows is not None and sampler.position_bound(longest) > rows))


def reads_positions(pe: str) -> bool:
    """Whether the encoding overrides any hook (NoPE overrides none)."""
    cls = ENCODINGS.get(pe)
    return any(getattr(cls, h) is not getattr(PositionalEncoding, h) for h in HOOKS)


# -- outcomes -----------------------------------------------------------------------------------------
def outcome(pe: str, run, out=None) -> str | None:
    """None when `run()` completes; the message when it refuses with a LengenError, which must be
    one line naming the encoding, raised before anything is written in the run directory `out`.
    Any other exception propagates: a crash fails the test."""
    try:
        run()
    except LengenError as e:
        message = str(e)
        assert "\n" not in message.strip(), f"a refusal of {pe!r} is one line: {message!r}"
        assert pe in message, f"a refusal names the encoding {pe!r}: {message!r}"
        assert out is None or not out.exists(), f"{out} written before the refusal: {message}"
        return message
    return None


def check_outcome(pe: str, run, refused: bool | None, out=None) -> str | None:
    """`outcome`, and that it is the expected one: `refused` True/False where the encoding declares
    it, None where it declares nothing (then either is fine, a refusal in one line)."""
    message = outcome(pe, run, out)
    if refused is not None:
        assert (message is not None) == refused, (
            f"{pe!r} should {'be refused' if refused else 'train'}, got {message or 'trained'}")
    return message


# -- CHE runs and the grouped = solo comparison (tests/test_group_training.py's) -----------------------
RUN_FILES = ("config.json", "metrics.jsonl", "checkpoint.pt", "eval.json", "accuracy.png")


def losses(run_dir):
    return [(r["step"], r["loss"]) for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]


def assert_trained_run(out, cfg, record):
    for name in RUN_FILES:
        assert (out / name).exists(), name
    ev = json.loads((out / "eval.json").read_text())
    assert set(ev["accuracy_by_length"]) == {str(n) for n in range(1, cfg.max_length + 1)}
    assert ev["accuracy_by_length"] == record["accuracy_by_length"]
    rows = losses(out)
    assert [step for step, _ in rows] == list(range(1, cfg.steps + 1))
    assert all(math.isfinite(loss) for _, loss in rows)


def assert_group_equals_solo(make_cfgs, tmp_path):
    """Each member of `train_group(make_cfgs())` ends where `train` alone takes it, with
    tests/test_group_training.py's comparison and tolerances: weights within 1e-4 (1e-3 for FIRE,
    whose near-null MLP directions feed rounding back into the model; null directions left out),
    logits on fixed batches within the same, the same losses (1e-4) and evaluation."""
    cfgs = make_cfgs()
    # one bucket: every step pads each member to the step's longest (padded keys, positions 0)
    records = train_group(cfgs, [tmp_path / f"g{i}" for i in range(len(cfgs))], progress=False, buckets=1)
    for i, cfg in enumerate(make_cfgs()):
        group, alone = tmp_path / f"g{i}", tmp_path / f"solo{i}"
        solo = train(cfg, alone, progress=False)
        tol = 1e-3 if cfg.model.pe.startswith("fire") else 1e-4
        diffs = {k: d for k, d in weight_diffs(group, alone).items() if not null_direction(cfg.model.pe, k)}
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] <= tol, (i, worst, diffs[worst])
        for x, y in zip(outputs(group, cfg), outputs(alone, cfg)):
            torch.testing.assert_close(x, y, atol=tol, rtol=0)
        assert records[i]["accuracy_by_length"] == solo["accuracy_by_length"]
        assert records[i]["group_size"] == len(cfgs) and "group_size" not in solo
        g, s = losses(group), losses(alone)
        assert [step for step, _ in g] == [step for step, _ in s]
        assert [loss for _, loss in g] == pytest.approx([loss for _, loss in s], abs=1e-4)


def check_grouped(pe, make_cfgs, tmp_path):
    """Grouped = solo, or, where the encoding refuses the run alone, the group refused the same way."""
    if outcome(pe, lambda: build_run(make_cfgs()[0])) is not None:
        outs = [tmp_path / f"g{i}" for i in range(len(SEEDS_LRS))]
        check_outcome(pe, lambda: train_group(make_cfgs(), outs, progress=False), True, tmp_path / "g0")
    else:
        assert_group_equals_solo(make_cfgs, tmp_path)


# -- CHE ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pe", ENCODING_NAMES)
def test_trains_a_che_model(tmp_path, pe):
    cfg, out, record = che_cfg(pe), tmp_path / "run", {}
    if check_outcome(pe, lambda: record.update(train(cfg, out, progress=False)), None, out) is None:
        assert_trained_run(out, cfg, record)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("pe", ENCODING_NAMES)
def test_grouped_training_equals_solo(tmp_path, pe, dropout):
    check_grouped(pe, group_cfgs(pe, dropout), tmp_path)


@pytest.mark.parametrize("sampler", SAMPLER_NAMES)
@pytest.mark.parametrize("pe", ENCODING_NAMES)
def test_every_sampler_trains_or_is_refused_in_one_line(tmp_path, pe, sampler):
    cfg, out = che_cfg(pe, positions=sampler), tmp_path / "run"
    check_outcome(pe, lambda: train(cfg, out, progress=False), sampler_refused(cfg), out)


@pytest.mark.parametrize("pe", ENCODING_NAMES)
def test_positions_past_a_position_table_are_refused_in_one_line(tmp_path, pe):
    # evaluation sequences of 12 tokens and max_position 8: only an encoding with a table of
    # max_position rows cannot read them
    cfg, out = che_cfg(pe, model={"max_position": 8}), tmp_path / "run"
    check_outcome(pe, lambda: train(cfg, out, progress=False), sampler_refused(cfg), out)


@pytest.mark.parametrize("pe", ["rope", "t5"])  # RoPE, and a bucketed table that takes integers only
@pytest.mark.parametrize("sampler", SAMPLER_NAMES)
def test_every_sampler_trains_grouped_like_solo(tmp_path, sampler, pe):
    check_grouped(pe, group_cfgs(pe, positions=sampler), tmp_path)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", LOGIT_SCALES)
def test_every_logit_scaling_trains_alone_and_grouped_like_solo(tmp_path, scale, causal):
    # a RoPE layer and a NoPE layer: llama4_temperature scales NoPE layers only; dropout 0.1
    model = {"logit_scale": scale, "layer_pe": ["rope", "none"], "causal": causal}
    cfg = che_cfg("rope", model=model)
    assert_trained_run(tmp_path / "alone", cfg, train(cfg, tmp_path / "alone", progress=False))
    assert_group_equals_solo(group_cfgs("rope", 0.1, model=model), tmp_path / "group")


@pytest.mark.parametrize("scale", LOGIT_SCALES)
def test_every_logit_scaling_with_rope_layers_only_trains_or_is_refused_in_one_line(tmp_path, scale):
    out = tmp_path / "run"
    try:
        train(che_cfg("rope", model={"logit_scale": scale}), out, progress=False)
    except LengenError as e:  # llama4_temperature: no NoPE layer to scale
        assert "\n" not in str(e) and scale in str(e) and not out.exists(), str(e)


# -- decoder LM with a KV cache -------------------------------------------------------------------------
T = 10
ONE_BY_ONE = [(t, t + 1) for t in range(T)]
CHUNKS = [(0, 4), (4, 5), (5, 9), (9, 10)]


def decoder(pe) -> DecoderLM:
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=2, num_heads=2, d_model=16, d_ff=32, dropout=0.0, norm="pre", causal=True, pe=pe,
                      embed_scale=False, train_tokens=T, max_position=64)
    model = DecoderLM(cfg, 11).eval()
    with torch.no_grad():  # every weight away from its init (CoPE's table starts at 0), so positions show
        g = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    return model


@torch.no_grad()
def assert_cache_equals_full(model):
    """Tokens fed one by one, then in chunks, through a KV cache: the logits of one full forward
    pass over all of them (causal: a token's logits do not depend on later tokens)."""
    x = torch.randint(0, 11, (2, T), generator=torch.Generator().manual_seed(2))
    full = model(x)
    for chunks in (ONE_BY_ONE, CHUNKS):
        cache = model.new_cache()
        for a, b in chunks:
            got = model(x[:, a:b], cache=cache)
            torch.testing.assert_close(got, full[:, a:b], atol=2e-5, rtol=1e-4, msg=lambda m: f"tokens {a}..{b}: {m}")


@pytest.mark.parametrize("pe", ENCODING_NAMES)
def test_decoding_with_a_kv_cache_equals_the_full_forward(pe):
    model = []
    if check_outcome(pe, lambda: model.append(decoder(pe)), None) is None:
        assert_cache_equals_full(model[0])


# -- masked LM, arithmetic ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus_cache(tmp_path_factory):
    """The corpus tokens cached in a folder of this module's (as test_mlm's private_cache), with
    the attention kernel loaded from the suite's shared build first (building it costs seconds)."""
    kernels.available()
    with pytest.MonkeyPatch.context() as m:
        m.setenv("LENGEN_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.mark.parametrize("pe", ENCODING_NAMES)
def test_trains_a_masked_lm(tmp_path, pe, corpus_cache):
    cfg = MLMConfig(model=ModelConfig(num_layers=1, num_heads=2, d_model=16, d_ff=32, dropout=0.0, norm="pre",
                                      causal=False, pe=pe, embed_scale=False, max_position=64),
                    corpus=CORPUS, train_length=16, steps=2, batch_size=4, warmup=1, checkpoint_every=2,
                    log_every=1, val_windows=2, device="cpu")
    out, record = tmp_path / "run", {}
    if check_outcome(pe, lambda: record.update(train_mlm(cfg, out, progress=False, note=None)), None, out) is None:
        ev = json.loads((out / "eval.json").read_text())
        assert math.isfinite(ev["val_bpb"]) and ev["steps"] == 2 and ev["val_bpb"] == record["val_bpb"]


def arith_cfg(pe, positions):
    """tests/test_arith_train.py's tiny run, 2 steps."""
    return arith_config_from_options({
        "pe": pe, "positions": positions, "layers": 1, "d_model": 16, "heads": 2, "d_ff": 32, "steps": 2,
        "batch_size": 8, "log_every": 1, "checkpoint_every": 2, "eval_samples": 2, "test_digits": 3,
        "train_digits": 2, "warmup": 1, "device": "cpu"})


@pytest.mark.parametrize("pe", ENCODING_NAMES)
def test_trains_an_arithmetic_model_with_standard_and_coupled_ids(tmp_path, pe):
    refused = {}
    for positions in ("standard", "coupled"):
        out, record = tmp_path / positions, {}
        # coupled ids do not grow along the sequence (a key may have a larger id than its query):
        # refused by an encoding whose causal form assumes they never do and by one that reads no
        # positions; otherwise as the standard ids are
        expected = None if positions == "standard" else (
            ENCODINGS.get(pe).causal_past_only or not reads_positions(pe) or refused["standard"] is not None)
        refused[positions] = check_outcome(
            pe, lambda: record.update(train_arith(arith_cfg(pe, positions), out, progress=False, note=None)),
            expected, out)
        if refused[positions] is None:
            assert (out / "eval.json").exists() and (out / "checkpoint.pt").exists()
            assert len(record["cells"]) == 9 and record["steps"] == 2 and math.isfinite(record["train_loss"])


# -- encodings that break the contract, registered for one test: the checks above fail on them ----------
class _Penalty(PositionalEncoding):
    """A learned per-head linear distance penalty (ALiBi with trained slopes), built in `prepare`
    in a tensor from `allocate(like)`: `like.new_empty` follows vmap (contract-safe), a bare
    `torch.empty` does not."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.slope = torch.nn.Parameter(0.5 * torch.rand(cfg.num_heads))

    @staticmethod
    def allocate(like):
        return like.new_empty(like.shape)

    def prepare(self, pos_q, pos_k):
        dist = relative_distance(pos_q, pos_k).abs()      # [B|1, 1, Tq, Tk]
        out = self.allocate(dist)
        out.copy_(dist)
        return out

    def bias(self, layer, dist):
        return -self.slope[:, None, None] * dist


class _WritesIntoAFreshTensor(_Penalty):
    """Writes a (batched, under vmap) distance into a tensor allocated without its input."""

    @staticmethod
    def allocate(like):
        return torch.empty(like.shape)


class _Gain(torch.autograd.Function):
    """x * g with a hand-written backward and no vmap rule."""

    @staticmethod
    def forward(ctx, x, g):
        ctx.save_for_backward(x, g)
        return x * g

    @staticmethod
    def backward(ctx, grad):
        x, g = ctx.saved_tensors
        return grad * g, (grad * x).sum_to_size(g.shape)


class _FunctionWithoutVmapRule(_Penalty):
    """Scales the queries by a learned per-head gain through an autograd.Function that has no
    vmap rule."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.gain = torch.nn.Parameter(1 + 0.1 * torch.rand(cfg.num_heads, 1, 1))

    def transform_qk(self, layer, state, q, k):
        return _Gain.apply(q, self.gain), k


class _ReadsValuesInAHook(_Penalty):
    """Reads a position value into Python inside a hook (a check that belongs in check_positions)."""

    def prepare(self, pos_q, pos_k):
        if int(pos_k.max()) >= self.cfg.max_position:
            raise LengenError("positions past max_position")
        return super().prepare(pos_q, pos_k)


class _SeedDrawnBuffer(_Penalty):
    """Draws fixed per-head slopes from the seed into a buffer: a group runs every member with the
    first member's buffers (only parameters are stacked), so the second member trains another model."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("fixed", torch.rand(cfg.num_heads, 1, 1))

    def bias(self, layer, dist):
        return super().bias(layer, dist) - self.fixed * dist


class _IndexDistances(_Penalty):
    """Distances from token indices, not from the positions it is given: the same in a full
    forward from 0, wrong for the new tokens of a KV cache (their indices restart at 0)."""

    def prepare(self, pos_q, pos_k):
        i, j = torch.arange(pos_q.shape[-1]), torch.arange(pos_k.shape[-1])
        return (i[:, None] - j[None, :]).abs().float()


class _Table(PositionalEncoding):
    """A learned absolute table that declares what it reads: integer positions below its rows."""

    accepts_float_positions = False

    def __init__(self, cfg):
        super().__init__(cfg)
        self.table = torch.nn.Embedding(cfg.max_position, cfg.d_model)

    @property
    def position_table_size(self):
        return self.table.num_embeddings

    def embed(self, x, pos):
        return x + self.table(pos)


class _UndeclaredTable(_Table):
    """The same table declaring nothing: float positions reach the lookup and crash it."""

    accepts_float_positions = True
    position_table_size = None


class _InterpolatedTable(_Table):
    """A table read at float positions by linear interpolation between its rows: it accepts
    floats and has a table, so a sampler whose floats have no bound must be refused."""

    accepts_float_positions = True

    def embed(self, x, pos):
        lo = pos.floor().long().clamp(0, self.table.num_embeddings - 1)
        hi = (lo + 1).clamp(max=self.table.num_embeddings - 1)
        return x + torch.lerp(self.table(lo), self.table(hi), (pos - pos.floor())[..., None].to(x.dtype))


@pytest.fixture
def register():
    """register(cls) -> the name `cls` is added under, the way a new encoding is (ENCODINGS.add);
    removed again after the test."""
    added = []

    def add(cls):
        name = "contract" + cls.__name__.lower()
        ENCODINGS.add(name, cls)
        added.append(name)
        return name

    yield add
    for name in added:
        del ENCODINGS._items[name]  # the registry has no public removal: entries are permanent


def test_a_vmap_safe_encoding_added_the_usual_way_passes(tmp_path, register):
    pe = register(_Penalty)
    test_trains_a_che_model(tmp_path, pe)
    for dropout in (0.0, 0.1):
        test_grouped_training_equals_solo(tmp_path / f"group{dropout}", pe, dropout)
    test_decoding_with_a_kv_cache_equals_the_full_forward(pe)


@pytest.mark.parametrize("cls,error,match", [
    (_WritesIntoAFreshTensor, RuntimeError, "vmap: inplace"),
    (_FunctionWithoutVmapRule, RuntimeError, "autograd.Function with functorch transforms"),
    (_ReadsValuesInAHook, RuntimeError, r"vmap: .*\.item\(\)"),
    (_SeedDrawnBuffer, AssertionError, None),   # no error: the second member's weights drift away
])
def test_an_encoding_that_is_not_vmap_safe_fails_the_grouped_check(tmp_path, register, cls, error, match):
    pe = register(cls)
    test_trains_a_che_model(tmp_path / "alone", pe)  # alone it trains
    with pytest.raises(error, match=match):
        test_grouped_training_equals_solo(tmp_path / "group", pe, 0.0)


def test_an_encoding_whose_cache_path_differs_fails_the_cache_check(tmp_path, register):
    pe = register(_IndexDistances)
    test_trains_a_che_model(tmp_path, pe)
    with pytest.raises(AssertionError, match="tokens"):
        test_decoding_with_a_kv_cache_equals_the_full_forward(pe)


def test_an_encoding_that_crashes_on_float_positions_fails_the_sampler_check(tmp_path, register):
    floats = next(name for name in SAMPLER_NAMES if not build_sampler(name).integer)
    pe = register(_UndeclaredTable)
    with pytest.raises(RuntimeError, match="indices"):
        test_every_sampler_trains_or_is_refused_in_one_line(tmp_path / "crash", pe, floats)
    pe = register(_Table)  # it declares accepts_float_positions = False: refused in one line
    test_every_sampler_trains_or_is_refused_in_one_line(tmp_path / "refused", pe, floats)


def test_a_table_that_reads_floats_is_refused_an_unbounded_float_sampler(tmp_path, register):
    """equal_mean's floats have no bound (exponential gaps): a table that interpolates floats is
    refused in one line, not with the OverflowError that formatting int(inf) once raised."""
    pe = register(_InterpolatedTable)
    test_every_sampler_trains_or_is_refused_in_one_line(tmp_path, pe, "equal_mean")
