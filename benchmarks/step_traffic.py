"""Memory traffic of one group training step, operator by operator, and the model-steps/s it
allows at a device's memory bandwidth: a roofline for lengen.che.group without a GPU.

The step runs on PyTorch's `meta` device (shapes only, no arithmetic) through the code path CUDA
takes (one SDPA call for the stack, step lengths rounded up to 8). Every operator that allocates
(views excluded) is counted: bytes written (its outputs) and bytes read (its tensor inputs, a
broadcast input at its storage's size; an in-place operator reads its `self` unless it only
overwrites it, as copy_ and fill_ do; index_add_ and index_copy_ touch only the rows they index).
SDPA is CUDA's memory-efficient kernel (`--sdpa fused`, the default), run through its meta
kernels: what it reads and writes is its inputs and outputs, the attention scores stay on chip.
`--sdpa math` counts SDPA's math path instead (the count before 2026-12-02), whose score-shaped
tensors ([..., T, T], T > 8; activations at T = d_model too) are reported apart and left out. Each operator is
its own pass over memory: what torch runs eagerly, no fusion assumed.

    python benchmarks/step_traffic.py                       # the seed paper's model, N = 64
    python benchmarks/step_traffic.py --bandwidth 3.35      # H100 SXM HBM3, TB/s
    python benchmarks/step_traffic.py --models 512 --precision bf16   # a group's bf16 activations
    python benchmarks/step_traffic.py --models 512 --cpu-steps 2 --json FILE --label TEXT  # + a CPU group of 8

What it shows (docs/engineering/performance.md): on 2026-11-28 the eager step of a group of 512
moved 1.55 GB per model-step outside the scores by that day's count (so at an H100's 3.35 TB/s
at most ~2,170 model-steps/s; 580 were measured), and 5,000 allows 0.67 GB. On 2026-12-02, by the
count above, 1.26 GB in fp32 and 0.65 GB with bf16 activations after issue 54's changes (the
models folded into SDPA's batch, bf16 activations, layer norm's vmap rule, fused Adam, RoPE's
rotation in one Triton pass, ...): what is left is the matrix products' own inputs and outputs and
elementwise passes only fusion removes.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lengen.kernels.model_stack as model_stack  # noqa: E402
try:  # a library before 2026-12-02's rotary kernel (docs/data/.../run.sh counts older commits)
    import lengen.kernels.rotary as rotary  # noqa: E402
except ImportError:
    rotary = None
import lengen.che.group_step as group_step_module  # noqa: E402
from lengen.formatting import format_table  # noqa: E402
from lengen.models import ModelConfig  # noqa: E402
from lengen.che.config import TrainConfig  # noqa: E402
from lengen.che.setup import build_run  # noqa: E402
from lengen.che.stack import ModelStack  # noqa: E402


def _bytes(t: torch.Tensor) -> int:
    """What reading `t` costs: its elements, or its storage where it is broadcast (expand)."""
    return min(t.numel() * t.element_size(), t.untyped_storage().nbytes())


#: in-place operators that overwrite their `self` without reading it
OVERWRITE = {"aten::copy_", "aten::fill_", "aten::zero_"}

#: in-place operators that touch only the rows of `self` that `index` names (as many as `source`
#: has): those rows written, and for index_add_ read
INDEXED_ROWS = {"aten::index_add_": True, "aten::index_copy_": False}

#: operators that allocate without writing (what fills the memory later is counted)
ALLOCATE_ONLY = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                 "aten::new_empty_strided"}


def _tensors(arg) -> list:
    """The tensors of an argument: a tensor, or a list of them (a multi-tensor kernel's)."""
    if isinstance(arg, torch.Tensor):
        return [arg]
    return [t for t in arg if isinstance(t, torch.Tensor)] if isinstance(arg, (list, tuple)) else []


def _scores(t: torch.Tensor) -> bool:
    # the math path's scores, [..., T, T] (3-D inside its bmm, 4-D around it); shape alone cannot
    # tell them from activations [N, B, T, d_model] at T = d_model, set apart too (the count as
    # of 2026-11-28): --sdpa math only
    return t.dim() >= 2 and t.shape[-1] == t.shape[-2] > 8


class Traffic(TorchDispatchMode):
    """Bytes read and written per operator; with `scores`, square tensors ([..., T, T], T > 8) apart."""

    def __init__(self, scores: bool = True):
        super().__init__()
        self.keep_scores_apart = scores  # False where no operator writes scores (the fused SDPA)
        self.read, self.written, self.calls = collections.Counter(), collections.Counter(), collections.Counter()
        self.scores = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func._schema.name in ALLOCATE_ONLY:
            return out
        kwargs = kwargs or {}
        flat = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        # an in-place or out= operator writes into the arguments its schema marks written (a!):
        # an out= destination (keyword-only) is only written, an in-place `self` read and written
        mutated = [arg for arg in func._schema.arguments if arg.alias_info is not None and arg.alias_info.is_write]
        if mutated:
            named = dict(zip((arg.name for arg in func._schema.arguments), args)) | kwargs
            outs = [t for arg in mutated for t in _tensors(named.get(arg.name))]
            write_only = {id(t) for arg in mutated if arg.kwarg_only or func._schema.name in OVERWRITE
                          for t in _tensors(named.get(arg.name))}
            reads = [a for a in flat if id(a) not in write_only]
            if func._schema.name in INDEXED_ROWS:
                rows = named["source"]
                outs = [rows]
                reads = [named["index"], rows] + ([rows] if INDEXED_ROWS[func._schema.name] else [])
        else:
            # an operator whose output shares an input's storage (_unsafe_view's kind) moves nothing
            inputs = {a.untyped_storage()._cdata for a in flat}
            outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
                    if isinstance(o, torch.Tensor) and o.untyped_storage()._cdata not in inputs]
            if not outs:
                return out
            reads = flat
        scored = _scores if self.keep_scores_apart else (lambda t: False)
        square = [o for o in outs if scored(o)]
        self.scores += sum(_bytes(o) for o in square)
        name = str(func).removeprefix("aten.").removesuffix(".default")
        self.read[name] += sum(_bytes(a) for a in reads if not scored(a))
        self.written[name] += sum(_bytes(o) for o in outs if not any(o is s for s in square))
        self.calls[name] += 1
        return out


def fused_sdpa(q, k, v, bias=None, causal=False, scale=None):
    """`lengen.kernels.small_attention.sdpa` as CUDA runs it for the stack: the memory-efficient
    kernel (what SDPA picks for a float bias, fp32 or bf16), whose meta kernels give its real
    inputs and outputs (q, k, v, bias in; the output and its log-sum-exp out; the backward reads
    those and the output's gradient and writes q, k, v's), the scores never leaving the chip."""
    if causal:
        raise NotImplementedError("the CHE encoder attends both ways")
    out, _, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, None if bias is None else bias.expand(*q.shape[:-1], k.shape[-2]), True, 0.0, False,
        scale=scale)
    return out


def cpu_rate(cfgs, models: int, steps: int, threads: int) -> float:
    """Model-steps/s of a real group of `models` of these configs on the CPU (`threads` torch
    threads), over `steps` steps after one warm-up step: what the changes cost where there is no GPU."""
    cfgs = [dataclasses.replace(c, device="cpu") for c in cfgs[:models]]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        parts = [build_run(c) for c in cfgs]
        device = torch.device("cpu")
        stack = ModelStack([part.model for part in parts], cfgs,
                           [torch.Generator().manual_seed(c.seed) for c in cfgs], device)
        stack.train(True)
        rngs = [np.random.default_rng(c.seed) for c in cfgs]
        gens = [torch.Generator().manual_seed(c.seed) for c in cfgs]
        overhead = group_step_module.bucket_overhead(cfgs[0], device)
        group_step_module.group_step(stack, parts, cfgs, rngs, gens, device, models, overhead)
        start = time.perf_counter()
        for _ in range(steps):
            group_step_module.group_step(stack, parts, cfgs, rngs, gens, device, models, overhead)
        return models * steps / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=64, help="group size N (traffic is per model)")
    p.add_argument("--encoding", default="rope")
    p.add_argument("--task", default="reverse_string")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--train-length", type=int, default=40)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--bandwidth", type=float, default=3.35, help="device memory bandwidth, TB/s (H100 SXM: 3.35)")
    p.add_argument("--buckets", default="auto", help="auto (train_group's default on CUDA: length buckets that pay "
                   "for their launches) or a number (at most that many)")
    p.add_argument("--steps", type=int, default=3, help="steps counted (each draws other lengths)")
    p.add_argument("--top", type=int, default=12, help="operators listed")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: the group's bf16 activations (lengen.che.stack), float32 weights and Adam")
    p.add_argument("--sdpa", choices=["fused", "math"], default="fused",
                   help="fused: CUDA's memory-efficient kernel (its inputs and outputs); math: SDPA's math "
                   "path (its scaling, score products and copies, the scores apart), the count before 2026-12-02")
    p.add_argument("--rotary", choices=["fused", "eager"], default="fused",
                   help="fused: RoPE's rotation as CUDA runs it (lengen.kernels.rotary's one-pass Triton kernel, "
                   "one operator); eager: its four elementwise passes per tensor (the CPU's, the count before "
                   "2026-12-02's rotary kernel)")
    p.add_argument("--json", metavar="FILE", help="append this count (and the CPU rate) as one JSON line to FILE "
                   "(the data of docs/engineering/performance.md's `traffic` block)")
    p.add_argument("--label", default="", help="what the count is of (a change), for --json")
    p.add_argument("--cpu-models", type=int, default=8, help="--cpu-steps: the CPU group's size")
    p.add_argument("--cpu-steps", type=int, default=0, help="also time this many steps of a CPU group (0: none)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the CPU timing")
    args = p.parse_args(argv)
    model = ModelConfig(num_layers=args.layers, num_heads=args.heads, d_model=args.d_model,
                        d_ff=4 * args.d_model, dropout=0.0, pe=args.encoding)
    cfgs = [TrainConfig(task=args.task, model=model, batch_size=args.batch_size, train_length=args.train_length,
                        max_length=args.train_length, seed=i, precision=args.precision) for i in range(args.models)]
    # the CPU timing first: below, the CUDA path is patched in
    cpu = cpu_rate(cfgs, args.cpu_models, args.cpu_steps, args.threads) if args.cpu_steps else None
    # what CUDA runs: one SDPA call for the stack, step lengths a multiple of 8
    model_stack.sdpa_batches_models = lambda device: True
    if args.sdpa == "fused":
        model_stack.sdpa = fused_sdpa
    group_step_module.stack_length_multiple = lambda device: 8
    if args.rotary == "fused" and rotary is not None:  # RoPE's rotation as CUDA runs it: one Triton pass per tensor
        rotary.fused = lambda device: True
    parts = [build_run(c) for c in cfgs]
    device = torch.device("meta")
    stack = ModelStack([part.model for part in parts], cfgs, [torch.Generator().manual_seed(c.seed) for c in cfgs],
                       device)
    stack.train(True)
    rngs = [np.random.default_rng(c.seed) for c in cfgs]
    gens = [torch.Generator().manual_seed(c.seed) for c in cfgs]
    if args.buckets == "auto":
        max_buckets, overhead = args.models, group_step_module.bucket_overhead(cfgs[0], "cuda")
    else:
        max_buckets, overhead = int(args.buckets), 0.0
    # the math path writes the scores (kept apart); the fused kernel does not, so nothing is set
    # apart (activations at T = d_model and stacks of d_model x d_model weights are counted)
    traffic = Traffic(scores=args.sdpa == "math")
    try:
        with traffic:
            for _ in range(args.steps):
                group_step_module.group_step(stack, parts, cfgs, rngs, gens, device, max_buckets, overhead)
    except RuntimeError as e:  # an encoding that builds a tensor on the CPU mid-step
        print(f"step_traffic.py: {args.encoding} does not run on the meta device: {str(e).splitlines()[0]}",
              file=sys.stderr)
        return 2
    n = args.models * args.steps  # per model-step
    total = sum(traffic.read.values()) + sum(traffic.written.values())
    rows = [[name, str(traffic.calls[name]), f"{traffic.read[name] / n / 1e6:.1f}",
             f"{traffic.written[name] / n / 1e6:.1f}"]
            for name in sorted(traffic.calls, key=lambda k: -(traffic.read[k] + traffic.written[k]))[:args.top]]
    ceiling = args.bandwidth * 1e12 / (total / n)
    # one line above the table (what docs/ shows of this output): the setting and the totals
    print(f"{args.task}, {args.encoding}, {args.layers} layers, d_model {args.d_model}, batch {args.batch_size}, "
          f"U{{1..{args.train_length}}}, {args.precision}, a group of {args.models}, buckets {args.buckets}, "
          f"{args.steps} steps, "
          f"torch {torch.__version__}: {total / n / 1e9:.2f} GB per model-step outside the attention scores "
          f"({sum(traffic.read.values()) / n / 1e9:.2f} read, {sum(traffic.written.values()) / n / 1e9:.2f} "
          f"written), so at {args.bandwidth} TB/s at most {ceiling:,.0f} model-steps/s"
          + (f"; the scores, which the meta device's math SDPA writes and CUDA's fused kernels do not: "
             f"{traffic.scores / n / 1e9:.2f} GB written (not counted)" if args.sdpa == "math" else
             "; SDPA: the memory-efficient kernel's inputs and outputs"))
    print(format_table(["operator", "calls", "MB read / model-step", "MB written / model-step"], rows))
    if cpu is not None:
        print(f"CPU, a group of {args.cpu_models}, {args.threads} thread(s), {args.cpu_steps} steps: "
              f"{cpu:.2f} model-steps/s")
    if args.json:
        record = {"label": args.label, "task": args.task, "encoding": args.encoding, "layers": args.layers,
                  "d_model": args.d_model, "batch_size": args.batch_size, "train_length": args.train_length,
                  "precision": args.precision, "models": args.models, "buckets": args.buckets, "steps": args.steps,
                  "sdpa": args.sdpa, "rotary": args.rotary, "torch": torch.__version__, "bandwidth_tb_s": args.bandwidth,
                  "gb_per_model_step": total / n / 1e9, "gb_read": sum(traffic.read.values()) / n / 1e9,
                  "gb_written": sum(traffic.written.values()) / n / 1e9,
                  "operators_mb": {name: [traffic.calls[name], traffic.read[name] / n / 1e6,
                                          traffic.written[name] / n / 1e6] for name in traffic.calls},
                  "cpu_models": args.cpu_models if cpu is not None else None, "cpu_threads": args.threads,
                  "cpu_steps": args.cpu_steps, "cpu_model_steps_per_s": cpu}
        with open(args.json, "a") as f:
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
