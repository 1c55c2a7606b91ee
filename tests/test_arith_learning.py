"""The learning test: addition on operands of 1-5 digits, scored on every cell up to 8 digits.
With position coupling (Cho et al.'s padded format, their learned absolute ids) a 1-layer decoder
learns the training cells and carries the algorithm to 6 and 7 digits; with standard positions
(0..T-1 into the same learned table) the same model and steps get nothing past 5 digits right.

Sizes: 1 layer, d_model 64, 4 heads, 2,000 steps of 64 problems at lr 3e-3, ids/positions below
32, 10 problems per cell. Both runs together: 38 s wall, 39 s CPU, on a 2-core CPU busy with two
other training processes.

What it does not show: at 8 digits this small model writes every answer digit right but does not
stop (no EOS after the 9th answer digit), so the (8, 8) cell stays near 0 at this budget; the
bounds below are on the 6- and 7-digit diagonal and on the whole out-of-distribution mean. And
the contrast is weaker than the papers': at this budget standard positions do not learn the
training cells either (about 8% of them; coupling about 100%), so the test shows coupling
learning faster and generalizing, not standard positions learning and then failing past 5 digits.
Abacus embeddings need more than this budget (their first answer digit is read from '=', whose
abacus id is 0), so the test uses coupling."""

import pytest

from lengen.arith.options import arith_config_from_options
from lengen.arith.train import train_arith

PROTOCOL = {"task": "addition", "format": "padded", "pe": "learned", "max_position": 32, "layers": 1,
            "d_model": 64, "heads": 4, "d_ff": 128, "batch_size": 64, "lr": 3.0e-3, "warmup": 50, "steps": 2000,
            "train_digits": 5, "test_digits": 8, "eval_samples": 10, "log_every": 400, "checkpoint_every": 2000,
            "device": "cpu"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("arith-learning")
    return {positions: train_arith(arith_config_from_options({**PROTOCOL, "positions": positions}),
                                   root / positions, progress=False)
            for positions in ("coupled", "standard")}


def test_coupling_learns_the_training_cells(runs):
    assert runs["coupled"]["in_distribution"] >= 0.95


def test_coupling_generalizes_past_the_training_digits(runs):
    by_length = runs["coupled"]["accuracy_by_length"]
    assert by_length["6"] >= 0.8 and by_length["7"] >= 0.6, by_length
    assert runs["coupled"]["out_of_distribution"] >= 0.5


def test_standard_positions_do_not(runs):
    by_length = runs["standard"]["accuracy_by_length"]
    assert max(by_length[n] for n in ("6", "7", "8")) <= 0.1, by_length
    assert runs["standard"]["out_of_distribution"] <= 0.1
