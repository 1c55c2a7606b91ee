"""Which runs of a sweep train together (`lengen sweep run --group-size G`): runs whose configs
differ only where lengen.che.group allows (seed, lr, grad clip, dropout, evaluation
settings) and that stand at the same step (fresh, or checkpointed at the same step by a group
that was interrupted) form groups of at most G, in grid order. Every other run, and every run of
a language-model sweep, is a group of one (plain `lengen train`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from lengen.options import flatten
from lengen.che.group import PER_MODEL, PER_MODEL_EVAL

#: group size when --group-size is not given. 1 (no grouping) on both for now: on the 2-core CPU a
#: group of 8 paper-sized models trains at 0.82-0.88x the model-steps/s of the 8 one after another
#: (fused attention per model under vmap and length buckets; the step is compute-bound, so a
#: group can at best match them; tiny models gain 1.9-4.6x). On an H100 (2026-11-28) one group
#: of 64 trained at 7.6x and of 512 at 10.8x one model alone, but a sweep's groups (5-30 runs)
#: sharing a GPU with --runs-per-gpu are not measured yet: `gpu_session.sh sweeps` is what the
#: CUDA default should come from (docs/results/speed.md)
DEFAULT_GROUP_SIZE = {"cpu": 1, "cuda": 1}


def default_group_size(devices: list[str]) -> int:
    return DEFAULT_GROUP_SIZE["cpu" if devices == ["cpu"] else "cuda"]


def checkpoint_step(run_dir: Path) -> int | None:
    """The step of a run directory's checkpoint: 0 without one, None if it cannot be read."""
    path = Path(run_dir) / "checkpoint.pt"
    if not path.exists():
        return 0
    try:
        return int(torch.load(path, map_location="cpu", weights_only=False)["step"])
    except Exception:  # noqa: BLE001 - a damaged checkpoint: let the run alone report it
        return None


def group_key(cfg) -> str | None:
    """What a run's group mates must share (None: it trains alone)."""
    if cfg.model.architecture != "transformer":
        return None
    free = set(PER_MODEL) | set(PER_MODEL_EVAL) | {"model.train_tokens", "device"}
    return json.dumps({k: v for k, v in flatten(cfg.to_dict()).items() if k not in free}, sort_keys=True,
                      default=str)


def plan_groups(runs, kind_name: str, sweep, size: int) -> list[list]:
    """The runs (SweepRun, in grid order) as groups of at most `size`."""
    if size <= 1 or kind_name != "train":
        return [[r] for r in runs]
    buckets: dict[tuple, list] = {}
    order: list = []
    for r in runs:
        key = group_key(r.config)
        step = checkpoint_step(sweep.run_path(r.run_id)) if key is not None else None
        if key is None or step is None:
            order.append([r])
            continue
        bucket = buckets.setdefault((key, step), [])
        if not bucket or len(bucket[-1]) == size:
            bucket.append([])
            order.append(bucket[-1])
        bucket[-1].append(r)
    return order
