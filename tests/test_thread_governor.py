"""lengen._threads: the thread count follows load that arrives after start. Fake clocks, load
samplers and thread setters throughout: no test here depends on the machine's load or speed."""

import functools
import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from lengen import _openmp, _threads
from lengen._threads import LOWER_AT, RAISE_BELOW, OthersLoad, ThreadGovernor, decide
from lengen.cli import main
from lengen.models import ModelConfig
from lengen.sweeps.local import run_in_process
from lengen.che.config import TrainConfig
from lengen.che.group import train_group
from tiny_lm import TINY

_spec = importlib.util.spec_from_file_location("shared_cpu", os.path.join(os.path.dirname(__file__), "..",
                                                                          "benchmarks", "shared_cpu.py"))
shared_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shared_cpu)


class Fake:
    """torch's thread count, a clock and a load sampler, all set by the test."""

    def __init__(self, threads=2, load=None, user=None):
        self.threads, self.now, self.load, self.user_choice = threads, 0.0, load, user
        self.set_calls, self.samples = [], 0

    def sample(self):
        self.samples += 1
        return self.load

    def set(self, n):
        self.set_calls.append(n)
        self.threads = n

    def governor(self, cores=2, interval=1.0):
        return ThreadGovernor(get_threads=lambda: self.threads, set_threads=self.set, others_load=self.sample,
                              clock=lambda: self.now, cores=cores, interval=interval, user=lambda: self.user_choice)

    def tick(self, gov, load, dt=1.0):
        """`dt` seconds later, with others at `load` cores, one step ends."""
        self.now += dt
        self.load = load
        gov.between_steps()
        return self.threads


def started(fake, cores=2):
    """A governor that has taken its first (baseline) reading."""
    gov = fake.governor(cores=cores)
    fake.tick(gov, None, dt=0.0)
    return gov


@pytest.mark.parametrize("current, ceiling, others, cores, wanted", [
    (2, 2, 0.0, 2, 2),
    (2, 2, LOWER_AT - 0.01, 2, 2),
    (2, 2, LOWER_AT, 2, 1),            # exactly the threshold: given back
    (2, 2, 1.9, 2, 1),
    (2, 2, 5.0, 2, 1),                 # never below one
    (1, 2, 0.3, 2, 1),                 # between the thresholds: kept (hysteresis)
    (1, 2, LOWER_AT - 0.01, 2, 1),
    (1, 2, RAISE_BELOW, 2, 1),         # exactly the threshold: not taken again
    (1, 2, RAISE_BELOW - 0.01, 2, 2),
    (1, 1, 0.0, 2, 1),                 # never above the ceiling
    (8, 8, 0.9, 8, 7),                 # one busy process on 8 cores: one thread given back
    (8, 8, 2.6, 8, 5),
    (5, 8, 2.6, 8, 5),
    (5, 8, 1.0, 8, 7),
    (4, 4, 1.0, 8, 4),                 # others fit on the cores we leave free
    (3, 3, 0.0, 2, 3),                 # more threads than cores, no one else busy: that count was chosen
])
def test_decide(current, ceiling, others, cores, wanted):
    assert decide(current, ceiling, others, cores) == wanted


def test_lowers_when_others_arrive_and_restores_when_they_leave():
    fake = Fake(threads=2)
    gov = started(fake)
    assert fake.tick(gov, 0.1) == 2 and fake.set_calls == []
    assert fake.tick(gov, 1.3) == 1 and fake.set_calls == [1]       # two later runs took cores
    assert fake.tick(gov, 1.0) == 1 and fake.tick(gov, 0.4) == 1   # still there / between the thresholds
    assert fake.tick(gov, 0.0) == 2 and fake.set_calls == [1, 2]   # gone: torch's count again


def test_the_first_reading_only_starts_the_sample():
    fake = Fake(threads=2, load=2.0)
    gov = fake.governor()
    gov.between_steps()
    assert fake.samples == 1 and fake.set_calls == []


def test_no_sample_more_often_than_the_interval():
    fake = Fake(threads=2)
    gov = started(fake)
    for _ in range(7):
        fake.tick(gov, 2.0, dt=0.125)    # steps 1/8 s apart: the sampler is read again at 1.0 s only
    assert fake.samples == 1 and fake.threads == 2
    fake.tick(gov, 2.0, dt=0.125)
    assert fake.samples == 2 and fake.threads == 1
    fake.tick(gov, 0.0, dt=0.5)
    assert fake.samples == 2 and fake.threads == 1


def test_a_sample_across_a_pause_in_training_is_not_used():
    fake = Fake(threads=2)
    gov = started(fake)
    fake.tick(gov, 2.0, dt=60.0)    # e.g. an evaluation between two trainings: a new reading starts
    assert fake.samples == 2 and fake.set_calls == []
    assert fake.tick(gov, 2.0) == 1


def test_the_ceiling_is_torch_s_count_when_first_seen_or_as_someone_else_set_it():
    fake = Fake(threads=1)
    gov = started(fake)
    assert fake.tick(gov, 0.0) == 1 and fake.set_calls == []   # started at one thread: never more
    fake.threads = 2                                            # someone else (a test, a library user)
    assert fake.tick(gov, 0.0) == 2 and gov.ceiling == 2
    assert fake.tick(gov, 1.0) == 1 and fake.tick(gov, 0.0) == 2 and fake.set_calls == [1, 2]


def test_unreadable_load_changes_nothing():
    fake = Fake(threads=2)
    gov = started(fake)
    assert fake.tick(gov, None) == 2 and fake.set_calls == []


@pytest.mark.parametrize("user", ["--threads 2", "OMP_NUM_THREADS=2", "OMP_WAIT_POLICY=ACTIVE", "GOMP_SPINCOUNT=1000"])
def test_a_user_choice_is_never_overridden(user):
    fake = Fake(threads=2, user=user)
    gov = started(fake)
    for _ in range(5):
        fake.tick(gov, 2.0)
    assert fake.set_calls == [] and fake.samples == 0


def test_user_choice(monkeypatch):
    monkeypatch.setattr(_openmp, "_pinned", None)
    monkeypatch.setattr(_openmp, "USER_SETTINGS", {})
    assert _openmp.user_choice() is None
    monkeypatch.setattr(_openmp, "USER_SETTINGS", {"OMP_NUM_THREADS": "3", "GOMP_SPINCOUNT": "0"})
    assert _openmp.user_choice() == "OMP_NUM_THREADS=3, GOMP_SPINCOUNT=0"
    _openmp.pin_threads(2)
    assert _openmp.user_choice() == "--threads 2"


def test_the_user_s_environment_is_read_before_lengen_sets_its_own_wait_policy():
    """Whatever lengen decides at import (PASSIVE on a busy machine), only the user's settings count."""
    env = {k: v for k, v in os.environ.items() if k not in _openmp.USER_VARIABLES}
    code = "import lengen._openmp as o; print(sorted(o.USER_SETTINGS.items()), o.user_choice())"
    run = functools.partial(subprocess.run, [sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run(env=env).stdout.split() == ["[]", "None"]
    assert run(env={**env, "MKL_NUM_THREADS": "3"}).stdout.strip() == "[('MKL_NUM_THREADS', '3')] MKL_NUM_THREADS=3"


def test_threads_flag_pins_the_count(tmp_path, monkeypatch):
    monkeypatch.setattr(_openmp, "_pinned", None)
    assert main(["train", "--task", "parity_check", "--steps", "2", "--train-length", "2", "--max-length", "2",
                 "--eval-samples", "2", "--layers", "1", "--d-model", "8", "--heads", "2", "--d-ff", "8",
                 "--no-progress", "--device", "cpu", "--threads", "1", "--out", str(tmp_path / "r")]) == 0
    assert _openmp.user_choice() == "--threads 1"


def test_a_sweep_s_threads_per_worker_are_pinned(monkeypatch):
    """`sweep run --threads N` is a count chosen on purpose, as `--threads` is for one run."""
    monkeypatch.setattr(_openmp, "_pinned", None)
    n = torch.get_num_threads()   # the count this test process already has: nothing else changes
    run_in_process([], "unused.yaml", n, "cpu", on_result=None, on_tick=None)
    assert _openmp.user_choice() == f"--threads {n}"


# /proc/stat: cpuN user nice system idle iowait irq softirq steal guest guest_nice
def _stat(*cpus):
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"] + [f"cpu{i} {u} 0 0 {idle} 0 0 0 0 0 0" for i, (u, idle) in enumerate(cpus)]
    return "\n".join(lines + ["intr 1 2 3", "ctxt 5"]) + "\n"


def test_others_load_is_the_cpus_busy_time_less_our_own():
    # 2 CPUs, 1 s apart at 100 ticks/s: 150 busy ticks of 200, 0.5 s of them ours: others kept 1 core busy
    reads = iter([_stat((100, 100), (100, 100)), _stat((200, 100), (150, 150))])
    own = iter([10.0, 10.5])
    load = OthersLoad(read=lambda: next(reads), own_cpu=lambda: next(own), cpus={0, 1}, tick=100)
    assert load() is None
    assert load() == pytest.approx(1.0)


def test_others_load_counts_only_our_cpus():
    # CPU 1 (not ours) fully busy: no load on our CPU 0 apart from our own
    reads = iter([_stat((100, 100), (100, 100)), _stat((200, 100), (200, 100))])
    own = iter([0.0, 1.0])
    load = OthersLoad(read=lambda: next(reads), own_cpu=lambda: next(own), cpus={0}, tick=100)
    load()
    assert load() == pytest.approx(0.0)


def test_others_load_unreadable():
    assert OthersLoad(read=lambda: "garbage", own_cpu=lambda: 0.0, cpus=None, tick=100)() is None

    def missing():
        raise OSError("no /proc")
    assert OthersLoad(read=missing, own_cpu=lambda: 0.0, cpus=None, tick=100)() is None


def _count_steps(monkeypatch):
    calls = []
    monkeypatch.setattr(_threads, "between_steps", lambda: calls.append(1))
    return calls


def test_every_training_loop_ends_its_steps_with_the_governor(tmp_path, monkeypatch):
    calls = _count_steps(monkeypatch)
    assert main(["train", "--task", "parity_check", "--steps", "3", "--train-length", "2", "--max-length", "2",
                 "--eval-samples", "2", "--layers", "1", "--d-model", "8", "--heads", "2", "--d-ff", "8",
                 "--no-progress", "--device", "cpu", "--out", str(tmp_path / "che")]) == 0
    assert len(calls) == 3
    assert main(["lm", "train", *TINY, "--steps", "4", "--out", str(tmp_path / "lm")]) == 0
    assert len(calls) == 3 + 4
    model = ModelConfig(num_layers=1, num_heads=2, d_model=8, d_ff=16, dropout=0.0, pe="rope", max_position=16)
    cfgs = [TrainConfig(task="reverse_string", model=model, steps=2, batch_size=4, train_length=3, max_length=3,
                        eval_samples=2, seed=s, checkpoint_every=2, log_every=1, device="cpu") for s in (0, 1)]
    train_group(cfgs, [tmp_path / "g0", tmp_path / "g1"], progress=False)
    assert len(calls) == 3 + 4 + 2   # once per step of the group, not per member


def test_restart_forgets_the_reading_and_the_ceiling():
    fake = Fake(threads=2)
    gov = started(fake)
    assert fake.tick(gov, 2.0) == 1
    gov.restart()                                  # e.g. in a forked worker
    assert fake.tick(gov, 2.0) == 1 and gov.ceiling == 1 and fake.samples == 3   # a new first reading only


def test_the_benchmark_s_fair_share_reproduces_the_issue_s_figure():
    # issue 49: 23.4 s alone, two more runs 5 s later: the first's fair share is 60.2 s
    first, *later = shared_cpu.fair_share_times([0.0, 5.0, 5.0], 23.4)
    assert first == pytest.approx(5 + 3 * (23.4 - 5)) == pytest.approx(60.2)
    assert later == pytest.approx([3 * (23.4 - 5) + 2 * 5] * 2)
    assert shared_cpu.fair_share_times([0.0, 20.0], 10.0) == pytest.approx([10.0, 10.0])   # never overlapping
    assert shared_cpu.fair_share_times([3.0, 0.0], 4.0) == pytest.approx([5.0, 5.0])
