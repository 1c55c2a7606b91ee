"""One training step of a group of models (lengen.che.group): each member draws its data as
`train_step` would, the members are split into length buckets (the least padded work, each
bucket paying for its own launches), each bucket is padded to its longest and run through the
stack, and the stacked Adam steps once.

The padded CHE layout is [input, EMPTY output slots, padding]: padded keys get -inf in attention,
padded outputs are left out of the loss and the accuracy, padded positions are 0 (any value an
encoding accepts: a bias between real tokens depends on their own positions only)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
import torch.nn.functional as F

from lengen.devices import precision_context, to_device
from lengen.kernels.model_stack import stack_length_multiple
from lengen.che.config import TrainConfig
from lengen.che.loop import draw_step
from lengen.che.setup import RunParts
from lengen.che.stack import ModelStack

#: what one more length bucket per step costs (its own forward and backward launches), in float
#: operations of the device: a bucket pays when the padding it removes is worth more. CPU: ~5 ms of
#: launches at ~50 GFLOP/s (benchmarks/train_many.py: the seed paper's model gains from one bucket
#: per distinct length, 0.37x -> ~1x of one model at a time; a tiny model loses from it). CUDA:
#: ~3 ms of launches at ~50 TFLOP/s, an estimate until measured (benchmarks/gpu_session.sh many).
BUCKET_OVERHEAD_FLOPS = {"cpu": 2.5e8, "cuda": 1.5e11}


def bucket_overhead(cfg: TrainConfig, device) -> float:
    """BUCKET_OVERHEAD_FLOPS in units of plan_buckets' work (one model's padded position): the
    forward and backward of the linear layers for one position of one model's batch."""
    m = cfg.model
    position_flops = 6 * cfg.batch_size * m.num_layers * (4 * m.d_model ** 2 + 2 * m.d_model * m.d_ff)
    return BUCKET_OVERHEAD_FLOPS.get(torch.device(device).type, BUCKET_OVERHEAD_FLOPS["cuda"]) / position_flops


def pad_members(draws, empty_token: int, device, multiple: int = 1):
    """The padded step tensors: tokens [N, B, T], positions [N, 1|B, T], key bias [N, T],
    real lengths [N], readout indices [N, O], targets and masks [N, B, O], loss weights [N, 1, O];
    T is the longest member's length rounded up to `multiple`.
    Filled in numpy and converted once: per member, a torch op costs microseconds of dispatch, a
    numpy slice a fraction of one, and the host fills these for every member at every step."""
    N = len(draws)
    B = draws[0][0].inputs.shape[0]
    totals = [b.inputs.shape[1] + o for b, o, _ in draws]
    T, O = -(-max(totals) // multiple) * multiple, max(o for _, o, _ in draws)
    pb = max(p.shape[0] for _, _, p in draws)
    tokens = np.full((N, B, T), empty_token, dtype=np.int64)
    pos = np.zeros((N, pb, T), dtype=draws[0][2].numpy().dtype)
    key_bias = np.zeros((N, T), dtype=np.float32)
    out_idx = np.minimum(np.arange(O)[None, :] + np.array([b.inputs.shape[1] for b, _, _ in draws])[:, None], T - 1)
    targets = np.zeros((N, B, O), dtype=np.int64)
    mask = np.zeros((N, B, O), dtype=bool)
    weight = np.zeros((N, 1, O), dtype=np.float32)
    for i, ((batch, o, p), t) in enumerate(zip(draws, totals)):
        L = batch.inputs.shape[1]
        tokens[i, :, :L] = batch.inputs.numpy()
        pos[i, :, :t] = p.numpy()
        key_bias[i, t:] = -np.inf
        targets[i, :, :o] = batch.targets.numpy()
        mask[i, :, :o] = batch.mask.numpy()
        weight[i, 0, :o] = np.float32(1.0) / np.float32(B * o)
    n_keys = np.array(totals, dtype=np.float32)
    return to_device(device, *(torch.from_numpy(x) for x in (tokens, pos, key_bias, n_keys, out_idx, targets,
                                                              mask, weight)))


def plan_buckets(totals: list[int], max_buckets: int, overhead: float = 0.0) -> list[list[int]]:
    """Split the members (their padded step lengths `totals`) into at most `max_buckets` groups,
    each padded to its own longest, so that the padded work (the sum over groups of size x
    longest) plus `overhead` per group is least. The best groups are runs of the members sorted by
    length (moving a member to the group of its length never adds work), so a dynamic programme
    over the distinct lengths finds them: O(max_buckets x distinct^2), a few dozen distinct
    lengths per step. Ties go to fewer groups."""
    if not totals:
        return []
    per_length = Counter(totals)
    lengths = sorted(per_length)
    count = [per_length[length] for length in lengths]
    D, K = len(lengths), max(1, min(max_buckets, len(lengths)))
    prefix = [0]
    for c in count:
        prefix.append(prefix[-1] + c)
    # best[k][j]: least work covering the j shortest lengths with k groups; cut[k][j]: last group's start
    inf = float("inf")
    best = [[inf] * (D + 1) for _ in range(K + 1)]
    cut = [[0] * (D + 1) for _ in range(K + 1)]
    best[0][0] = 0
    for k in range(1, K + 1):
        for j in range(1, D + 1):
            for i in range(k - 1, j):  # last group: lengths i..j-1, padded to lengths[j-1]
                work = best[k - 1][i] + (prefix[j] - prefix[i]) * lengths[j - 1]
                if work < best[k][j]:
                    best[k][j], cut[k][j] = work, i
    k = min(range(1, K + 1), key=lambda k: (best[k][D] + overhead * k, k))
    bounds, j = [], D
    while k > 0:
        i = cut[k][j]
        bounds.append((lengths[i], lengths[j - 1]))
        j, k = i, k - 1
    return [[m for m, t in enumerate(totals) if lo <= t <= hi] for lo, hi in reversed(bounds)]


def step_buckets(parts: list[RunParts], cfgs: list[TrainConfig], rngs, gens, device, buckets: int = 1,
                 overhead: float = 0.0):
    """The host's part of one step: every member's draw, then per length bucket (plan_buckets)
    (members, their real lengths, their padded step tensors on `device`), one bucket at a time."""
    draws = [draw_step(p, c, r, g) for p, c, r, g in zip(parts, cfgs, rngs, gens)]
    totals = [b.inputs.shape[1] + o for b, o, _ in draws]
    for members in plan_buckets(totals, buckets, overhead):
        yield members, [totals[i] for i in members], pad_members(
            [draws[i] for i in members], parts[0].model.empty_token, device, stack_length_multiple(device))


def group_step(stack: ModelStack, parts: list[RunParts], cfgs: list[TrainConfig], rngs, gens, device,
               buckets: int = 1, overhead: float = 0.0):
    """One step of every model; returns (loss, correct, count), each [N], on `device`. Models are
    run in at most `buckets` groups of similar drawn length (plan_buckets, `overhead` per group),
    each padded to its own longest: fewer padded tokens for more, smaller launches."""
    N = len(parts)
    loss = torch.zeros(N, device=device)
    correct = torch.zeros(N, dtype=torch.int64, device=device)
    count = torch.zeros(N, dtype=torch.int64, device=device)
    stack.project()
    for members, lengths, padded in step_buckets(parts, cfgs, rngs, gens, device, buckets, overhead):
        tokens, pos, key_bias, n_keys, out_idx, targets, mask, weight = padded
        keep, scale = stack.dropout_masks(members, lengths, tokens.shape[1], tokens.shape[2])
        (rows,) = to_device(device, torch.tensor(members))  # torch.tensor(..., device=cuda) would wait for the GPU
        # bf16 activations cast the weights themselves (ModelStack.activation_dtype), without autocast
        with precision_context("fp32" if stack.activation_dtype is not None else cfgs[0].precision, device):
            logits = stack(tokens, pos, key_bias, n_keys, out_idx, keep, scale,
                           None if len(members) == N else rows)  # [M, B, O, V]
        M, B, O, V = logits.shape
        ce = F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1), reduction="none").view(M, B, O)
        bucket_loss = (ce * weight).sum((1, 2))
        bucket_loss.sum().backward()  # gradients add up in the stack's parameters, bucket by bucket
        loss.index_copy_(0, rows, bucket_loss.detach())
        correct.index_copy_(0, rows, ((logits.detach().argmax(-1) == targets) & mask).sum((1, 2)))
        count.index_copy_(0, rows, mask.sum((1, 2)))
    stack.clip_and_step()
    return loss, correct, count
