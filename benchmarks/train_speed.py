"""Training steps/s and evaluation samples/s of the seed paper's CHE model, per encoding, with
standard and randomized positions, and of the CHE benchmark's recurrent baselines (--models),
against a plain PyTorch port (nn.TransformerEncoder, sinusoid positions) measured in the same run.

Setting of the targets: reverse_string, batch 128, one length per step from U{1..40}; evaluation
at input length 500 (1000 encoder tokens). Targets on a 2-core CPU: >= 10 train steps/s and
>= 50 eval samples/s. Timings on a shared machine are noisy: compare rows of one run.

    python benchmarks/train_speed.py                         # every registered encoding
    python benchmarks/train_speed.py --encodings rope,alibi --steps 30
    python benchmarks/train_speed.py --encodings rope --models transformer,rnn,lstm,stack_rnn,tape_rnn
    # model variants beside the encodings (standard positions): LABEL|FIELD=VALUE|FIELD=VALUE
    python benchmarks/train_speed.py --encodings rope --variant "ssmax|logit_scale=ssmax" \
        --variant "rope/nope 3:1 + llama4|layer_pe=rope,rope,rope,none|logit_scale=llama4_temperature"
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
from torch import nn

from lengen.cli.options import format_table
from lengen.formatting import count_noun
from lengen.encodings import ENCODINGS
from lengen.encodings.sincos import sinusoid_table
from lengen.models import ARCHITECTURES, CHEModel, ModelConfig, build_model
from lengen.models.config import ARCHITECTURE_LABELS
from lengen.positions import build_sampler
from lengen.tasks import get_task
from lengen.che.evaluation import masked_accuracy_counts
from lengen.training.optim import fused_optimizer_ok


class PlainPort(nn.Module):
    """What a straightforward port looks like: nn.TransformerEncoder, post-LN, sinusoid PE."""

    def __init__(self, vocab_in, vocab_out, d=64, heads=8, layers=5, ff=256, dropout=0.1):
        super().__init__()
        self.empty = vocab_in
        self.embed = nn.Embedding(vocab_in + 1, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout, batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.readout = nn.Linear(d, vocab_out)
        self.d = d

    def forward(self, inputs, out_len, positions=None):
        B, L = inputs.shape
        tokens = torch.cat([inputs, torch.full((B, out_len), self.empty)], 1)
        pos = torch.arange(tokens.shape[1])[None]
        h = self.embed(tokens) * math.sqrt(self.d) + sinusoid_table(pos, self.d)
        return self.readout(self.encoder(h)[:, L:])


def time_training(model, task, sampler, steps, batch, n_max, seed=0):
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    # lengen's models get the optimizer of lengen's training loop (fused Adam); the plain port
    # the stock one, as a straightforward port would
    fused = fused_optimizer_ok(model) and not isinstance(model, PlainPort)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, fused=fused)
    model.train()
    lengths = rng.integers(1, n_max + 1, size=steps + 3)

    def step(length):
        b = task.sample(batch, int(length), rng)
        out_len = task.output_length(int(length))
        pos = sampler(task.input_length(int(length)) + out_len, gen)
        logits = model(b.inputs, out_len, pos)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), b.targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        masked_accuracy_counts(logits.detach(), b.targets, b.mask)

    for length in lengths[:3]:  # warm-up
        step(length)
    start = time.perf_counter()
    for length in lengths[3:]:
        step(length)
    return steps / (time.perf_counter() - start)


@torch.inference_mode()
def time_eval(model, task, sampler, length, samples, batch):
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    model.eval()
    out_len = task.output_length(length)
    total = task.input_length(length) + out_len

    def run(n):
        b = task.sample(n, length, rng)
        model(b.inputs, out_len, sampler(total, gen))

    run(min(batch, 4))
    start = time.perf_counter()
    done = 0
    while done < samples:
        n = min(batch, samples - done)
        run(n)
        done += n
    return samples / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encodings", default=",".join(ENCODINGS.names()))
    p.add_argument("--models", default="transformer",
                   help="comma-separated architectures: transformer (one row per encoding and positions), "
                        "rnn, lstm, stack_rnn, tape_rnn (one row each, benchmark sizes)")
    p.add_argument("--task", default="reverse_string")
    p.add_argument("--steps", type=int, default=40, help="timed training steps per row")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--train-length", type=int, default=40)
    p.add_argument("--eval-length", type=int, default=500)
    p.add_argument("--eval-samples", type=int, default=64, help="timed evaluation samples per row")
    p.add_argument("--eval-batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--variant", action="append", default=[], metavar="LABEL|FIELD=VALUE|...",
                   help="a Transformer with these ModelConfig fields (text values), standard positions; repeatable")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    task = get_task(args.task)
    rows = []

    def measure(label, positions, make_model, sampler):
        torch.manual_seed(0)
        train = time_training(make_model(), task, sampler, args.steps, args.batch_size, args.train_length)
        torch.manual_seed(0)
        ev = time_eval(make_model(), task, sampler, args.eval_length, args.eval_samples, args.eval_batch)
        rows.append([label, positions, train, ev])
        print(f"  {label:16s} {positions:10s} train {train:6.2f} steps/s   eval {ev:6.1f} samples/s", flush=True)

    standard = build_sampler("standard")
    measure("plain port", "standard", lambda: PlainPort(task.input_vocab_size, task.output_vocab_size), standard)
    base_train, base_eval = rows[0][2], rows[0][3]
    models = args.models.split(",")
    unknown = set(models) - set(ARCHITECTURES)
    if unknown:
        p.error(f"unknown models {sorted(unknown)}; valid: {', '.join(ARCHITECTURES)}")
    for arch in models:
        if arch != "transformer":  # recurrent: no positions (the sampler's output is ignored)
            cfg = ModelConfig(architecture=arch)
            measure(ARCHITECTURE_LABELS[arch], "-",
                    lambda: build_model(cfg, task.input_vocab_size, task.output_vocab_size), standard)
            continue
        for pe in args.encodings.split(","):
            for positions in ("standard", "randomized"):
                cfg = ModelConfig(pe=pe, train_tokens=2 * args.train_length)
                sampler = build_sampler(positions, max_position=cfg.max_position)
                measure(pe, positions, lambda: CHEModel(cfg, task.input_vocab_size, task.output_vocab_size),
                        sampler)
    for spec in args.variant:
        label, *pairs = spec.split("|")
        fields = dict(pair.split("=", 1) for pair in pairs)
        cfg = ModelConfig(train_tokens=2 * args.train_length, **fields)
        measure(label, "standard", lambda: CHEModel(cfg, task.input_vocab_size, task.output_vocab_size), standard)
    table = [[r[0], r[1], r[2], r[2] / base_train, r[3], r[3] / base_eval] for r in rows]
    print(f"\n{args.task}, batch {args.batch_size}, lengths 1..{args.train_length}; eval at length "
          f"{args.eval_length}; torch {torch.__version__}, {count_noun(torch.get_num_threads(), 'thread')}")
    print(format_table(["model / encoding", "positions", "train steps/s", "x plain", "eval samples/s", "x plain"],
                       table, floatfmt="{:.2f}"))


if __name__ == "__main__":
    main()
