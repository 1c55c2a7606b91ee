"""Forward time and peak memory of a Gemma 3 layout with transformers' sdpa against lengen's
`lengen_banded` (sliding-window layers band by band, lengen.hf.banded), measured in the same run.

    python benchmarks/banded_attention.py --lengths 2048,4096,8192 --threads 1

The model is random (nothing is downloaded): Gemma 3 270M's attention layout (hidden 640, 4 query
heads and 1 key/value head of 256, sliding window 512, 5 sliding layers per global one) with
--layers layers (default 6: one period), a small MLP and vocabulary (both cost the same under
either implementation). One forward of batch 1 over T random tokens, `logits_to_keep=1`, under
inference_mode. Each (implementation, length) runs in a fresh process, so that its peak resident
memory (ru_maxrss) is its own; `seconds` is the minimum over --repeats calls after a warm-up and
`cpu_s` the process CPU time of that call (on a shared CPU, the fairer of the two at --threads 1).
`max |dlogit|` compares the two implementations' last-position logits.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time

import torch

from lengen.formats import format_table


def build_model(layers: int):
    import transformers

    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        hidden_size=640, intermediate_size=512, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=1, head_dim=256, vocab_size=1024, sliding_window=512,
        max_position_embeddings=32768, query_pre_attn_scalar=256,
        layer_types=[("full_attention" if (i + 1) % 6 == 0 else "sliding_attention")
                     for i in range(layers)])
    return transformers.Gemma3ForCausalLM(config).eval()


def measure(impl: str, length: int, layers: int, repeats: int, threads: int, queue) -> None:
    torch.set_num_threads(threads)
    from lengen.hf import banded

    model = build_model(layers)
    model.set_attn_implementation("sdpa")
    if impl == "banded":
        banded.use(model)
    ids = torch.randint(0, 1024, (1, length), generator=torch.Generator().manual_seed(1))
    best, cpu, logits = float("inf"), 0.0, None
    with torch.inference_mode():
        for i in range(repeats + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            logits = model(ids, logits_to_keep=1).logits[0, -1]
            wall, used = time.perf_counter() - t0, time.process_time() - c0
            if i and wall < best:
                best, cpu = wall, used
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((best, cpu, peak_mb, logits.tolist()))   # a list: a tensor would outlive its process


def run_cell(impl, length, args):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=measure, args=(impl, length, args.layers, args.repeats, args.threads, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="2048,4096,8192", help="comma-separated token counts")
    p.add_argument("--layers", type=int, default=6, help="decoder layers (default 6: 5 sliding, 1 global)")
    p.add_argument("--repeats", type=int, default=2, help="timed calls per cell after a warm-up")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    rows = []
    for length in lengths:
        sdpa = run_cell("sdpa", length, args)
        band = run_cell("banded", length, args)
        diff = float((torch.tensor(sdpa[3]) - torch.tensor(band[3])).abs().max())
        rows.append([length, f"{sdpa[0]:.2f}", f"{band[0]:.2f}", f"{sdpa[0] / band[0]:.1f}x",
                     f"{sdpa[1]:.1f}", f"{band[1]:.1f}", f"{sdpa[2]:.0f}", f"{band[2]:.0f}", f"{diff:.1e}"])
        print(f"{length} tokens done", file=sys.stderr, flush=True)
    print(format_table(["tokens", "sdpa s", "banded s", "speed-up", "sdpa cpu_s", "banded cpu_s",
                        "sdpa peak MB", "banded peak MB", "max |dlogit|"], rows))
    print(f"torch {torch.__version__}, {args.layers} layers, {args.threads} thread(s), "
          f"min of {args.repeats} calls")


if __name__ == "__main__":
    main()
