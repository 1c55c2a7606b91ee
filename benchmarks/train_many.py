"""Model-steps/s (models x steps per second) of a group of N CHE models trained at once
(lengen.che.group: stacked weights, one vmapped forward/backward per step) against the
one-model-at-a-time loop (lengen.che.loop.train_step, fused kernel and fused Adam) measured
in the same run, and the peak memory per model.

Setting of the targets: reverse_string, the seed paper's model (5 layers, d_model 64, 8 heads),
batch 128, one length per model and step from U{1..40}. Targets: >= 5,000 model-steps/s for rope
on one H100; on a 2-core CPU a group of 8 at >= 1.5x the 8 models trained one after another.
Timings on a shared machine are noisy: compare rows of one run.

    python benchmarks/train_many.py --threads 1 --steps 3                     # CPU, paper model
    python benchmarks/train_many.py --layers 2 --d-model 16 --heads 2 --batch-size 8 --train-length 5
    python benchmarks/train_many.py --device cuda --sizes 1,8,32,128,256,512 --buckets auto,1,2,4
    python benchmarks/train_many.py --device cuda --encodings rope --sizes 512 --precision fp32,bf16  # both in one call
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from lengen.formatting import count_noun, format_table
from lengen.devices import check_precision, resolve_device
from lengen.models import ModelConfig
from lengen.che.config import TrainConfig
from lengen.che.group_step import bucket_overhead, group_step, step_buckets
from lengen.che.stack import ModelStack
from lengen.che.loop import train_step
from lengen.training.optim import che_adam
from lengen.che.setup import build_run


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device):
    if device.type == "cuda":
        torch.zeros(1, device=device)  # the allocator's statistics exist after its first allocation
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    try:  # Linux: writing 5 resets the peak RSS (VmHWM)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return rss("VmRSS")


def rss(field="VmHWM") -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_since(base, device) -> float:
    """MB above `base` at the peak (CUDA: max_memory_allocated; CPU: peak RSS)."""
    used = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else rss("VmHWM")
    return max(used - base, 0) / 2**20


def configs(args, pe, n):
    model = ModelConfig(num_layers=args.layers, num_heads=args.heads, d_model=args.d_model, d_ff=4 * args.d_model,
                        dropout=args.dropout, pe=pe)
    return [TrainConfig(task=args.task, model=ModelConfig(**{**model.__dict__}), positions=args.positions,
                        batch_size=args.batch_size, train_length=args.train_length,
                        max_length=args.train_length, lr=1e-4 * (1 + i % 4), seed=i, device=args.device,
                        precision=args.precision)
            for i in range(n)]


def time_group(args, pe, n, device, buckets: str):
    """`buckets`: "auto" (train_group's default: buckets that pay for their launches), "max" (one
    per distinct length) or a number (at most that many, least padding)."""
    cfgs = configs(args, pe, n)
    if buckets == "auto":
        max_buckets, overhead = n, bucket_overhead(cfgs[0], device)
    else:
        max_buckets, overhead = (n if buckets == "max" else int(buckets)), 0.0
    parts = []
    for cfg in cfgs:
        torch.manual_seed(cfg.seed)
        parts.append(build_run(cfg))
    base = reset_peak(device)
    stack = ModelStack([p.model.to(device) for p in parts], cfgs,
                       [torch.Generator().manual_seed(c.seed) for c in cfgs], device)
    stack.train(True)
    rngs = [np.random.default_rng(c.seed) for c in cfgs]
    gens = [torch.Generator().manual_seed(c.seed) for c in cfgs]
    for _ in range(args.warmup):
        group_step(stack, parts, cfgs, rngs, gens, device, max_buckets, overhead)
    sync(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        group_step(stack, parts, cfgs, rngs, gens, device, max_buckets, overhead)
    sync(device)
    seconds = time.perf_counter() - start
    # the host's share: the same steps' draws, bucket plan and padding alone (no model), whose
    # rate caps the group's wherever the device waits on the host
    start, shapes = time.perf_counter(), []
    for _ in range(args.steps):
        for _members, _lengths, padded in step_buckets(parts, cfgs, rngs, gens, "cpu", max_buckets, overhead):
            shapes.append(padded[0].shape)
    host = time.perf_counter() - start
    flops = sum(padded_flops(cfgs[0], *shape) for shape in shapes)
    if args.profile:
        profile_steps(args, lambda: group_step(stack, parts, cfgs, rngs, gens, device, max_buckets, overhead),
                      device, f"{pe}, N = {n}, buckets {buckets}")
    return n * args.steps / seconds, peak_since(base, device) / n, n * args.steps / host, flops / (n * args.steps)


def profile_steps(args, step, device, label):
    """torch.profiler over 3 more steps: the operators by their own device time (CPU time on the
    CPU), to see where a group's step goes when its rate is far below the device's FLOP rate."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(3):
            step()
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"profile of 3 steps ({label}), top {args.profile} by {key}:", flush=True)
    print(prof.key_averages().table(sort_by=key, row_limit=args.profile), flush=True)


def padded_flops(cfg, members: int, batch: int, length: int) -> float:
    """Float operations of one padded bucket's forward and backward (3x the forward): the linear
    layers (6 per weight and token) and the two attention products QK^T and AV (12 x T^2 x d per
    sequence and layer: every position attends to every other); embeddings and readout left out.
    What the device must do, so the rate x this says how close to the device's peak a group runs."""
    m = cfg.model
    per_sequence = 6 * length * (4 * m.d_model ** 2 + 2 * m.d_model * m.d_ff) + 12 * length ** 2 * m.d_model
    return float(members * batch * m.num_layers * per_sequence)


def time_solo(args, pe, device, models: int):
    """`models` models, one after another, each for warm-up + steps with train()'s step."""
    cfgs = configs(args, pe, models)
    total, peak = 0.0, 0.0
    for cfg in cfgs:
        torch.manual_seed(cfg.seed)
        parts = build_run(cfg)
        base = reset_peak(device)
        model = parts.model.to(device)
        opt = che_adam(model, cfg.lr)
        model.train()
        rng, gen = np.random.default_rng(cfg.seed), torch.Generator().manual_seed(cfg.seed)
        for _ in range(args.warmup):
            train_step(parts, cfg, opt, rng, gen, device)
        sync(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            train_step(parts, cfg, opt, rng, gen, device)
        sync(device)
        total += time.perf_counter() - start
        peak = max(peak, peak_since(base, device))
    return models * args.steps / total, peak


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encodings", default="rope,alibi,relative")
    p.add_argument("--sizes", default="1,8,32", help="group sizes N")
    p.add_argument("--task", default="reverse_string")
    p.add_argument("--positions", default="standard")
    p.add_argument("--steps", type=int, default=3, help="timed steps per row")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--train-length", type=int, default=40)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--solo-models", type=int, default=2, help="models timed one after another for the baseline")
    p.add_argument("--buckets", default="auto",
                   help="comma-separated length-bucket settings per step to time (lengen.che.group."
                        "plan_buckets): auto (train_group's default: as many as pay for their launches), "
                        "max (one per distinct length) or a number (at most that many)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32",
                   help="comma-separated precisions to time, each a row set (fp32, tf32, bf16: lengen.devices; "
                        "a group's bf16 is bf16 activations, lengen.che.stack)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--profile", type=int, default=0, metavar="K",
                   help="after each group's timing, profile 3 more steps and print the K operators "
                        "that take the most device time (0: no profile)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    bucket_settings = [b.strip() for b in args.buckets.split(",") if b.strip()]
    precisions = [check_precision(x.strip()) for x in args.precision.split(",") if x.strip()]
    rows = []
    for precision in precisions:  # one call times a group in fp32 and bf16 (--precision fp32,bf16)
        run = argparse.Namespace(**{**vars(args), "precision": precision})
        for pe in args.encodings.split(","):
            solo_rate, solo_mb = time_solo(run, pe, device, args.solo_models)
            rows.append([pe, precision, "1 at a time", "", f"{solo_rate:.1f}", "1.00x", "", "", "", f"{solo_mb:.1f}"])
            print(" ".join(rows[-1]), flush=True)
            for buckets in bucket_settings:
                for n in (int(s) for s in args.sizes.split(",")):
                    try:
                        rate, mb, host_rate, flops = time_group(run, pe, n, device, buckets)
                    except (RuntimeError, MemoryError) as e:  # out of memory: stop growing N
                        rows.append([pe, precision, str(n), buckets, f"failed: {type(e).__name__}", "", "", "", "",
                                     ""])
                        print(f"N={n}, buckets {buckets}: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
                              flush=True)
                        break
                    rows.append([pe, precision, str(n), buckets, f"{rate:.1f}", f"{rate / solo_rate:.2f}x",
                                 f"{host_rate:.0f}", f"{flops / 1e9:.3g}", f"{rate * flops / 1e12:.3g}", f"{mb:.1f}"])
                    print(" ".join(rows[-1]), flush=True)
    print()
    print(f"{args.task}, {args.layers} layers, d_model {args.d_model}, batch {args.batch_size}, "
          f"U{{1..{args.train_length}}}, {args.positions} positions, dropout {args.dropout}, "
          f"device {device}, {args.precision}, {count_noun(torch.get_num_threads(), 'thread')}, {args.steps} timed steps")
    print(format_table(["encoding", "precision", "N", "buckets", "model-steps/s", "vs one at a time", "host only",
                        "GFLOP/model-step", "TFLOP/s", "peak MB/model"], rows))
    print("host only: model-steps/s of the host's part alone (draws, bucket plan, padding; no model): "
          "the group's rate cannot pass it unless that part is overlapped or made cheaper")
    print("GFLOP/model-step: the padded step's linear layers and attention products, forward and backward "
          "(padded_flops, averaged over the host-only steps); TFLOP/s = that x model-steps/s")


if __name__ == "__main__":
    main()
