"""The learning test: addition on operands of 1-5 digits, scored on every cell up to 8 digits.
With position coupling (Cho et al.'s padded format and ids, their learned absolute table) a
1-layer decoder learns the training cells and carries the algorithm to 8 digits; with standard
positions (0..T-1 into the same kind of table) the same model and steps get nothing past 5 digits.

Sizes: 1 layer, d_model 64, 4 heads, 4,000 steps of 64 problems at lr 3e-3, 10 problems per cell;
coupled ids below 16 (max_pos 15 = the 8-digit evaluation's largest id, 10, + 5; Cho et al.'s
5-to-10-digit script keeps the same margin, 17 = 10 + 7 with 12 used), standard positions below 32
(the 29 tokens of an 8-digit problem). One thread. Each run: about 50 s of CPU (measured, two seeds:
0 and 1, on the 2-core dev machine under other load); the whole file 82-98 s of CPU. Planted bug: the
ids in the reference note's direction (s + 1 + t) fail test_coupling_generalizes_to_8_digits.

Measured with these settings (seeds 0 / 1 / 2): coupling 100% of the training cells, the 6-8-digit
diagonal 100% / 100% / 90-100%, the cells with an 8-digit operand 91% / 77% / 90% on average, every
cell past 5 digits 97% / 91% / 96%; standard positions (seed 0) fit 39% of the training cells and
none past them. The note's id direction in the same setting: 70% / 10% / 0% at 8 digits.
So the contrast is coupling learning and generalizing against standard positions not even fitting
the training range at this budget (the papers' standard baselines fit it and then fail past it).

What made it hold (docs/arithmetic.md): coupled ids as Cho et al.'s code assigns them (the answer
counts down to s, so the EOS follows the same id at every length; the reverse direction never
stopped after the 9th answer digit) and a table no larger than the evaluation needs plus a margin
(ids up to 31 left the low ids that s = 1 evaluation reads rarely trained: 8-digit sums 40%).
Abacus embeddings with NoPE need more than this budget (their first answer digit is predicted at
'=', whose abacus id is 0), so the test uses coupling."""

import pytest
import torch

from lengen.arith.options import arith_config_from_options
from lengen.arith.train import train_arith

PROTOCOL = {"task": "addition", "format": "padded", "pe": "learned", "layers": 1, "d_model": 64, "heads": 4,
            "d_ff": 128, "batch_size": 64, "lr": 3.0e-3, "warmup": 50, "steps": 4000, "train_digits": 5,
            "test_digits": 8, "eval_samples": 10, "log_every": 1000, "checkpoint_every": 4000, "device": "cpu",
            "seed": 0}
TABLE = {"coupled": 16, "standard": 32}   # max-position: 8-digit evaluation's ids + a margin; its 29 tokens


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("arith-learning")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # one thread: the same float sums, so the same run, on every machine
    try:
        return {positions: train_arith(arith_config_from_options({**PROTOCOL, "positions": positions,
                                                                  "max_position": TABLE[positions]}),
                                       root / positions, progress=False)
                for positions in ("coupled", "standard")}
    finally:
        torch.set_num_threads(threads)


def cells(result: dict) -> dict:
    return {(c["i"], c["j"]): c["accuracy"] for c in result["cells"]}


def test_coupling_learns_the_training_cells(runs):
    assert runs["coupled"]["in_distribution"] >= 0.95


def test_coupling_generalizes_to_8_digits(runs):
    by_length = runs["coupled"]["accuracy_by_length"]
    assert min(by_length[n] for n in ("6", "7", "8")) >= 0.9, by_length
    # every cell with an 8-digit operand: the shorter one zero-padded to 8 digits
    eight = [acc for (i, j), acc in cells(runs["coupled"]).items() if max(i, j) == 8]
    assert len(eight) == 15 and sum(eight) / len(eight) >= 0.6, eight
    assert runs["coupled"]["out_of_distribution"] >= 0.8


def test_standard_positions_do_not(runs):
    by_length = runs["standard"]["accuracy_by_length"]
    assert max(by_length[n] for n in ("6", "7", "8")) <= 0.1, by_length
    assert runs["standard"]["out_of_distribution"] <= 0.1
