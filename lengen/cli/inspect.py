"""`lengen inspect`: look inside one trained CHE model: attention maps of every layer and a 2-D
PCA of every block's output, at the training length N and a longer length L."""

from __future__ import annotations

from lengen.cli.options import set_threads
from lengen.inspect import inspect_run


def run(args) -> int:
    set_threads(args.threads)
    both = not (args.attention or args.activations)
    written = inspect_run(args.run_dir, attention=args.attention or both,
                          activations=args.activations or both, length=args.length, out=args.out,
                          seed=args.seed, samples=args.samples, device=args.device)
    for path in written:
        print(f"wrote {path}")
    return 0
