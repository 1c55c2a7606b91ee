"""CPU threads: OpenMP waits passively on a busy machine, --threads on every CHE command."""

import os
import subprocess
import sys
import time

import pytest
import torch

from lengen._openmp import busy_cores, choose_wait_policy
from lengen.cli import main


def _policy_beside_a_busy_core():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        code = "import os, lengen; print(os.environ.get('OMP_WAIT_POLICY'), '|', lengen.OPENMP_WAIT)"
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True).stdout.strip()
    finally:
        hog.kill()
        hog.wait()


def test_beside_a_busy_core_openmp_waits_passively():
    policy, decision = _policy_beside_a_busy_core().split(" | ")
    assert policy == "PASSIVE" and decision.startswith("passive")


def test_the_decision():
    env = {}
    assert choose_wait_policy(env, measure=lambda: 1.0).startswith("passive") and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {}
    assert choose_wait_policy(env, measure=lambda: 0.2) == "default" and env == {}
    assert choose_wait_policy(env, measure=lambda: None) == "default" and env == {}
    for user in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "1000"}):
        env = dict(user)
        assert choose_wait_policy(env, measure=lambda: 2.0) == "user" and env == user


def test_busy_cores_from_proc_stat_samples():
    # user nice system idle iowait irq softirq steal guest guest_nice
    reads = iter(["cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 ...", "cpu  150 0 150 750 150 0 0 0 0 0\n"])
    # busy +100 of +200 jiffies on 4 cores: 2 cores busy (iowait counts as idle)
    assert busy_cores(read=lambda: next(reads), sleep=lambda s: None, cores=4) == pytest.approx(2.0)
    assert busy_cores(read=lambda: "garbage", sleep=lambda s: None) is None


@pytest.mark.parametrize("command", [["train"], ["demo"], ["eval", "somewhere"],
                                     ["sweep", "run", "spec.yaml", "--out", "o"], ["lm", "train"],
                                     ["lm", "eval", "somewhere"], ["hf", "eval", "somewhere", "--lengths", "4k"]])
def test_threads_must_be_positive(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([*command, "--threads", "0"]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_train_threads_sets_torch_threads(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    assert main(["train", "--task", "parity_check", "--steps", "2", "--train-length", "2", "--max-length", "2",
                 "--eval-samples", "2", "--layers", "1", "--d-model", "8", "--heads", "2", "--d-ff", "8",
                 "--no-progress", "--device", "cpu", "--threads", "1", "--out", str(tmp_path / "r")]) == 0
    assert calls == [1]


def _composite_layer_norm(self, x):
    # LayerNorm from elementwise ops and per-row reductions: its parameter gradients are sums
    # that torch reduces in the same order at any thread count, unlike the fused CPU kernel's
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + self.eps) * self.weight + self.bias


def _weight_gradient_product_is_thread_invariant() -> bool:
    """Whether torch's own matrix product of a weight gradient's shape (the run below: 64 x 41
    rows reduced into a 192 x 64 gradient) gives the same bits on 1 and 2 threads here."""
    g = torch.Generator().manual_seed(0)
    x, grad = torch.randn(64 * 41, 64, generator=g), torch.randn(64 * 41, 192, generator=g)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            outs.append(grad.T @ x)
    finally:
        torch.set_num_threads(before)
    return torch.equal(*outs)


def test_lengen_s_own_computations_do_not_depend_on_the_thread_count(tmp_path, monkeypatch):
    """docs/results/demo.md: a CHE run's numbers change with the CPU thread count only through torch's
    fused LayerNorm backward. With it replaced, training (fused attention kernel, RoPE's
    backward, dropout masks, fused Adam, clipping) gives the same bits on 1 and 2 threads."""
    from lengen.io import load_torch
    from lengen.models import ModelConfig
    from lengen.che.config import TrainConfig
    from lengen.che.loop import train

    from lengen.kernels.layer_norm import LayerNorm

    if not _weight_gradient_product_is_thread_invariant():
        pytest.skip("this CPU's torch matrix product (a weight gradient's shape) already differs between 1 and 2 "
                    "threads (it splits the long reduction by thread: seen on an AVX-512 Xeon), so the run "
                    "cannot show whether lengen's own code does")
    monkeypatch.setattr(torch.nn.LayerNorm, "forward", _composite_layer_norm)
    monkeypatch.setattr(LayerNorm, "forward", _composite_layer_norm)  # the models' own subclass
    model = ModelConfig(num_layers=2, num_heads=8, d_model=64, d_ff=256, dropout=0.1, pe="rope")
    cfg = TrainConfig(task="reverse_string", model=model, steps=20, batch_size=64, train_length=20,
                      max_length=21, lr=1e-3, device="cpu", checkpoint_every=20, log_every=10)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            train(cfg, tmp_path / f"t{threads}", progress=False, evaluate=False)
    finally:
        torch.set_num_threads(before)
    one, two = (load_torch(tmp_path / f"t{t}" / "checkpoint.pt")["model"] for t in (1, 2))
    assert all(torch.equal(one[k], two[k]) for k in one), [k for k in one if not torch.equal(one[k], two[k])]
