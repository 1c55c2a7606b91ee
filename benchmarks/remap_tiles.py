"""Tile counts of the one-pass Triton kernel of the remapping methods (lengen.kernels.triton_remap)
and the work they imply relative to a causal flash attention (SDPA) with the same tiles.

    python benchmarks/remap_tiles.py
    python benchmarks/remap_tiles.py --train-length 8192 --lengths 32768,131072 --block 128

Each method with its defaults for a model trained on --train-length tokens (default 4096, the
length the methods' reference defaults are stated for: ReRoPE / Self-Extend w = L0 / 4, DCA
chunk 3 L0 / 4, local L0 / 8, STRING shift 0.33 L0), prefill over positions 0..T-1, --block x
--block tiles (default 64, the kernel's). Per (batch, head): tiles straddling the near / far
boundary (two dot products), near-only and far-only (one), and the tiles computed; "x SDPA" =
(near + far + 2 straddling) / the causal tiles a flash attention computes. "x SDPA 128" is the
same at 128 x 128 tiles, the granularity of the two-pass FlexAttention path's block masks (whose
two passes together visit the same tiles). Counts only: no kernel runs (CPU, seconds).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lengen.extrapolation import RopeSpec, build_method  # noqa: E402
from lengen.kernels.remap_tiles import cost_over_sdpa, tile_counts  # noqa: E402

METHODS = ["rerope", "leaky_rerope", "self_extend", "lambda", "sinks", "dca", "string"]


def rows(lengths, methods, train_length, block):
    rope = RopeSpec(rotary_dim=128, base=10000.0, train_length=train_length)
    out = []
    for T in lengths:
        for spec in methods:
            rule = build_method(spec, rope).remap_rule()
            c = tile_counts(rule, T, block, block)
            wide = tile_counts(rule, T, 128, 128)
            out.append([T, spec, c["straddling"], c["near"], c["far"], c["computed"], c["causal"],
                        f"{cost_over_sdpa(c):.3f}", f"{cost_over_sdpa(wide):.3f}"])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="16384,32768,65536,131072")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated method specs")
    p.add_argument("--train-length", type=int, default=4096)
    p.add_argument("--block", type=int, default=64)
    args = p.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    header = ["T", "method", "straddling", "near", "far", "computed", "causal", "x SDPA", "x SDPA 128"]
    print(f"tile counts per (batch, head), prefill, {args.block} x {args.block} tiles, each method's defaults "
          f"at train length {args.train_length}")
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows(lengths, methods, args.train_length, args.block):
        print("| " + " | ".join(str(x) for x in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
