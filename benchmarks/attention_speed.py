"""Time and peak memory of each extrapolation method's attention against plain causal SDPA.

    python benchmarks/attention_speed.py --lengths 1024,4096,16384 --repeats 3
    python benchmarks/attention_speed.py --methods rerope:window=512,self_extend --lengths 16384

Shapes: batch 1, --heads x --head-dim (default 8 x 64, a small LLM's head), --dtype (float32;
bfloat16 / float16 for GPU targets), positions 0..T-1, un-rotated q, k, v; RopeSpec(head_dim,
10000, --train-length 2048). Each method runs `method.attend(q, k, v, pos, pos)`, i.e. including
its rotations; the baseline is `F.scaled_dot_product_attention(q, k, v, is_causal=True)` on the same
tensors (no rotation). --step decode times one query (the last position) against the T keys
instead (the baseline: SDPA without a mask).

Paths (the `path` column) of the remapping methods (rerope, leaky_rerope, self_extend, lambda,
sinks, dca, string): `flex` = the two FlexAttention passes of lengen.kernels.flex_remap, `blockwise`
= the fallback of lengen.extrapolation.blockwise; other methods have one path (`-`). --flex auto
(default) times both paths on CUDA and only blockwise on CPU; --flex force times both on CPU too
(eager flex_attention there: it materializes the scores, a check of the plumbing, not a speed);
--flex off only blockwise, --flex only the flex path alone. The flex path is timed twice: `flex`
with the block masks cached (what a model's second and later layers pay: its layers share one pair
of masks per method and positions), `flex+masks` building them at every call (what its first layer
pays; create_block_mask evaluates the predicates on every pair of positions). A GPU session
measures everything with
    python benchmarks/attention_speed.py --device cuda --dtype bfloat16 --lengths 16384,65536,131072

Time: per length, rounds of (baseline, every method) interleaved so a noisy neighbour slows all
alike; the minimum over --repeats rounds after one warm-up call; ratio = method / baseline. Both
wall-clock time and the CPU time of this process (time.process_time, all threads) are reported:
on a CPU shared with other jobs the wall clock mostly measures the neighbours, while CPU time
with --threads 1 is what the call itself costs.

Memory: on CUDA, torch.cuda.max_memory_allocated during one call minus the memory allocated
before it. On CPU there is no allocator counter, so each (method, length) runs in a fresh
subprocess that allocates the inputs, resets the kernel's peak-RSS mark (/proc/self/clear_refs,
falling back to getrusage) and reports peak RSS during its first call minus RSS before it: an
honest upper bound on the call's extra memory (output and rotated copies included).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lengen.extrapolation import RopeSpec, build_method  # noqa: E402
from lengen.kernels import flex_remap  # noqa: E402

DEFAULT_METHODS = [
    "rope", "yarn:factor=8", "dynamic:factor=8", "rerope:window=512", "leaky_rerope:window=512",
    "self_extend:group=8,window=512", "lambda", "sinks", "dca", "string",
]
BASELINE = "sdpa"
PATH_TAG = " @"  # "rerope:window=512 @flex": the spec and the path it is timed on


def inputs(T, heads, head_dim, device, seed=0, dtype="float32"):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, T, head_dim, generator=g).to(device, getattr(torch, dtype))
               for _ in range(3))
    return q, k, v, torch.arange(T, device=device)[None]


def runner(entry, args, device):
    decode = getattr(args, "step", "prefill") == "decode"
    if entry == BASELINE:
        if decode:
            return lambda q, k, v, pos: F.scaled_dot_product_attention(q[:, :, -1:], k, v)
        return lambda q, k, v, pos: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    spec, _, path = entry.partition(PATH_TAG)
    method = build_method(spec, RopeSpec(args.head_dim, 10000.0, args.train_length))
    mode = {"flex": "force", "flex+masks": "force", "blockwise": "off"}.get(path)
    fresh_masks = path == "flex+masks"

    def call(q, k, v, pos):
        if decode:
            return method.attend(q[:, :, -1:], k, v, pos[:, -1:], pos)
        return method.attend(q, k, v, pos, pos)

    if mode is None:
        return call

    def with_mode(q, k, v, pos):
        previous, previous_triton = flex_remap.mode(), flex_remap.triton_mode()
        flex_remap.set_mode(mode)
        flex_remap.set_triton_mode("off")  # these paths, not the Triton kernel (remap_kernel_speed.py)
        if fresh_masks:
            flex_remap.clear_mask_cache()
        try:
            return call(q, k, v, pos)
        finally:
            flex_remap.set_mode(previous)
            flex_remap.set_triton_mode(previous_triton)
    return with_mode


def entries(specs, args, device):
    """[(entry, method spec, path label)]: remapping methods once per path (see --flex)."""
    out = []
    rope = RopeSpec(args.head_dim, 10000.0, args.train_length)
    for spec in specs:
        if not build_method(spec, rope).remaps:
            out.append((spec, spec, "-"))
            continue
        paths = ["blockwise"]
        if flex_remap.available() and (args.flex == "force" or (args.flex == "auto" and device.type == "cuda")):
            paths = ["flex", "flex+masks", "blockwise"]
        elif args.flex == "only":
            paths = ["flex", "flex+masks"]
        out += [(f"{spec}{PATH_TAG}{p}", spec, p) for p in paths]
    return out


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_length(T, specs, args, device):
    """{entry: (best wall seconds, best CPU seconds)} from interleaved rounds."""
    q, k, v, pos = inputs(T, args.heads, args.head_dim, device, dtype=args.dtype)
    fns = {s: runner(s, args, device) for s in [BASELINE] + specs}
    for fn in fns.values():  # warm-up
        fn(q, k, v, pos)
    sync(device)
    wall = {s: float("inf") for s in fns}
    cpu = dict(wall)
    for _ in range(args.repeats):
        for s, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn(q, k, v, pos)
            sync(device)
            wall[s] = min(wall[s], time.perf_counter() - t0)
            cpu[s] = min(cpu[s], time.process_time() - c0)
    return {s: (wall[s], cpu[s]) for s in fns}


def _rss_kib(field):
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1))


def peak_memory_here(spec, T, args, device):
    """Bytes of extra memory at the peak of one call, measured in this process."""
    q, k, v, pos = inputs(T, args.heads, args.head_dim, device, dtype=args.dtype)
    fn = runner(spec, args, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn(q, k, v, pos)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # peak RSS := current RSS
        before = _rss_kib("VmRSS")
        out = fn(q, k, v, pos)
        peak = _rss_kib("VmHWM")
    except OSError:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = fn(q, k, v, pos)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    del out
    return max(0, peak - before) * 1024


def peak_memory(spec, T, args, device):
    if device.type == "cuda":
        return peak_memory_here(spec, T, args, device)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", spec, "--lengths", str(T),
           "--heads", str(args.heads), "--head-dim", str(args.head_dim),
           "--train-length", str(args.train_length), "--device", "cpu", "--threads", str(args.threads),
           "--dtype", args.dtype, "--step", args.step]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])["bytes"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="1024,4096,16384")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="method specs separated by ';' (or ',' between specs without options)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--train-length", type=int, default=2048)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--step", default="prefill", choices=["prefill", "decode"],
                   help="prefill: T queries; decode: the last query against T keys")
    p.add_argument("--flex", default="auto", choices=["auto", "force", "off", "only"],
                   help="time the remapping methods' FlexAttention path too: auto = on CUDA only; only = "
                        "the flex path alone (on CUDA the blockwise fallback takes ~80x SDPA at 16k: "
                        "seconds per call at 64k-128k)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps({"bytes": peak_memory_here(args.worker, lengths[0], args, device)}))
        return
    rows = [(BASELINE, BASELINE, "-")] + entries(split_specs(args.methods), args, device)
    names = [e for e, _, _ in rows[1:]]
    print(f"# device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"1 x {args.heads} heads x {args.head_dim}, {args.dtype}, {args.step}, "
          f"train length {args.train_length}, best of {args.repeats}")
    print("| T | method | path | wall ms | x SDPA | CPU ms | x SDPA | peak MB | x SDPA |")
    print("|---|---|---|---|---|---|---|---|---|")
    for T in lengths:
        best = time_length(T, names, args, device)
        mem = {} if args.no_memory else {e: peak_memory(e, T, args, device) for e, _, _ in rows}
        (w0, c0) = best[BASELINE]
        for s, spec, path in rows:
            w, c = best[s]
            row = (f"| {T} | {spec} | {path} | {w * 1e3:.1f} | {w / w0:.2f} | {c * 1e3:.1f} "
                   f"| {c / c0:.2f} |")
            if mem:
                base = max(mem[BASELINE], 1)
                row += f" {mem[s] / 2**20:.1f} | {mem[s] / base:.2f} |"
            else:
                row += " - | - |"
            print(row, flush=True)


def split_specs(text: str) -> list[str]:
    """'rerope:window=512,block=128;lambda' or 'rope,yarn:factor=8,rerope': a comma starts a new
    spec when what follows has no '=' before the next ':' / ',' (i.e. it is a name, not an option)."""
    if ";" in text:
        return [s.strip() for s in text.split(";") if s.strip()]
    specs, current = [], ""
    for item in text.split(","):
        if current and "=" not in item.split(":")[0]:
            specs.append(current)
            current = item
        else:
            current = f"{current},{item}" if current else item
    return specs + ([current] if current else [])


if __name__ == "__main__":
    main()
