"""Train N CHE models of one task, encoding, sampler and shapes at once: stacked weights [N, ...],
one forward and one backward per step for all N, each model with what `lengen train` would give
it alone. The forward is the model's own (CHEModel.hidden and its readout, through the same
attention, encoding hooks and logit scaling) run by torch.func.functional_call under vmap over the
stacked weights, what differs per model injected as its runtime (lengen.che.stack.MemberRuntime);
this module holds only what is about groups: the stack, the buckets, the padding, the stacked
Adam and clipping, the dropout plan and the loop.

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

from pathlib import Path

import numpy as np
import torch

from lengen.devices import resolve_device, restore_rng_state
from lengen.errors import LengenError
from lengen.options import flatten
from lengen.progress import progress_bar
from lengen.training import deadline
from lengen.che.config import TrainConfig
from lengen.che.group_step import bucket_overhead, group_step
from lengen.che.loop import Window, evaluate_run, restore_run_rng, reusable_eval, run_rng_state
from lengen.training.run_dir import RunDir
from lengen.training.session import TrainingDiverged, TrainingSession
from lengen.che.setup import build_run
from lengen.training.optim import che_adam
from lengen.che.stack import ModelStack

#: config keys that may differ inside a group: they change the numbers, not the shapes
PER_MODEL = ("seed", "lr", "grad_clip", "model.dropout")
#: keys that only shape each model's own evaluation (done model by model after training)
PER_MODEL_EVAL = ("max_length", "eval_samples", "eval_seed", "eval_tokens", "test_positions")


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
        optimizers.append(che_adam(model, cfg.lr))
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

    diverged: dict[int, str] = {}  # member -> why it stopped (kept at its last good checkpoint)
    if active:
        diverged = _train_members(active, cfgs, parts, models, optimizers, sessions, rngs, gens, dropout_gens,
                                  windows, ckpts, device, progress, buckets)
    # each member's training time, read before any member is evaluated (the members trained
    # together; a member evaluated later must not count the evaluations before it)
    trained = [session.elapsed() for session in sessions]
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
                                    train_seconds=trained[i], group_size=len(active) if i in active else None))
    if diverged:
        raise TrainingDiverged("; ".join(f"{outs[i]}: {why}" for i, why in diverged.items()))
    return records


def _member_rng(np_rng, gen, dropout_gen, device) -> dict:
    """A member's random streams as `train` checkpoints them: its own dropout generator is the
    CPU stream `train` would continue from."""
    return {**run_rng_state(np_rng, gen, device), "torch": dropout_gen.get_state()}


def _train_members(active, cfgs, parts, models, optimizers, sessions, rngs, gens, dropout_gens, windows, ckpts,
                   device, progress, buckets) -> dict[int, str]:
    """Train the `active` members to cfg.steps; returns the members that diverged, with why."""
    sub = [cfgs[i] for i in active]
    stack = ModelStack([models[i] for i in active], sub, [dropout_gens[i] for i in active], device)
    start = sessions[active[0]].step
    for j, i in enumerate(active):
        if ckpts[i] is not None:
            stack.restack(j, optimizers[i], start)
    if ckpts[active[0]] is not None:  # on CUDA the group's one dropout stream continues from the first member's
        restore_rng_state(ckpts[active[0]]["rng"], device)
    cfg = sub[0]
    diverged: dict[int, str] = {}
    # the window's sums, a resumed window's included: the loss sum goes on in float32 from where a
    # checkpoint (one between two log lines too) left it, so the row equals the uninterrupted one
    base = [windows[i].state() for i in active]
    sums = [torch.tensor([b["loss"] for b in base], dtype=torch.float32, device=device),
            torch.tensor([b["correct"] for b in base], dtype=torch.int64, device=device),
            torch.tensor([b["count"] for b in base], dtype=torch.int64, device=device)]
    base_steps = [b["steps"] for b in base]
    counted = 0

    def window_state(j):
        return {"loss": float(sums[0][j]), "correct": int(sums[1][j]), "count": int(sums[2][j]),
                "steps": base_steps[j] + counted}

    stack.train(True)
    # None: any number of buckets, each paying for its launches; a number: least padding within it
    max_buckets, overhead = (len(active), bucket_overhead(cfg, device)) if buckets is None else (buckets, 0.0)
    sub_parts = [parts[i] for i in active]
    sub_rngs, sub_gens = [rngs[i] for i in active], [gens[i] for i in active]
    bar = progress_bar(cfg.steps, f"train {len(active)} x {cfg.task} {cfg.model.pe}/{cfg.positions}",
                       disable=not progress, initial=start, unit="step")

    def checkpoint():  # every live member's stack slice back into its model and optimizer, saved
        for j, i in enumerate(active):
            if i in diverged:
                continue
            stack.unstack(j, optimizers[i])
            sessions[i].save(models[i], optimizers[i], rng=_member_rng(rngs[i], gens[i], dropout_gens[i], device),
                             window=window_state(j))

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
                if i in diverged:
                    continue
                try:
                    sessions[i].add_row(Window(window_state(j)).row(step))
                except TrainingDiverged as e:
                    diverged[i] = str(e)
            base_steps = [0] * len(active)
            sums = [torch.zeros_like(s) for s in sums]
            counted = 0
        deadline.checkpoint_or_stop(step, cfg.steps, cfg.checkpoint_every, checkpoint, bar)
    bar.close()
    for j, i in enumerate(active):
        stack.unstack(j)
        windows[i] = Window(window_state(j))
    return diverged
