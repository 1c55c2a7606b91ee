"""Fused CPU attention for small head dims: the build, the autograd Function and the dispatch.

`attention(q, k, v, bias=None, causal=False, scale=None)` computes
F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale), with `causal` meaning the
Tq queries are the last Tq of the Tk keys (key j visible to query i iff j <= i + Tk - Tq).

It runs the C++ kernel in small_attention.cpp when it applies (CPU, float32, 4-D q/k/v with
equal batch and head sizes, head dims <= 256; q/k dim may differ from v's) and torch's SDPA
otherwise. The kernel is compiled once per machine with the system C++ compiler into
$LENGEN_CACHE/kernels (default ~/.cache/lengen/kernels/<torch version>-<hash>), under a file lock,
and loaded with ctypes (no torch headers, so a cold build takes seconds). If it cannot be built,
SDPA is used and the reason logged once. LENGEN_KERNELS=0 turns the kernel off; so does
set_enabled(False).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

try:
    import fcntl
except ImportError:  # no POSIX locks: concurrent kernel builds just race to the same atomic rename
    fcntl = None

import torch
import torch.nn.functional as F

from lengen.io import cache_root

log = logging.getLogger("lengen.kernels")

SOURCE = Path(__file__).with_name("small_attention.cpp")
MAX_HEAD_DIM = 256
CXXFLAGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-std=c++17", "-shared", "-fPIC"]
# tried in order until one compiles: this CPU's vector units and OpenMP threads; then without
# -march=native (a compiler that does not know it); then single-threaded (no OpenMP)
VARIANTS = [["-march=native", "-fopenmp"], ["-fopenmp"], []]

_enabled = os.environ.get("LENGEN_KERNELS", "1").strip().lower() not in ("0", "false", "no", "off")
_lib = None
_lib_error: str | None = None
_lib_lock = threading.Lock()
_logged: set[str] = set()


def set_enabled(flag: bool) -> None:
    """Use the kernel (True) or always torch's SDPA (False). LENGEN_KERNELS=0 sets False at import."""
    global _enabled
    _enabled = bool(flag)


def is_enabled() -> bool:
    return _enabled


def _log_once(reason: str) -> None:
    if reason not in _logged:
        _logged.add(reason)
        log.info("lengen.kernels: using torch SDPA (%s)", reason)


# -- build and load -----------------------------------------------------------------------------

def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_fingerprint() -> str:
    """-march=native code must not be reused on another CPU (a shared home directory)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def build_dir() -> Path:
    cxx = _compiler() or "none"
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), repr((CXXFLAGS, VARIANTS)).encode(), cxx.encode(),
                 _cpu_fingerprint().encode(), platform.machine().encode()):
        key.update(part)
        key.update(b"\0")
    return cache_root() / "kernels" / f"{torch.__version__}-{key.hexdigest()[:16]}"


def build(verbose: bool = False) -> Path:
    """Compile the kernel (once; later calls find it in the cache) and return the library path."""
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX)")
    out_dir = build_dir()
    lib_path = out_dir / "small_attention.so"
    if lib_path.exists():
        return lib_path
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "build.lock", "w") as lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same library
        if lib_path.exists():
            return lib_path
        log.info("lengen.kernels: compiling %s into %s (once per machine)", SOURCE.name, out_dir)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
        os.close(fd)
        errors = []
        try:
            for extra in VARIANTS:
                cmd = [cxx, *CXXFLAGS, *extra, str(SOURCE), "-o", tmp]
                if verbose:
                    print(" ".join(cmd), file=sys.stderr)
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode == 0:
                    break
                errors.append(f"$ {' '.join(cmd)}\n{proc.stderr[-2000:]}")
            else:
                raise RuntimeError(f"compiling {SOURCE.name} failed:\n" + "\n".join(errors))
            if errors:
                log.warning("lengen.kernels: built with flags %s only (%s failed)", extra or "(none)", VARIANTS[0])
            os.replace(tmp, lib_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return lib_path


class _Args(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in ("B", "H", "Tq", "Tk", "D", "DV", "causal", "nthreads",
                                             "accum_bias_over_batch")]
    _fields_ += [("scale", ctypes.c_double)]
    for _n in ("q", "k", "v", "bias", "o"):
        _fields_ += [(_n, ctypes.c_void_p), ("s" + _n, ctypes.c_int64 * 3)]
    _fields_ += [("lse", ctypes.c_void_p), ("slse", ctypes.c_int64 * 2)]
    for _n in ("dout", "dq", "dk", "dv", "dbias"):
        _fields_ += [(_n, ctypes.c_void_p), ("s" + _n, ctypes.c_int64 * 3)]


def _load():
    global _lib, _lib_error
    if _lib is not None or _lib_error is not None:
        return _lib
    with _lib_lock:
        if _lib is not None or _lib_error is not None:
            return _lib
        try:
            lib = ctypes.CDLL(str(build()))
            for fn in (lib.lengen_attn_fwd, lib.lengen_attn_bwd):
                fn.argtypes = [ctypes.POINTER(_Args)]
                fn.restype = ctypes.c_int
            lib.lengen_attn_args_size.restype = ctypes.c_int64
            if lib.lengen_attn_args_size() != ctypes.sizeof(_Args):
                raise RuntimeError("argument layout mismatch between small_attention.cpp and .py")
            _lib = lib
        except Exception as e:  # no compiler, build error, ...: fall back for good
            _lib_error = f"{type(e).__name__}: {e}"
            log.warning("lengen.kernels: fused attention unavailable, using torch SDPA (%s)", _lib_error)
    return _lib


def available() -> bool:
    """Whether the kernel is built and loadable (building it if needed)."""
    return _load() is not None


# -- the Function -------------------------------------------------------------------------------

def _set(args, name, t, ndim=3):
    setattr(args, name, t.data_ptr())
    getattr(args, "s" + name)[:] = t.stride()[:ndim]


def _expand_bias(bias, B, H, Tq, Tk):
    if bias is None:
        return None
    bias = bias.expand(B, H, Tq, Tk)
    return bias if bias.stride(-1) == 1 else bias.contiguous()


def _make_args(q, k, v, bias, causal, scale):
    B, H, Tq, D = q.shape
    bias = _expand_bias(bias, B, H, Tq, k.shape[2])
    a = _Args(B=B, H=H, Tq=Tq, Tk=k.shape[2], D=D, DV=v.shape[3], causal=int(bool(causal)),
              nthreads=torch.get_num_threads(), scale=scale)
    _set(a, "q", q)
    _set(a, "k", k)
    _set(a, "v", v)
    if bias is not None:
        _set(a, "bias", bias)
        a.keep_alive = bias  # may be a temporary (a contiguous copy)
    return a


def _forward(q, k, v, bias, causal, scale, want_lse):
    B, H, Tq, _ = q.shape
    out = torch.empty(B, Tq, H, v.shape[3], dtype=q.dtype).transpose(1, 2)  # [B,H,Tq,DV], cheap to merge heads
    lse = torch.empty(B, H, Tq, dtype=torch.float32) if want_lse else None
    a = _make_args(q, k, v, bias, causal, scale)
    _set(a, "o", out)
    if lse is not None:
        _set(a, "lse", lse, 2)
    if _lib.lengen_attn_fwd(ctypes.byref(a)) != 0:
        raise RuntimeError("lengen_attn_fwd rejected its arguments")
    return out, lse


def _last_contiguous(t):
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


class SmallAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, causal, scale):
        out, lse = _forward(q, k, v, bias, causal, scale, want_lse=True)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, out, lse = ctx.saved_tensors
        dout = _last_contiguous(dout)
        if dout.dtype != q.dtype:
            dout = dout.to(q.dtype)
        B, H, Tq, D = q.shape
        Tk, DV = k.shape[2], v.shape[3]
        a = _make_args(q, k, v, bias, ctx.causal, ctx.scale)
        _set(a, "o", out)
        _set(a, "lse", lse, 2)
        _set(a, "dout", dout)
        # [B, T, H, D] in memory, like the fused projection they flow back into (cheap to merge)
        dq = torch.empty(B, Tq, H, D, dtype=q.dtype).transpose(1, 2)
        dk = torch.empty(B, Tk, H, D, dtype=q.dtype).transpose(1, 2)
        dv = torch.empty(B, Tk, H, DV, dtype=q.dtype).transpose(1, 2)
        _set(a, "dq", dq)
        _set(a, "dk", dk)
        _set(a, "dv", dv)
        dbias = None
        if ctx.needs_input_grad[3]:
            # a bias broadcast over the batch gets its gradient summed over the batch in the kernel
            shape4 = (1,) * (4 - bias.dim()) + tuple(bias.shape)
            over_batch = shape4[0] == 1 and B > 1
            dbias = torch.zeros(1 if over_batch else B, H, Tq, Tk, dtype=q.dtype)
            _set(a, "dbias", dbias)
            if over_batch:
                a.sdbias[0] = 0
                a.accum_bias_over_batch = 1
        if _lib.lengen_attn_bwd(ctypes.byref(a)) != 0:
            raise RuntimeError("lengen_attn_bwd rejected its arguments")
        if dbias is not None:
            dbias = dbias.sum_to_size(shape4).reshape(bias.shape)
        return dq, dk, dv, dbias, None, None


# -- dispatch -----------------------------------------------------------------------------------

def causal_additive_mask(tq: int, tk: int, device, dtype=torch.float32) -> torch.Tensor:
    """0 where key j <= query i (queries are the last tq of tk positions), -inf elsewhere."""
    i = torch.arange(tk - tq, tk, device=device)[:, None]
    j = torch.arange(tk, device=device)[None, :]
    return torch.zeros(tq, tk, device=device, dtype=dtype).masked_fill(j > i, float("-inf"))


def sdpa(q, k, v, bias=None, causal=False, scale=None):
    """The stock path: torch's scaled_dot_product_attention with the same semantics."""
    tq, tk = q.shape[-2], k.shape[-2]
    if bias is not None:
        if causal:
            bias = bias + causal_additive_mask(tq, tk, q.device, bias.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    if causal and tq > 1:
        if tq == tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        mask = causal_additive_mask(tq, tk, q.device, q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


def _unsupported(q, k, v, bias) -> str | None:
    ts = (q, k, v) if bias is None else (q, k, v, bias)
    if any(t.device.type != "cpu" for t in ts):
        return "not a CPU tensor"
    if any(t.dtype != torch.float32 for t in ts):
        return "dtype is not float32"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return "q, k, v are not 4-D"
    B, H, Tq, D = q.shape
    if k.shape[:2] != (B, H) or v.shape[:3] != k.shape[:3] or k.shape[3] != D:
        return "q, k, v shapes do not match"
    if not (1 <= D <= MAX_HEAD_DIM and 1 <= v.shape[3] <= MAX_HEAD_DIM):
        return f"head dim above {MAX_HEAD_DIM}"
    if Tq == 0 or k.shape[2] == 0 or B * H == 0:
        return "empty input"
    if bias is not None:
        try:
            if torch.broadcast_shapes(bias.shape, (B, H, Tq, k.shape[2])) != (B, H, Tq, k.shape[2]):
                return "bias does not broadcast to [B, H, Tq, Tk]"
        except RuntimeError:
            return "bias does not broadcast to [B, H, Tq, Tk]"
    if any(t.is_nested or t.layout != torch.strided for t in ts):
        return "not a strided tensor"
    return None


def _slower(q, k, v) -> str | None:
    """Supported shapes where SDPA is the faster one: queries fill the vector lanes, so a few
    queries against many keys (decoding with a KV cache) leave most lanes idle (measured in
    docs/engineering/performance.md)."""
    if q.shape[2] < (8 if max(q.shape[3], v.shape[3]) <= 16 else 16) and k.shape[2] >= 64:
        return "few queries against many keys: SDPA is faster"
    return None


def attention(q, k, v, bias=None, causal=False, scale=None):
    """softmax(q k^T * scale + bias [+ causal mask]) v for q [B,H,Tq,D], k [B,H,Tk,D],
    v [B,H,Tk,DV] and a float bias broadcastable to [B,H,Tq,Tk]; scale defaults to 1/sqrt(D);
    `causal`: the Tq queries are the last Tq of the Tk keys. The fused kernel where it applies
    and is the faster one, torch's SDPA otherwise."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if not _enabled:
        return sdpa(q, k, v, bias, causal, scale)
    reason = _unsupported(q, k, v, bias) or _slower(q, k, v)
    if reason is None and _load() is None:
        reason = "kernel unavailable: " + str(_lib_error)
    if reason is not None:
        _log_once(reason)
        return sdpa(q, k, v, bias, causal, scale)
    return fused_attention(q, k, v, bias, causal, scale)


def fused_attention(q, k, v, bias=None, causal=False, scale=None):
    """`attention` always through the kernel (no dispatch); raises on unsupported inputs."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    reason = _unsupported(q, k, v, bias)
    if reason is not None:
        raise ValueError(f"fused attention: {reason}")
    if _load() is None:
        raise RuntimeError(f"fused attention kernel unavailable: {_lib_error}")
    q, k, v = _last_contiguous(q), _last_contiguous(k), _last_contiguous(v)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, bias)):
        return SmallAttention.apply(q, k, v, bias, bool(causal), float(scale))
    return _forward(q, k, v, bias, bool(causal), float(scale), want_lse=False)[0]
