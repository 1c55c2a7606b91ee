"""Forward time and peak memory of a Gemma 3 layout with transformers' sdpa against lengen's
`lengen_banded` (sliding-window layers band by band, lengen.hf.banded), measured in the same run.

    python benchmarks/banded_attention.py --lengths 2048,4096,8192 --threads 1
    python benchmarks/banded_attention.py --model DIR --gguf-file gemma-3-270m-q4_k_m.gguf --lengths 8192

With --model, a real checkpoint (a local folder, as `lengen hf eval` loads it) instead, its decoder
alone timed (the output layer over a 262k vocabulary is the same for both and not what changes).

The model is random (nothing is downloaded): Gemma 3 270M's attention layout (hidden 640, 4 query
heads and 1 key/value head of 256, sliding window 512, 5 sliding layers per global one) with
--layers layers (default 6: one period), a small MLP and vocabulary (both cost the same under
either implementation). One forward of batch 1 over T random tokens, `logits_to_keep=1`, under
inference_mode. Each (implementation, length) runs in a fresh process, so that its peak resident
memory (ru_maxrss) is its own; `seconds` is the minimum over --repeats calls after a warm-up and
`cpu_s` the process CPU time of that call (on a shared CPU, the fairer of the two at --threads 1).
`max abs dlogit` compares the two implementations' last-position logits (with --model: the decoder's
last hidden state).
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing as mp
import resource
import sys
import time

import torch

from lengen.formatting import count_noun, format_table


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


def load_model(impl: str, args):
    """(forward: ids -> the last position's output, vocabulary size) with `impl` attention."""
    from lengen.hf import banded

    if args.model:
        from lengen.hf.loading import load
        from lengen.hf.settings import EvalSettings

        model, _ = load(EvalSettings(model_path=args.model, gguf_file=args.gguf_file, methods=["rope"],
                                     lengths=[2], attn=impl))
        decoder = model.get_decoder()
        return (lambda ids: decoder(input_ids=ids, use_cache=False).last_hidden_state[0, -1]), \
            model.config.vocab_size
    model = build_model(args.layers)
    model.set_attn_implementation("sdpa")
    if impl == "banded":
        banded.use(model)
    return (lambda ids: model(ids, logits_to_keep=1).logits[0, -1]), model.config.vocab_size


def measure(impl: str, length: int, args, queue) -> None:
    torch.set_num_threads(args.threads)
    forward, vocab = load_model(impl, args)
    ids = torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(1))
    best, cpu, logits = float("inf"), 0.0, None
    with torch.inference_mode():
        for i in range(args.repeats + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            logits = forward(ids)
            wall, used = time.perf_counter() - t0, time.process_time() - c0
            if i and wall < best:
                best, cpu = wall, used
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((best, cpu, peak_mb, logits.tolist()))   # a list: a tensor would outlive its process


def run_cell(impl, length, args):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=measure, args=(impl, length, args, queue))
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
    p.add_argument("--model", metavar="DIR", help="a local checkpoint folder instead of the random layout")
    p.add_argument("--gguf-file", metavar="F", help="a GGUF file inside --model")
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
                        "sdpa peak MB", "banded peak MB", "max abs dlogit"], rows))
    what = f"{args.gguf_file or args.model} (its decoder)" if args.model \
        else f"random Gemma 3 layout, {args.layers} layers"
    print(f"{what}; torch {torch.__version__}, {count_noun(args.threads, 'thread')}, min of {args.repeats} calls "
          f"after a warm-up; {datetime.date.today()}")


if __name__ == "__main__":
    main()
