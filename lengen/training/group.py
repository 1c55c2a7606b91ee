"""Train N CHE models of one task, encoding, sampler and shapes at once: stacked weights [N, ...],
one forward and one backward per step for all N, each model with what `lengen train` would give
it alone. The forward is the model's own (CHEModel.padded_logits, through the same attention,
encoding hooks and logit scaling) run by torch.func.functional_call under vmap over the stacked
weights; this module holds only what is about groups: the stack, the buckets, the padding, the
stacked Adam and clipping, the dropout plan and the loop.

Each model keeps its own initial weights (built with its seed exactly as `train` builds them),
data stream and positions (its own numpy and torch generators, drawn in the same order as
`train_step`), learning rate, Adam state (Adam is elementwise: a stacked Adam with a per-model
learning rate is the N Adams), gradient clipping (the global norm of *that model's* gradient),
dropout rate and dropout stream, checkpoint, metrics and evaluation. On the CPU the weights equal
those of `train` up to float rounding, with dropout or without (each member draws the masks it
would draw alone, from its own generator); on CUDA grouped dropout masks are other draws of the
same law.

Models draw different lengths at the same step, so each step splits the models into a few
buckets of similar length (plan_buckets: the least padded work, each bucket paying for its own
launches) and pads every model's sequence to its bucket's longest: the CHE layout is [input,
EMPTY output slots, padding], the padded keys get an additive -inf in attention (so no real
token sees them, and the padding gets no gradient), the padded outputs are left out of the loss
and the accuracy, and padded positions are 0 (any value an encoding accepts: a bias between real
tokens depends on their own positions only). Log-n logit scaling counts each model's real keys.

Run directories are those of `train`: config.json, metrics.jsonl, checkpoint.pt (the model and
a torch Adam state dict, so `lengen eval`, `load_trained` and even `lengen train` read and resume
it), eval.json, accuracy.png. Every model is checkpointed at the same steps; rerunning an
interrupted group resumes each model from its checkpoint. Members already trained to `steps`
(e.g. trained alone earlier) are only evaluated; the others must stand at one common step.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from lengen.devices import precision_context, resolve_device, restore_rng_state
from lengen.errors import LengenError
from lengen.kernels.model_stack import attention_for_stack
from lengen.models.attention import StackMember
from lengen.models.che import CHEModel
from lengen.models.dropout import Dropout, bernoulli_keep_mask
from lengen.options import flatten
from lengen.progress import progress_bar
from lengen.training.config import TrainConfig
from lengen.training.loop import Window, evaluate_run, restore_run_rng, reusable_eval, run_rng_state
from lengen.training.optim import fused_optimizer_ok
from lengen.training.run_dir import RunDir
from lengen.training.session import TrainingDiverged, TrainingSession
from lengen.training.setup import RunParts, build_run, total_length

#: config keys that may differ inside a group: they change the numbers, not the shapes
PER_MODEL = ("seed", "lr", "grad_clip", "model.dropout")
#: keys that only shape each model's own evaluation (done model by model after training)
PER_MODEL_EVAL = ("max_length", "eval_samples", "eval_seed", "eval_tokens", "test_positions")
BETAS, EPS = (0.9, 0.999), 1e-8  # train()'s Adam
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


def check_groupable(cfgs: list[TrainConfig]) -> None:
    """LengenError unless the configs differ only in PER_MODEL and PER_MODEL_EVAL keys (all else
    equal: task, model shape and encoding, positions, batch, lengths, steps, cadence, device,
    precision), and the model is the Transformer."""
    if not cfgs:
        raise LengenError("train_group needs at least one config")
    free = PER_MODEL + PER_MODEL_EVAL + ("model.train_tokens",)
    first = flatten(cfgs[0].to_dict())
    for j, cfg in enumerate(cfgs[1:], 1):
        other = flatten(cfg.to_dict())
        diff = sorted(k for k in set(first) | set(other)
                      if k not in free and first.get(k) != other.get(k))
        if diff:
            shown = ", ".join(f"{k}: {first.get(k)!r} vs {other.get(k)!r}" for k in diff[:5])
            raise LengenError(f"configs 0 and {j} cannot be trained as one group ({shown}); a group may "
                              f"differ only in {', '.join(PER_MODEL)} and the evaluation settings "
                              f"({', '.join(PER_MODEL_EVAL)})")
    if cfgs[0].model.architecture != "transformer":
        raise LengenError(f"train_group trains Transformer models, not {cfgs[0].model.architecture!r}; "
                          "train recurrent models one at a time (lengen train)")


# -- the stack ------------------------------------------------------------------------------------

class _PaddedLogits(nn.Module):
    """functional_call runs a module's forward: this one's is the model's own padded_logits."""

    def __init__(self, model: CHEModel):
        super().__init__()
        self.model = model

    def forward(self, tokens, pos, readout_index, stack: StackMember):
        return self.model.padded_logits(tokens, pos, readout_index, stack)


class _Stack:
    """Stacked parameters, Adam state, per-model hyperparameters and dropout streams of N models;
    their forward is the first model's own (CHEModel.padded_logits) under vmap over the stack."""

    def __init__(self, models: list[CHEModel], cfgs: list[TrainConfig], dropout_gens, device):
        self.models, self.cfgs, self.device = models, cfgs, device
        self.n = len(models)
        self.names = [n for n, _ in models[0].named_parameters()]
        self.params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models]).to(device)
                       .requires_grad_(True) for n in self.names}
        self.exp_avg = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p) for n, p in self.params.items()}
        self.adam_step = 0
        self.lr = torch.tensor([c.lr for c in cfgs], dtype=torch.float32, device=device)
        self.clip = torch.tensor([c.grad_clip for c in cfgs], dtype=torch.float32, device=device)
        self.forward = _PaddedLogits(models[0])
        self.pe = models[0].encoder.pe
        self.attention = attention_for_stack(device)
        self.dropout = [c.model.dropout for c in cfgs]
        self.dropout_gens = dropout_gens
        # the model calls each Dropout module once per forward (checked in _one)
        self.dropout_calls = sum(isinstance(m, Dropout) for m in models[0].modules())
        self.d_model = cfgs[0].model.d_model

    def _one(self, params, tokens, pos, key_bias, n_keys, out_idx, keep, scale):
        member = StackMember(key_bias, n_keys, self.attention, None if keep is None else list(keep.unbind(0)), scale)
        named = {f"model.{n}": p for n, p in params.items()}
        logits = functional_call(self.forward, named, (tokens, pos, out_idx, member))
        if member.dropout_keep:
            raise RuntimeError(f"the forward used {self.dropout_calls - len(member.dropout_keep)} of the "
                               f"{self.dropout_calls} planned dropout masks")
        return logits

    def dropout_masks(self, members: list[int], totals: list[int], batch: int, T: int):
        """Bool keep masks [M, calls, B, T, d_model] and factors 1/(1 - p) [M] of the members, or
        (None, None) when none of them drops. On the CPU each member draws from its own generator
        exactly what its forward would draw alone (bernoulli_keep_mask, call by call, at its real
        length; its padding keeps everything); on CUDA one draw serves the stack (one model alone
        draws through F.dropout there, whose stream no other kernel reproduces)."""
        rates = [self.dropout[i] for i in members]
        if not any(rates):
            return None, None
        M, S, D = len(members), self.dropout_calls, self.d_model
        scale = torch.tensor([1.0 / (1.0 - p) for p in rates], dtype=torch.float32, device=self.device)
        if self.device.type == "cuda":
            p = torch.tensor(rates, device=self.device).view(M, 1, 1, 1, 1)
            return torch.rand((M, S, batch, T, D), device=self.device) >= p, scale
        keep = torch.ones((M, S, batch, T, D), dtype=torch.bool)
        for j, (i, t, p) in enumerate(zip(members, totals, rates)):
            if p > 0:
                for call in range(S):
                    keep[j, call, :, :t] = bernoulli_keep_mask((batch, t, D), p, self.dropout_gens[i])
        return keep, scale

    def project(self):
        """The encoding's parameter bounds on the whole stack, as its forward projects them (a
        bucket of members runs on a copy of their rows, so the stack itself is projected here)."""
        with torch.no_grad():
            for name, (lo, hi) in self.pe.bounds.items():
                self.params[f"encoder.pe.{name}"].clamp_(min=lo, max=hi)

    def __call__(self, tokens, pos, key_bias, n_keys, out_idx, keep=None, scale=None,
                 members: torch.Tensor | None = None):
        """Logits [M, B, O, V] of the models `members` (indices into the stack; None: all N) on
        their step tensors (each with M rows). Gradients reach the whole stack's parameters."""
        params = self.params
        if members is not None:
            params = {n: p.index_select(0, members) for n, p in params.items()}
        self.pe.check_positions(pos)  # outside vmap: the check reads values
        drop = 0 if keep is not None else None
        return vmap(self._one, in_dims=(0, 0, 0, 0, 0, 0, drop, drop))(
            params, tokens, pos, key_bias, n_keys, out_idx, keep, scale)

    def train(self, flag: bool = True):
        self.forward.train(flag)

    @torch.no_grad()
    def clip_and_step(self):
        """torch.nn.utils.clip_grad_norm_ per model (the norm of its own gradient), then Adam
        (torch's update rule) with each model's learning rate."""
        grads = [self.params[n].grad for n in self.names]
        N = self.n
        norms = torch.stack([torch.linalg.vector_norm(g.reshape(N, -1), dim=1) for g in grads])  # [K, N]
        total = torch.linalg.vector_norm(norms, dim=0)
        coef = (self.clip / (total + 1e-6)).clamp(max=1.0)
        self.adam_step += 1
        b1, b2 = BETAS
        bc1 = 1 - b1 ** self.adam_step
        bc2_sqrt = math.sqrt(1 - b2 ** self.adam_step)
        step_size = self.lr / bc1
        for n, g in zip(self.names, grads):
            shape = (N,) + (1,) * (g.dim() - 1)
            g.mul_(coef.view(shape))
            m, v, p = self.exp_avg[n], self.exp_avg_sq[n], self.params[n]
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / bc2_sqrt).add_(EPS)
            p.sub_(step_size.view(shape) * m / denom)
            p.grad = None

    # -- per-model views (checkpoints, evaluation) ------------------------------------------------
    def optimizer(self, i: int) -> torch.optim.Adam:
        model = self.models[i]
        return torch.optim.Adam(model.parameters(), lr=self.cfgs[i].lr, betas=BETAS, eps=EPS,
                                fused=fused_optimizer_ok(model))

    @torch.no_grad()
    def unstack(self, i: int, optimizer: torch.optim.Adam | None = None) -> None:
        """Model i's weights (and Adam state) from the stack into its CHEModel (and optimizer)."""
        named = dict(self.models[i].named_parameters())
        for n in self.names:
            named[n].copy_(self.params[n][i])
            if optimizer is not None and self.adam_step > 0:
                optimizer.state[named[n]] = {
                    "step": torch.tensor(float(self.adam_step), dtype=torch.float32),
                    "exp_avg": self.exp_avg[n][i].clone(), "exp_avg_sq": self.exp_avg_sq[n][i].clone()}

    @torch.no_grad()
    def restack(self, i: int, optimizer: torch.optim.Adam, step: int) -> None:
        """Model i's weights and Adam state (restored from its checkpoint) into the stack."""
        named = dict(self.models[i].named_parameters())
        for n in self.names:
            p = named[n]
            self.params[n][i].copy_(p)
            state = optimizer.state.get(p)
            if state:
                self.exp_avg[n][i].copy_(state["exp_avg"])
                self.exp_avg_sq[n][i].copy_(state["exp_avg_sq"])
        self.adam_step = step


# -- one step ---------------------------------------------------------------------------------------

def _draw(parts: RunParts, cfg: TrainConfig, np_rng, gen):
    """One model's step data, drawn exactly as train_step draws it."""
    length = int(np_rng.integers(1, cfg.train_length + 1))
    batch = parts.task.sample(cfg.batch_size, length, np_rng)
    out_len = parts.task.output_length(length)
    positions = parts.train_sampler(total_length(parts.task, length), gen)
    return batch, out_len, positions


def _pad(draws, empty_token: int, device):
    """The padded step tensors: tokens [N, B, T], positions [N, 1|B, T], key bias [N, T],
    real lengths [N], readout indices [N, O], targets and masks [N, B, O], loss weights [N, 1, O]."""
    N = len(draws)
    B = draws[0][0].inputs.shape[0]
    totals = [b.inputs.shape[1] + o for b, o, _ in draws]
    T, O = max(totals), max(o for _, o, _ in draws)
    pb = max(p.shape[0] for _, _, p in draws)
    tokens = torch.full((N, B, T), empty_token, dtype=torch.int64)
    pos = torch.zeros((N, pb, T), dtype=draws[0][2].dtype)
    key_bias = torch.zeros((N, T))
    out_idx = torch.empty((N, O), dtype=torch.int64)
    targets = torch.zeros((N, B, O), dtype=torch.int64)
    mask = torch.zeros((N, B, O), dtype=torch.bool)
    weight = torch.zeros((N, 1, O))
    for i, ((batch, o, p), t) in enumerate(zip(draws, totals)):
        L = batch.inputs.shape[1]
        tokens[i, :, :L] = batch.inputs
        pos[i, :, :t] = p
        key_bias[i, t:] = float("-inf")
        out_idx[i] = (L + torch.arange(O)).clamp(max=T - 1)
        targets[i, :, :o] = batch.targets
        mask[i, :, :o] = batch.mask
        weight[i, 0, :o] = 1.0 / (B * o)
    n_keys = torch.tensor(totals, dtype=torch.float32)
    out = (tokens, pos, key_bias, n_keys, out_idx, targets, mask, weight)
    return out if torch.device(device).type == "cpu" else tuple(x.to(device, non_blocking=True) for x in out)


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


def group_step(stack: _Stack, parts: list[RunParts], cfgs: list[TrainConfig], rngs, gens, device,
               buckets: int = 1, overhead: float = 0.0):
    """One step of every model; returns (loss, correct, count), each [N], on `device`. Models are
    run in at most `buckets` groups of similar drawn length (plan_buckets, `overhead` per group),
    each padded to its own longest: fewer padded tokens for more, smaller launches."""
    draws = [_draw(p, c, r, g) for p, c, r, g in zip(parts, cfgs, rngs, gens)]
    totals = [b.inputs.shape[1] + o for b, o, _ in draws]
    plan = plan_buckets(totals, buckets, overhead)
    N = len(draws)
    loss = torch.zeros(N, device=device)
    correct = torch.zeros(N, dtype=torch.int64, device=device)
    count = torch.zeros(N, dtype=torch.int64, device=device)
    stack.project()
    for members in plan:
        tokens, pos, key_bias, n_keys, out_idx, targets, mask, weight = _pad(
            [draws[i] for i in members], parts[0].model.empty_token, device)
        keep, scale = stack.dropout_masks(members, [totals[i] for i in members], tokens.shape[1], tokens.shape[2])
        rows = torch.tensor(members, device=device)
        with precision_context(cfgs[0].precision, device):
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


# -- the loop -----------------------------------------------------------------------------------------

def train_group(cfgs: list[TrainConfig], outs: list[str | Path], progress: bool = True,
                evaluate: bool = True, buckets: int | None = None) -> list[dict]:
    """Train (or resume) the runs `outs[i]` of `cfgs[i]` together, then evaluate each; returns
    their eval records, in order (as `train` returns one). A member whose loss diverges keeps its
    last good checkpoint and stops being saved; the others train on, and TrainingDiverged is
    raised at the end, after their evaluations. `buckets`: at most this many length groups per
    step, padded work least (group_step); None: as many as pay for their launches on the device
    (bucket_overhead). It changes speed, not results."""
    cfgs, outs = list(cfgs), [Path(o) for o in outs]
    if len(cfgs) != len(outs):
        raise LengenError(f"{len(cfgs)} configs but {len(outs)} run directories")
    if len({o.resolve() for o in outs}) != len(outs):
        raise LengenError("train_group: two members share one run directory")
    check_groupable(cfgs)
    if buckets is not None and buckets < 1:
        raise LengenError(f"buckets must be at least 1, not {buckets}")
    device = resolve_device(cfgs[0].device)
    parts, dropout_gens = [], []
    for cfg in cfgs:
        torch.manual_seed(cfg.seed)  # as train(): the seed fixes the initial weights
        parts.append(build_run(cfg))
        # train() draws its CPU dropout masks from the global generator as it stands now
        dropout_gens.append(torch.Generator())
        dropout_gens[-1].set_state(torch.get_rng_state())
    sessions = [TrainingSession(RunDir(out), cfg.to_dict(), TrainConfig.IDENTITY, cfg.steps,
                                normalize=lambda saved, out=out: TrainConfig.from_dict(saved, where=str(out)).to_dict())
                for cfg, out in zip(cfgs, outs)]
    models = [p.model.to(device) for p in parts]
    optimizers: list[torch.optim.Adam] = []
    rngs = [np.random.default_rng(c.seed) for c in cfgs]
    gens = [torch.Generator().manual_seed(c.seed) for c in cfgs]
    windows = [Window() for _ in cfgs]
    ckpts = []
    for i, (session, model, cfg) in enumerate(zip(sessions, models, cfgs)):
        optimizers.append(torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=BETAS, eps=EPS,
                                           fused=fused_optimizer_ok(model)))
        ckpt = session.restore(model, optimizers[i])
        if ckpt is not None:
            restore_run_rng(ckpt["rng"], rngs[i], gens[i], device)
            dropout_gens[i].set_state(ckpt["rng"]["torch"])
            windows[i] = Window(ckpt["window"])
        ckpts.append(ckpt)
    steps = cfgs[0].steps
    active = [i for i, s in enumerate(sessions) if s.step < steps]
    at = {sessions[i].step for i in active}
    if len(at) > 1:
        shown = ", ".join(f"{outs[i]}: step {sessions[i].step}" for i in active)
        raise LengenError(f"the group's unfinished members stand at different steps ({shown}); finish them "
                          "one at a time (lengen train) or group members at one step")

    if active:
        _train_members(active, cfgs, parts, models, optimizers, sessions, rngs, gens, dropout_gens, windows,
                       ckpts, device, progress, buckets)
    # each member's training time, read before any member is evaluated (the members trained
    # together; a member evaluated later must not count the evaluations before it)
    trained = [session.elapsed() for session in sessions]
    diverged = [i for i in active if getattr(sessions[i], "diverged", None)]
    records: list[dict] = []
    for i, (cfg, session, part) in enumerate(zip(cfgs, sessions, parts)):
        if not evaluate or i in diverged:
            records.append({})
            continue
        if ckpts[i] is None and cfg.steps == 0:
            session.save(models[i], optimizers[i], rng=_member_rng(rngs[i], gens[i], dropout_gens[i], device),
                         window=windows[i].state())
        if session.step == session.resumed_at:
            previous = reusable_eval(session.run, cfg, part.test_mode, device, session.step)
            if previous is not None:
                records.append(previous)
                continue
        records.append(evaluate_run(session.run, parts=part, cfg=cfg, progress=progress,
                                    train_seconds=trained[i]))
    if diverged:
        raise TrainingDiverged("; ".join(f"{outs[i]}: {sessions[i].diverged}" for i in diverged))
    return records


def _member_rng(np_rng, gen, dropout_gen, device) -> dict:
    """A member's random streams as `train` checkpoints them: its own dropout generator is the
    CPU stream `train` would continue from."""
    return {**run_rng_state(np_rng, gen, device), "torch": dropout_gen.get_state()}


def _train_members(active, cfgs, parts, models, optimizers, sessions, rngs, gens, dropout_gens, windows, ckpts,
                   device, progress, buckets):
    sub = [cfgs[i] for i in active]
    stack = _Stack([models[i] for i in active], sub, [dropout_gens[i] for i in active], device)
    start = sessions[active[0]].step
    for j, i in enumerate(active):
        if ckpts[i] is not None:
            stack.restack(j, optimizers[i], start)
    if ckpts[active[0]] is not None:  # on CUDA the group's one dropout stream continues from the first member's
        restore_rng_state(ckpts[active[0]]["rng"], device)
    cfg = sub[0]
    sums = [torch.zeros(len(active), device=device), torch.zeros(len(active), dtype=torch.int64, device=device),
            torch.zeros(len(active), dtype=torch.int64, device=device)]
    base = [windows[i].state() for i in active]  # a resumed window's sums so far
    counted = 0

    def window_state(j):
        b = base[j]
        return {"loss": b["loss"] + float(sums[0][j]), "correct": b["correct"] + int(sums[1][j]),
                "count": b["count"] + int(sums[2][j]), "steps": b["steps"] + counted}

    stack.train(True)
    # None: any number of buckets, each paying for its launches; a number: least padding within it
    max_buckets, overhead = (len(active), bucket_overhead(cfg, device)) if buckets is None else (buckets, 0.0)
    sub_parts = [parts[i] for i in active]
    sub_rngs, sub_gens = [rngs[i] for i in active], [gens[i] for i in active]
    bar = progress_bar(cfg.steps, f"train {len(active)} x {cfg.task} {cfg.model.pe}/{cfg.positions}",
                       disable=not progress, initial=start, unit="step")
    step = start
    while step < cfg.steps:
        loss, correct, count = group_step(stack, sub_parts, sub, sub_rngs, sub_gens, device, max_buckets, overhead)
        sums[0] += loss
        sums[1] += correct
        sums[2] += count
        counted += 1
        step += 1
        bar.update(1)
        for i in active:
            sessions[i].step = step
        if step % cfg.log_every == 0 or step == cfg.steps:
            for j, i in enumerate(active):
                if getattr(sessions[i], "diverged", None):
                    continue
                try:
                    sessions[i].add_row(Window(window_state(j)).row(step))
                except TrainingDiverged as e:
                    sessions[i].diverged = str(e)
            base = [Window().state() for _ in active]
            sums = [torch.zeros_like(s) for s in sums]
            counted = 0
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            for j, i in enumerate(active):
                if getattr(sessions[i], "diverged", None):
                    continue
                stack.unstack(j, optimizers[i])
                sessions[i].save(models[i], optimizers[i], rng=_member_rng(rngs[i], gens[i], dropout_gens[i], device),
                                 window=window_state(j))
    bar.close()
    for j, i in enumerate(active):
        stack.unstack(j)
        windows[i] = Window(window_state(j))
