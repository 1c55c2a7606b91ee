"""The fused small-head-dim attention kernel (lengen.kernels) against torch SDPA, in one process.

1. Attention alone, per layer of the seed CHE model (B=128 sequences, H=8 heads, head dim 8;
   72 for the Transformer-XL relative encoding, whose q/k carry 64 extra positional columns,
   v stays 8): forward+backward at training lengths T (= 2 x input length), forward (inference
   mode) at the evaluation length T = 1000.
2. End to end: CHE train steps/s (reverse_string, batch 128, one length per step from U{1..40},
   Adam, grad clipping) and eval samples/s at input length 500, kernel off / on.

Every comparison is interleaved (A, B, A, B, ...) in the same process and reports the best
round, since the machine may be shared. Kernel off = lengen.kernels.set_enabled(False), i.e.
exactly the torch SDPA path the model used before.

    python benchmarks/attention_kernel.py                     # everything (a few minutes)
    python benchmarks/attention_kernel.py --skip-model        # attention table only
    python benchmarks/attention_kernel.py --encodings rope,relative --steps 20 --rounds 3
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from lengen import kernels
from lengen.formatting import count_noun
from lengen.kernels import small_attention


def best_of_interleaved(fns: dict, rounds: int, reps: int) -> dict:
    """Per function, the minimum wall time and the minimum process CPU time of one call (ms),
    the functions interleaved round by round. On a loaded machine the CPU time is the steadier
    measure with one thread; with several, it also counts OpenMP threads spinning at barriers."""
    for fn in fns.values():
        fn()  # warm-up
    best = {name: [math.inf, math.inf] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(reps):
                t, c = time.perf_counter(), time.process_time()
                fn()
                best[name][0] = min(best[name][0], time.perf_counter() - t)
                best[name][1] = min(best[name][1], time.process_time() - c)
    return {name: (1e3 * w, 1e3 * c) for name, (w, c) in best.items()}


def attention_rows(args) -> list:
    rows = []
    gen = torch.Generator().manual_seed(0)
    H, DV = 8, 8

    def case(label, B, T, D, bias, train):
        q = torch.randn(B, H, T, D, generator=gen)
        k = torch.randn(B, H, T, D, generator=gen)
        v = torch.randn(B, H, T, DV, generator=gen)
        b = torch.randn(1, H, T, T, generator=gen) if bias else None
        dout = torch.randn(B, H, T, DV, generator=gen)
        scale = 1 / math.sqrt(DV)
        if train:
            q, k, v = (t.requires_grad_() for t in (q, k, v))

        def make(fn):
            if train:
                return lambda: torch.autograd.grad(fn(q, k, v, b, False, scale), (q, k, v), dout)

            def run():
                with torch.inference_mode():
                    fn(q, k, v, b, False, scale)
            return run

        reps = 1 if not train else max(1, args.reps)
        t = best_of_interleaved({"sdpa": make(small_attention.sdpa), "kernel": make(kernels.attention)},
                                args.rounds, reps)
        mode = "fwd+bwd" if train else "fwd"
        (sw, sc), (kw, kc) = t["sdpa"], t["kernel"]
        rows.append([label, f"[{B},{H},{T},{D}/{DV}]", mode, sw, kw, sw / kw, sc, kc, sc / kc])
        print(f"  {label:22s} {rows[-1][1]:20s} {mode:8s} wall: sdpa {sw:8.2f} kernel {kw:8.2f} ms x{sw / kw:5.1f}"
              f"   cpu: sdpa {sc:8.2f} kernel {kc:8.2f} ms x{sc / kc:5.1f}", flush=True)

    for T in args.train_lengths:
        case("train", 128, T, 8, False, True)
    case("train, ALiBi bias", 128, 41, 8, True, True)
    case("train, relative (72)", 128, 41, 72, False, True)
    case("eval", args.eval_batch, 1000, 8, False, False)
    case("eval, ALiBi bias", args.eval_batch, 1000, 8, True, False)
    case("eval, relative (72)", args.eval_batch, 1000, 72, False, False)
    return rows


# -- end to end --------------------------------------------------------------------------------

class ReverseString:
    """reverse_string as the CHE suite defines it (binary input, output = the input reversed),
    inline so that this benchmark depends on the model alone."""

    input_vocab_size = output_vocab_size = 2

    def output_length(self, n):
        return n

    def sample(self, batch, n, rng):
        x = torch.as_tensor(rng.integers(0, 2, size=(batch, n)), dtype=torch.int64)
        return x, x.flip(1)


def model_rows(args) -> list:
    from lengen.models import CHEModel, ModelConfig

    task = ReverseString()
    rows = []
    for pe in args.encodings:
        cfg = ModelConfig(pe=pe, train_tokens=2 * 40)
        torch.manual_seed(0)
        model = CHEModel(cfg, task.input_vocab_size, task.output_vocab_size)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        rng = np.random.default_rng(0)

        def train_steps(lengths):
            model.train()
            for n in lengths:
                inputs, targets = task.sample(128, int(n), rng)
                logits = model(inputs, task.output_length(int(n)))
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            return len(lengths)

        def eval_samples(inputs):
            model.eval()
            with torch.inference_mode():
                model(inputs, task.output_length(inputs.shape[1]))
            return inputs.shape[0]

        res = {}
        for what, fn, make_arg in (
            ("train", train_steps, lambda: rng.integers(1, 41, size=args.steps)),
            ("eval", eval_samples, lambda: task.sample(args.eval_batch, 500, rng)[0]),
        ):
            for flag in (False, True):  # warm-up (and the one-time build)
                kernels.set_enabled(flag)
                fn(make_arg()[:3])
            best = {flag: [0.0, 0.0] for flag in (False, True)}  # per second: wall, cpu
            for _ in range(args.rounds):
                arg = make_arg()  # the same lengths / inputs for both
                for flag in (False, True):
                    kernels.set_enabled(flag)
                    t, c = time.perf_counter(), time.process_time()
                    n = fn(arg)
                    best[flag][0] = max(best[flag][0], n / (time.perf_counter() - t))
                    best[flag][1] = max(best[flag][1], n / (time.process_time() - c))
            res[what] = best
        kernels.set_enabled(True)
        tr, ev = res["train"], res["eval"]
        rows.append([pe, tr[False][0], tr[True][0], tr[True][0] / tr[False][0],
                     ev[False][0], ev[True][0], ev[True][0] / ev[False][0],
                     tr[True][1] / tr[False][1], ev[True][1] / ev[False][1]])
        print(f"  {pe:10s} train {tr[False][0]:6.2f} -> {tr[True][0]:6.2f} steps/s   "
              f"eval {ev[False][0]:6.1f} -> {ev[True][0]:6.1f} samples/s   "
              f"(by cpu time: train x{rows[-1][7]:.2f}, eval x{rows[-1][8]:.2f})", flush=True)
    return rows


def threads() -> str:
    n = torch.get_num_threads()
    return f"{n} thread{'s' if n != 1 else ''}"


def table(headers, rows) -> str:
    cells = [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-lengths", default="2,20,41,80", help="sequence lengths T for the fwd+bwd rows")
    p.add_argument("--eval-batch", type=int, default=16, help="sequences per evaluation call (T = 1000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best is reported")
    p.add_argument("--reps", type=int, default=3, help="calls per round for the fwd+bwd rows")
    p.add_argument("--encodings", default="rope,alibi,relative",
                   help="CHE models for the end-to-end rows ('all': every registered encoding)")
    p.add_argument("--steps", type=int, default=20, help="training steps per end-to-end round")
    p.add_argument("--skip-model", action="store_true", help="attention table only")
    p.add_argument("--skip-attention", action="store_true", help="end-to-end table only")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()
    args.train_lengths = [int(t) for t in args.train_lengths.split(",")]
    if args.encodings == "all":
        from lengen.encodings import ENCODINGS

        args.encodings = ",".join(ENCODINGS.names())
    args.encodings = [e for e in args.encodings.split(",") if e]
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    if not kernels.available():
        raise SystemExit(f"the kernel is unavailable: {small_attention._lib_error}")
    print(f"kernel ready in {time.perf_counter() - t0:.1f} s ({small_attention.build_dir()})")
    print(f"torch {torch.__version__}, {count_noun(torch.get_num_threads(), 'thread')}")
    out = []
    if not args.skip_attention:
        print("\nattention per layer:")
        att = attention_rows(args)
        out += ["", f"attention per layer (best of {args.rounds} interleaved rounds), torch {torch.__version__}, "
                    f"{threads()}", table(["case", "shape [B,H,T,Dqk/Dv]", "pass", "SDPA ms", "kernel ms", "speedup",
                           "SDPA cpu ms", "kernel cpu ms", "speedup (cpu)"], att)]
    if not args.skip_model:
        print("\nCHE model end to end:")
        mod = model_rows(args)
        out += ["", f"CHE model end to end ({args.steps} training steps per round, best of {args.rounds} "
                    f"interleaved rounds), torch {torch.__version__}, {threads()}",
                table(["encoding", "train steps/s SDPA", "kernel", "x", "eval samples/s SDPA", "kernel", "x",
                           "train x (cpu)", "eval x (cpu)"], mod)]
    print("\n".join(out))


if __name__ == "__main__":
    main()
