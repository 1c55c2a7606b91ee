"""The two-pass FlexAttention of the remapping methods (lengen.kernels.flex_remap) against the naive
per-pair references of the method tests, at lengths spanning several of flex's 128-blocks.

On CPU the passes run eager flex_attention (forced: mode "force"); the CUDA tests (compiled flex,
bf16) run on a GPU machine."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from test_dca_string_longrope import r_dca, r_string, reference_map  # noqa: E402
from test_extrapolation_remap import (  # noqa: E402
    naive_attention, r_lambda, r_leaky, r_rerope, r_self_extend, r_sinks,
)

from lengen.extrapolation import RopeSpec, build_method  # noqa: E402
from lengen.kernels import flex_remap  # noqa: E402

D = 16
ROPE = RopeSpec(rotary_dim=D, base=10000.0, train_length=64)
T = 300


def _flex_runs_here():
    """None if eager flex_attention with a block mask and the log-sum-exp runs, else why not."""
    if not flex_remap.available():
        return "this torch has no torch.nn.attention.flex_attention"
    try:
        q = torch.randn(1, 1, 8, D)
        mask = flex_remap.create_block_mask(lambda b, h, i, j: j <= i, None, None, 8, 8, device="cpu")
        o, lse = flex_remap._flex(q, q, q, mask, D ** -0.5)
        assert lse.shape == (1, 1, 8)
    except Exception as e:  # noqa: BLE001
        return f"flex_attention does not run on this CPU build: {type(e).__name__}: {e}"
    return None


WHY_NOT = _flex_runs_here()
needs_flex = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def _map_fn(r_scalar):
    """A tensor r_fn(i, j) for naive_attention from a scalar per-pair reference (integer positions)."""
    def r_fn(i, j):
        maps = [reference_map(r_scalar, i[b, :, 0].tolist(), j[b, 0].tolist()) for b in range(i.shape[0])]
        return torch.stack(maps)
    return r_fn


# spec: (reference r(i, j) tensor function, logit factor, integer positions only)
CASES = {
    "rerope:window=150": (lambda i, j: r_rerope(i, j, 150), 1.0, False),
    "rerope:window=1000": (lambda i, j: r_rerope(i, j, 1000), 1.0, False),   # no far pair at all
    "leaky_rerope:window=100,factor=3": (lambda i, j: r_leaky(i, j, 100, 3), 1.0, False),
    "self_extend:group=3,window=140": (lambda i, j: r_self_extend(i, j, 3, 140), 1.0, False),
    "self_extend:group=4,window=64": (lambda i, j: r_self_extend(i, j, 4, 64), 1.0, False),
    "lambda:n_global=20,window=150": (lambda i, j: r_lambda(i, j, 20, 150), 1.0, False),
    "lambda:n_global=140,window=100": (lambda i, j: r_lambda(i, j, 140, 100), 1.0, False),
    "sinks:n_global=4,window=130": (lambda i, j: r_sinks(i, j, 4, 130), 1.0, False),
    "dca:chunk_size=200,local_size=40": (_map_fn(lambda i, j: r_dca(i, j, 200, 40)), 1.0, True),
    "dca:chunk_size=100,local_size=30": (_map_fn(lambda i, j: r_dca(i, j, 100, 30)), 1.0, True),
    # local_size > chunk_size / 2: the far query position is 2s - 1 (79, 39), below chunk_size
    "dca:chunk_size=100,local_size=60": (_map_fn(lambda i, j: r_dca(i, j, 100, 60)), 1.0, True),
    "dca:chunk_size=64,local_size=44": (_map_fn(lambda i, j: r_dca(i, j, 64, 44)), 1.0, True),
    "string:shift=160,window=20,attention_factor=1": (_map_fn(lambda i, j: r_string(i, j, 160, 20)), 1.0, True),
    "string:shift=90,window=30": (_map_fn(lambda i, j: r_string(i, j, 90, 30)), None, True),
}


def layouts(B=2):
    g = torch.Generator().manual_seed(5)
    sample = lambda: torch.randperm(2 * T + 100, generator=g)[:T].sort().values  # noqa: E731
    return {
        "arange": torch.arange(T)[None],
        "offset": torch.arange(T)[None] + 37,
        "per_batch": torch.stack([sample() for _ in range(B)]),
        "float": (torch.arange(T) * 0.75)[None],
    }


def qkv(B=2, H=2, seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, generator=g).to(device, dtype) for _ in range(3)]


@pytest.fixture(autouse=True)
def no_triton_kernel():
    """These tests are about the flex passes: the one-pass Triton kernel, which CUDA's auto mode
    tries first (tests/test_triton_remap.py), stays off here."""
    previous = flex_remap.triton_mode()
    flex_remap.set_triton_mode("off")
    yield
    flex_remap.set_triton_mode(previous)


@pytest.fixture
def force_flex():
    previous = flex_remap.mode()
    flex_remap.set_mode("force")
    yield
    flex_remap.set_mode(previous)


def reference(spec, q, k, v, pos):
    """float64 naive per-pair attention of the method's map."""
    method = build_method(spec, ROPE)
    r_fn, logit_factor, _ = CASES[spec]
    if logit_factor is None:
        logit_factor = method.factor ** 2
    inv_freq, af = method.rope_params(0)
    return naive_attention(q.double().cpu(), k.double().cpu(), v.double().cpu(), pos, pos, r_fn,
                           inv_freq, af * logit_factor ** 0.5, scale=D ** -0.5)


STEPS = {
    "prefill": (slice(None), slice(None)),
    "decode": (slice(-1, None), slice(None)),            # Tq = 1 against the whole cache
    "chunk_mid": (slice(-70, -20), slice(None, -20)),    # a chunk of queries with the keys so far
}


@needs_flex
@pytest.mark.parametrize("layout", list(layouts()))
@pytest.mark.parametrize("spec", list(CASES))
def test_flex_matches_naive_reference(spec, layout, force_flex, monkeypatch):
    if CASES[spec][2] and layout == "float":
        pytest.skip("the per-pair reference of this method takes integer positions")
    calls = []
    real = flex_remap.attend
    monkeypatch.setattr(flex_remap, "attend", lambda *a: calls.append(1) or real(*a))
    method = build_method(spec, ROPE)
    q, k, v = qkv()
    pos = layouts()[layout]
    ref = reference(spec, q, k, v, pos)
    for name, (rows, keys) in STEPS.items():
        out = method.attend(q[:, :, rows], k[:, :, keys], v[:, :, keys], pos[:, rows], pos[:, keys])
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.double(), ref[:, :, rows], atol=1e-4, rtol=1e-4, msg=name)
    assert len(calls) == len(STEPS)  # every step went through the flex passes


@needs_flex
@pytest.mark.parametrize("spec", ["yarn:factor=4+rerope:window=150+logn", "ntk:factor=2+self_extend:group=3,window=140",
                                  "yarn:factor=2+dca:chunk_size=150,local_size=20,original_length=100"])
def test_flex_equals_blockwise_composed_and_grouped_query(spec, force_flex):
    """Frequency methods, log-n, DCA's temperature and grouped-query k / v: flex == blockwise."""
    method = build_method(spec, ROPE)
    q, _, _ = qkv(H=4)
    k, v, _ = qkv(H=2, seed=1)
    pos = torch.arange(T)[None]
    out = method.attend(q, k, v, pos, pos)
    flex_remap.set_mode("off")
    ref = method.attend(q, k, v, pos, pos)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@needs_flex
def test_block_masks_visit_about_one_causal_attention(force_flex):
    """Each pass keeps only the blocks it needs: together about the blocks of one causal attention."""
    n = 640
    method = build_method("rerope:window=128", ROPE)
    q = torch.randn(1, 1, n, D)
    pos = torch.arange(n)[None]
    inv_freq, af = method.rope_params(0)
    near, far = flex_remap.block_masks(method.flex_pieces(q, q, pos, pos, inv_freq, af, 1.0))

    def blocks(m):
        return int(m.kv_num_blocks.sum()) + int(m.full_kv_num_blocks.sum())

    nb = n // flex_remap.BLOCK_SIZE
    causal = nb * (nb + 1) // 2
    assert blocks(near) <= 2 * nb                      # the band: a diagonal and one block left of it
    assert blocks(near) + blocks(far) <= causal + nb   # only the band's edge blocks are visited twice
    assert blocks(far) < causal


@needs_flex
def test_block_masks_are_cached_per_method_and_positions(force_flex, monkeypatch):
    """Two methods that alternate on the same positions (a benchmark's rounds, Gemma's two layer
    types) build their masks once each; new positions, or positions changed in place, build anew;
    past MASK_CACHE_SIZE entries the oldest is rebuilt. Cached or not, the output is the same."""
    built = []
    real_build = flex_remap._build_block_masks
    monkeypatch.setattr(flex_remap, "_build_block_masks", lambda pieces: built.append(pieces.key) or real_build(pieces))
    flex_remap.clear_mask_cache()
    q, k, v = qkv()
    pos = torch.arange(T)[None]
    methods = [build_method(s, ROPE) for s in ("rerope:window=150", "self_extend:group=4,window=32")]
    first = [m.attend(q, k, v, pos, pos) for m in methods]
    for _ in range(2):
        for m, out in zip(methods, first):
            torch.testing.assert_close(m.attend(q, k, v, pos, pos), out, rtol=0, atol=0)
    assert len(built) == 2
    other = torch.arange(T)[None]  # equal values, another tensor: its masks are not assumed
    methods[0].attend(q, k, v, other, other)
    assert len(built) == 3
    pos[0, -1] = T + 5  # changed in place: the cached masks no longer describe it
    moved = methods[0].attend(q, k, v, pos, pos)
    assert len(built) == 4
    flex_remap.set_mode("off")
    torch.testing.assert_close(moved, methods[0].attend(q, k, v, pos, pos), atol=1e-5, rtol=1e-5)
    flex_remap.set_mode("force")
    windows = range(100, 100 + 10 * (flex_remap.MASK_CACHE_SIZE + 1), 10)
    many = [build_method(f"rerope:window={w}", ROPE) for w in windows]
    for m in many + many[:1]:
        m.attend(q, k, v, other, other)
    assert len(built) == 4 + len(many) + 1  # the first was pushed out by the others


def test_cpu_default_does_not_use_flex(monkeypatch):
    """Auto mode on CPU tensors: the blockwise path, never a flex call (no compile for CPU users)."""
    monkeypatch.setattr(flex_remap, "_mode", "auto")
    monkeypatch.setattr(flex_remap, "attend", lambda *a: pytest.fail("flex used on CPU"))
    method = build_method("rerope:window=50", ROPE)
    q, k, v = qkv(B=1)
    pos = torch.arange(T)[None]
    assert method.attend(q, k, v, pos, pos).shape == q.shape
    assert not flex_remap.applies(q)


def test_auto_mode_falls_back_once_flex_fails(monkeypatch, caplog):
    monkeypatch.setattr(flex_remap, "_mode", "auto")
    monkeypatch.setattr(flex_remap, "_failed", None)

    def broken():
        raise RuntimeError("no kernel")

    with caplog.at_level(logging.WARNING, logger="lengen.kernels"):
        assert flex_remap.try_attend(broken, torch.zeros(1)) is None
    assert "no kernel" in caplog.text
    assert flex_remap._failed is not None
    flex_remap.set_mode("force")
    with pytest.raises(RuntimeError):
        flex_remap.try_attend(broken, torch.zeros(1))


def test_env_and_modes(monkeypatch):
    for value, expected in [("1", "force"), ("off", "off"), ("auto", "auto"), ("", "auto")]:
        monkeypatch.setenv("LENGEN_FLEX_REMAP", value)
        assert flex_remap._mode_from_env() == expected
    with pytest.raises(ValueError):
        flex_remap.set_mode("sometimes")


# ---- CUDA: compiled flex, half precision (run on a GPU machine) -------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("spec", list(CASES))
def test_cuda_half_precision_matches_float32_reference(spec, dtype):
    """The default (auto) path on CUDA: compiled two-pass flex in bf16 / fp16 with float32
    accumulation, against the float64 naive reference of the same (rounded) inputs."""
    assert flex_remap.mode() == "auto" and flex_remap.applies(torch.zeros(1, device="cuda"))
    method = build_method(spec, ROPE)
    q, k, v = qkv(dtype=dtype, device="cuda")
    pos = torch.arange(T, device="cuda")[None]
    ref = reference(spec, q, k, v, pos.cpu())
    for name, (rows, keys) in STEPS.items():
        out = method.attend(q[:, :, rows], k[:, :, keys], v[:, :, keys], pos[:, rows], pos[:, keys])
        assert out.dtype == dtype
        assert flex_remap._failed is None, flex_remap._failed
        tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
        torch.testing.assert_close(out.double().cpu(), ref[:, :, rows], atol=tol, rtol=tol, msg=name)


@cuda
@pytest.mark.parametrize("spec", ["rerope:window=512", "self_extend:group=8,window=512", "lambda",
                                  "dca:chunk_size=1536,local_size=256", "string:shift=700"])
def test_cuda_long_flex_equals_blockwise(spec):
    """At 4096 tokens (8 heads x 64, bf16) the flex path agrees with the float32 blockwise path."""
    rope = RopeSpec(rotary_dim=64, base=10000.0, train_length=2048)
    method = build_method(spec, rope)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, 4096, 64, generator=g).cuda() for _ in range(3))
    pos = torch.arange(4096, device="cuda")[None]
    out = method.attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), pos, pos)
    assert flex_remap._failed is None, flex_remap._failed
    previous = flex_remap.mode()
    flex_remap.set_mode("off")
    try:
        ref = method.attend(q, k, v, pos, pos)
    finally:
        flex_remap.set_mode(previous)
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)


@pytest.mark.skipif(not flex_remap.available(), reason="this torch has no FlexAttention")
@pytest.mark.parametrize("method_name,specs", [
    ("rerope", ["rerope:window=150", "rerope:window=170"]),
    ("lambda", ["lambda:n_global=20,window=150", "lambda:n_global=140,window=100"]),
])
def test_predicates_compile_for_each_option_value(method_name, specs):
    """Compiled block masks (what CUDA runs) for one method at several option values: after the
    second value torch.compile makes a captured Python float dynamic, and lowering the predicate
    then failed ('unbacked_bindings', seen on an H100 2026-11-27, reproduced on the CPU). Each
    compiled mask must equal the eager one."""
    from torch.nn.attention.flex_attention import flex_attention

    q = torch.randn(1, 1, T, D)
    pos = torch.arange(T)[None]
    for spec in specs:
        method = build_method(spec, ROPE)
        inv_freq, af = method.rope_params(0)
        pieces = method.flex_pieces(q, q, pos, pos, inv_freq, af, 1.0)
        p = pos.double()
        extra = None if pieces.key_extra is None else pieces.key_extra.double()
        for pred in (pieces.near, pieces.far):
            def mod(b, h, i, j, pred=pred):
                return pred(p[0, i], p[0, j], None if extra is None else extra[0, j])
            masks = [flex_remap.block_mask_builder(compiled)(mod, None, None, T, T, device="cpu",
                                                             BLOCK_SIZE=flex_remap.BLOCK_SIZE)
                     for compiled in (False, True)]
            assert torch.equal(masks[0].kv_num_blocks, masks[1].kv_num_blocks), spec
            assert torch.equal(masks[0].full_kv_num_blocks, masks[1].full_kv_num_blocks), spec
            if not bool(masks[0].kv_num_blocks.any()):
                continue  # no pair of this kind (rerope's far at this length): flex is not called
            with torch.no_grad():  # the CPU backend compiles flex for inference only
                eager = flex_attention(q, q, q, block_mask=masks[0])
                compiled = _compiled_flex(q, q, q, block_mask=masks[1])
            torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)


_compiled_flex = torch.compile(flex_remap.flex_attention) if flex_remap.available() else None


@needs_flex
def test_flex_runs_under_inference_mode(force_flex):
    """Inference tensors have no version counter; the block-mask cache keyed on it raised, and
    auto mode then fell back to blockwise for good (hf_forward_speed on an H100, 2026-11-27)."""
    method = build_method("rerope:window=150", ROPE)
    q, k, v = qkv()
    with torch.inference_mode():
        pos = torch.arange(T)[None]
        out = method.attend(q, k, v, pos, pos)
    flex_remap.set_mode("off")
    torch.testing.assert_close(out, method.attend(q, k, v, pos, pos), atol=1e-5, rtol=1e-5)
