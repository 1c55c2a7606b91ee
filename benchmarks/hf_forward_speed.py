"""Whole-model forward time and peak memory of a transformers Llama with each lengen method applied
by `lengen.hf.extend`, against the same model untouched (its own attention: sdpa by default),
measured in the same run. Issue 12's target: every method within 1.5x of the native model at
16k-128k tokens on a GPU, memory linear in T.

    python benchmarks/hf_forward_speed.py --lengths 1024,2048                   # CPU, a check
    python benchmarks/hf_forward_speed.py --device cuda --dtype bfloat16 --lengths 16384,65536,131072

The model is random (nothing is downloaded): SmolLM2-135M's layout (hidden 576, 9 query heads and
3 key/value heads of 64, MLP 1536, vocab 49152, rope base 100000, trained at 8192) with --layers
layers (default 4). One forward of batch 1 over T random tokens, under torch.inference_mode, with
`logits_to_keep=1` (the last position's logits only, as a prefill for generation does: the LM head
over all T positions would cost more than the layers and is the same for every method). Per
length, rounds of (native, every method) are interleaved so a noisy neighbour slows all alike; the
minimum over --repeats rounds after one warm-up call. Memory: on CUDA, max_memory_allocated during
the call minus what was allocated before it; on the CPU it is not measured.

The `path` column says how a method's attention ran: `rotary` (frequency methods change the rotary
table and keep the model's attention), `flex` (the remapping methods' two FlexAttention passes,
lengen.kernels.flex_remap, CUDA), `blockwise` (their fallback).
"""

from __future__ import annotations

import argparse
import time

import torch

from lengen.formatting import format_table

DEFAULT_METHODS = ("yarn:factor=16", "ntk:factor=16", "rerope:window=512", "leaky_rerope:window=512",
                   "self_extend:group=16,window=1024", "lambda:window=4096", "dca:chunk_size=8192,local_size=1024",
                   "string:shift=2730,window=128")


def build_model(args, device, dtype):
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=args.layers, num_attention_heads=9,
        num_key_value_heads=3, head_dim=64, vocab_size=49152, max_position_embeddings=8192,
        rope_theta=100000.0, attn_implementation=args.attention)
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(model, ids, device):
    """(wall seconds, CPU seconds of this process, extra MB at the peak) of one forward. On a CPU
    shared with other jobs the wall clock mostly measures them; CPU time is what the call costs
    (with OpenMP spinning included, so compare at --threads 1)."""
    sync(device)
    base = 0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        model(input_ids=ids, logits_to_keep=1, use_cache=False)
    sync(device)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    mb = (torch.cuda.max_memory_allocated(device) - base) / 2**20 if device.type == "cuda" else float("nan")
    return seconds, cpu, mb


def path_of(model, device) -> str:
    from lengen.hf.extensions import route_of
    from lengen.kernels import flex_remap

    if route_of(model) == "rotary":
        return "rotary"
    return "flex" if flex_remap.applies(torch.zeros(1, device=device)) else "blockwise"


def main():
    import lengen.hf as lh
    from lengen.extrapolation import split_methods

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="1024,2048")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="lengen method specs, comma-separated "
                   "(a spec's own options use ',' too: separate specs with ';' when they do)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "eager"], help="the model's own attention")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    specs = [s for s in args.methods.split(";") if s] if ";" in args.methods else split_methods(args.methods)
    model = build_model(args, device, dtype)
    lengths = [int(t) for t in args.lengths.split(",")]
    rows = []
    for T in lengths:
        ids = torch.randint(0, model.config.vocab_size, (1, T), generator=torch.Generator().manual_seed(T)).to(device)
        best = {name: (float("inf"), float("inf"), float("nan")) for name in ["native", *specs]}
        paths = {"native": args.attention}
        for round_ in range(args.repeats + 1):  # round 0 warms up (compiles the flex kernels)
            for name in best:
                if name != "native":
                    lh.extend(model, name)
                    paths[name] = path_of(model, device)
                try:
                    seconds, cpu, mb = timed(model, ids, device)
                finally:
                    if name != "native":
                        lh.restore(model)
                if round_ > 0:
                    old = best[name]
                    best[name] = (min(old[0], seconds), min(old[1], cpu), mb if seconds < old[0] else old[2])
        native, native_cpu = best["native"][:2]
        for name, (seconds, cpu, mb) in best.items():
            rows.append([str(T), name, paths[name], f"{seconds * 1e3:.1f}", f"{seconds / native:.2f}x",
                         f"{cpu * 1e3:.1f}", f"{cpu / native_cpu:.2f}x", "" if mb != mb else f"{mb:.0f}"])
            print(" | ".join(rows[-1]), flush=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"\nrandom Llama (SmolLM2-135M layout), {args.layers} layers, {args.dtype}, {args.attention}, "
          f"batch 1, {device} ({name}), torch {torch.__version__}, min of {args.repeats}")
    print(format_table(["T", "method", "path", "wall ms", "vs native", "CPU ms", "vs native", "peak MB"], rows))


if __name__ == "__main__":
    main()
