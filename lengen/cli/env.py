"""`lengen env`: the versions and devices lengen runs with (lengen and its commit, Python, torch and
its CUDA build, the GPUs torch sees, threads, transformers and the other libraries). Paste its
output into a bug report."""

from __future__ import annotations

import json

from lengen.environment import describe


def run(args) -> int:
    info = describe()
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    width = max(map(len, info))
    for key, value in info.items():
        print(f"{key:<{width}}  {value if value is not None else '-'}")
    return 0
