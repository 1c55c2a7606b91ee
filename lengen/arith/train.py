"""Train an arithmetic decoder with lengen's LM loop (lengen.training.corpus_loop: AdamW, warmup + cosine
schedule, resumable checkpoints holding every random stream), then evaluate it over the heat map
(lengen.arith.evaluate) into eval.json. Each step draws a fresh batch of problems (the loop's
numpy generator); the loss is the cross-entropy of the answer tokens and the EOS after them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lengen.arith.batch import IGNORE, collate
from lengen.arith.config import ArithConfig
from lengen.arith.evaluate import evaluate_model
from lengen.arith.feed import Feeder
from lengen.arith.formats import encode
from lengen.arith.model import ArithLM, build_model
from lengen.devices import precision_context, resolve_device, to_device
from lengen.training.corpus_loop import CorpusObjective, train_on_corpus
from lengen.models.config import model_label


class TaskData:
    """What the LM loop records as the run's data (its `corpus`)."""

    def __init__(self, cfg: ArithConfig):
        self.cfg = cfg

    def summary(self) -> str:
        c = self.cfg
        return f"{c.task} in the {c.format} format, operands of 1..{c.train_digits} digits, fresh problems every step"


def answer_loss(model: ArithLM, batch, positions: torch.Tensor, ids: torch.Tensor | None,
                precision: str = "fp32") -> torch.Tensor:
    """Mean cross-entropy of the answer tokens and their EOS, the prompt and padding left out."""
    with precision_context(precision, batch.tokens.device):
        logits = model(batch.tokens[:, :-1], positions[:, :-1], None if ids is None else ids[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch.targets.reshape(-1),
                           ignore_index=IGNORE)


def train_arith(cfg: ArithConfig, out: str | Path, progress: bool = True,
                on_log: Callable[[int, dict], None] | None = None, note: Callable[[str], None] | None = print) -> dict:
    """Train (or resume) the run in `out`; write eval.json (the heat map up to cfg.test_digits);
    return its record (`note` as for lengen.training.corpus_loop.train_on_corpus)."""
    cfg.validate()
    device = resolve_device(cfg.device)
    task, feeder = cfg.build_task(), Feeder(cfg)
    model = build_model(cfg).to(device)
    offsets = torch.Generator().manual_seed(cfg.seed)  # coupling's s and Abacus's k

    def batch_loss(np_rng: np.random.Generator) -> torch.Tensor:
        batch = collate([encode(p, cfg.format) for p in task.sample(cfg.batch_size, cfg.train_digits, np_rng)])
        positions, ids = feeder(batch.tokens, batch.significance, offsets, train=True,
                                answer_width=batch.answer_width)
        batch.tokens, batch.targets, positions = to_device(device, batch.tokens, batch.targets, positions)
        if ids is not None:
            (ids,) = to_device(device, ids)
        return answer_loss(model, batch, positions, ids, cfg.precision)

    def validate() -> dict:
        return evaluate_model(model, cfg, cfg.test_digits, cfg.eval_samples, cfg.eval_seed, device, progress)

    objective = CorpusObjective(batch_loss=batch_loss, validate=validate, label=f"arith {cfg.task} {cfg.pe}",
                                readout=lambda loss: {}, generators={"offsets": offsets},
                                describe={"task": cfg.task, "pe": cfg.pe, "label": model_label(cfg.model, cfg.pe),
                                          "positions": cfg.positions,
                                          "format": cfg.format})
    return train_on_corpus(cfg, out, model, device, TaskData(cfg), objective, progress, on_log, note)
