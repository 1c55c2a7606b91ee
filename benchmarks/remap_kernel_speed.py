"""Time and peak memory of the remapping methods' one-pass Triton kernel against SDPA and the
two-pass FlexAttention path, on CUDA, in one run (ratios to SDPA of the same run).

    python benchmarks/remap_kernel_speed.py                 # 16k, 64k, 128k; prefill and decode
    python benchmarks/remap_kernel_speed.py --quick         # 16k only, 2 repeats
    python benchmarks/remap_kernel_speed.py --lengths 131072 --methods dca --heads 32 --head-dim 128
    python benchmarks/remap_kernel_speed.py --configs 128x64x8,128x64x8p,64x64x4   # compare launch settings

Shapes: batch 1, --heads x --head-dim (default 8 x 64, as benchmarks/attention_speed.py), bf16
(--dtype), positions 0..T-1, un-rotated q, k, v, RopeSpec(head_dim, 10000, --train-length 2048).
Each method runs `method.attend(q, k, v, pos, pos)` (rotations included) with the path forced
through lengen.kernels.flex_remap: `triton` (set_triton_mode("force"); with --configs one row per
BLOCK_MxBLOCK_NxWARPS setting of the prefill tiles, `triton 128x64x8`, a trailing `p` for the
precise libdevice sin / cos instead of the approximate ones, else the kernel's own choice), `flex` (Triton off, flex forced; block masks cached, as a model's later layers see them). The baseline is
`F.scaled_dot_product_attention(q, k, v, is_causal=True)` on the same tensors, without rotation.
Decode (--steps): the last position's query against all T keys (un-rotated cache), SDPA without a
mask. Per (length, step): rounds of (SDPA, each method and path) interleaved after one warm-up
call (which compiles: its time is the `first s` column), minimum over --repeats rounds of CUDA
event time; peak memory = torch.cuda.max_memory_allocated during one call minus what was
allocated before it. `|diff|`: the largest difference of the path's output from the Triton
kernel's (flex) or from flex's (triton), a check that both compute the same attention.

Without CUDA it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lengen.extrapolation import RopeSpec, build_method  # noqa: E402
from lengen.kernels import flex_remap  # noqa: E402

try:
    from lengen.kernels import triton_remap  # the `gpu` extra
except ImportError:  # main() says so and exits
    triton_remap = None

METHODS = ["rerope:window=512", "self_extend:group=8,window=512", "dca", "string"]
MODES = {"triton": ("force", "off"), "flex": ("off", "force")}  # path: (triton mode, flex mode)
PATHS = ["triton", "flex"]
OVERRIDES: dict = {}  # path label: triton_remap.OVERRIDES while it runs (--configs)


def call_for(spec, path, rope, step):
    method = build_method(spec, rope) if spec != "sdpa" else None

    def run(q, k, v, pos):
        if method is None:
            if step == "decode":
                return F.scaled_dot_product_attention(q[:, :, -1:], k, v)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        triton_mode, flex_mode = MODES[path.split()[0]]
        previous = flex_remap.triton_mode(), flex_remap.mode()
        flex_remap.set_triton_mode(triton_mode)
        flex_remap.set_mode(flex_mode)
        if path in OVERRIDES and step == "prefill":
            triton_remap.OVERRIDES.update(OVERRIDES[path])
        try:
            if step == "decode":
                return method.attend(q[:, :, -1:], k, v, pos[:, -1:], pos)
            return method.attend(q, k, v, pos, pos)
        finally:
            flex_remap.set_triton_mode(previous[0])
            flex_remap.set_mode(previous[1])
            if path in OVERRIDES:
                triton_remap.OVERRIDES.update(dict.fromkeys(triton_remap.OVERRIDES))
    return run


def timed(fn, *args):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end), out


def peak_mb(fn, *args):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - before) / 2 ** 20
    del out
    return peak


def measure(T, step, specs, args, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, args.heads, T, args.head_dim, generator=g, device="cuda", dtype=dtype)
               for _ in range(3))
    pos = torch.arange(T, device="cuda")[None]
    rope = RopeSpec(args.head_dim, 10000.0, args.train_length)
    entries = [("sdpa", "-")] + [(s, p) for s in specs for p in PATHS]
    calls = {e: call_for(*e, rope, step) for e in entries}
    first, outs = {}, {}
    with torch.no_grad():
        for e, fn in calls.items():
            t0 = time.perf_counter()
            outs[e] = fn(q, k, v, pos)
            torch.cuda.synchronize()
            first[e] = time.perf_counter() - t0
        best = {e: float("inf") for e in entries}
        for _ in range(args.repeats):
            for e, fn in calls.items():
                best[e] = min(best[e], timed(fn, q, k, v, pos)[0])
        peaks = {e: peak_mb(fn, q, k, v, pos) for e, fn in calls.items()}
    rows = []
    for spec, path in entries:
        diff = "-"
        other_path = "flex" if path.startswith("triton") else PATHS[0]
        if path != "-" and (spec, other_path) in outs:
            other = outs[(spec, other_path)]
            diff = f"{(outs[(spec, path)].float() - other.float()).abs().max().item():.2e}"
        base_ms, base_mb = best[("sdpa", "-")], peaks[("sdpa", "-")]
        rows.append([T, step, spec, path, f"{best[(spec, path)]:.3f}", f"{best[(spec, path)] / base_ms:.2f}",
                     f"{peaks[(spec, path)]:.1f}", f"{peaks[(spec, path)] / max(base_mb, 1e-9):.2f}",
                     f"{first[(spec, path)]:.1f}", diff])
    del q, k, v, outs
    torch.cuda.empty_cache()
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="16384,65536,131072")
    p.add_argument("--methods", default=";".join(METHODS), help="method specs separated by ';'")
    p.add_argument("--steps", default="prefill,decode")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--train-length", type=int, default=2048)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--quick", action="store_true", help="16k only, 2 repeats")
    p.add_argument("--no-flex", action="store_true",
                   help="skip the flex path (its first call compiles for tens of seconds per method and length)")
    p.add_argument("--configs", default="", help="prefill launch settings BMxBNxWARPS[p], comma-separated "
                   "(one triton row each; p: precise sin / cos; default: the kernel's own choice)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("remap_kernel_speed: no CUDA device here; this benchmark times GPU kernels only (nothing run)")
        return 0
    if triton_remap is None:
        print("remap_kernel_speed: triton is not installed (pip install -e '.[gpu]'); nothing run")
        return 0
    if args.configs:
        PATHS[:] = [f"triton {c}" for c in args.configs.split(",")] + ["flex"]
        for c in args.configs.split(","):
            bm, bn, warps = (int(x) for x in c.rstrip("p").split("x"))
            OVERRIDES[f"triton {c}"] = {"block_m": bm, "block_n": bn, "num_warps": warps,
                                        "fast_trig": not c.endswith("p")}
    if args.no_flex:
        PATHS.remove("flex")
    if args.quick:
        args.lengths, args.repeats = "16384", 2
    lengths = [int(x) for x in args.lengths.split(",")]
    specs = [s for s in args.methods.split(";") if s]
    dtype = getattr(torch, args.dtype)
    name = torch.cuda.get_device_name()
    print(f"device {name}, torch {torch.__version__}, 1 x {args.heads} heads x {args.head_dim}, {args.dtype}, "
          f"train length {args.train_length}, best of {args.repeats}")
    print()
    header = ["T", "step", "method", "path", "ms", "x SDPA", "peak MB", "x SDPA", "first s", "|diff|"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header), flush=True)
    for T in lengths:
        for step in args.steps.split(","):
            for row in measure(T, step, specs, args, dtype):
                print("| " + " | ".join(str(x) for x in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
