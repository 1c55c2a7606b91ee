"""Shared test settings."""

import functools
import inspect
import re
from pathlib import Path

import os

import pytest
import torch

from lengen.cli import build_parser, handler, handlers

# Ray in the tests (a local instance, a two-node cluster) stays on the loopback address: set before
# any test imports Ray, which reads it once; the processes the tests start inherit it
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Triton reads TRITON_INTERPRET when a kernel is decorated: without CUDA, set it before any test
# imports lengen.kernels.triton_remap (test_imports imports every module), so the kernel tests run
# it in the interpreter whichever test file comes first
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The test models are tiny: intra-op thread hand-offs cost more than the work, and on a busy
    2-core machine two threads can be several times slower than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def command_handlers():
    """Every command's handler module, imported before any test runs. `lengen` imports a handler
    when its command first runs; in a test session that could be inside a test that monkeypatches
    a library function the handler imports by name (`from lengen.che.loop import train`),
    which would then stay bound there for the tests after it."""
    for name in handlers(build_parser()).values():
        handler(name)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """LENGEN_CACHE (token caches, compiled kernels) in the test's own folder: a module that writes
    caches asks for it (`pytestmark = pytest.mark.usefixtures("private_cache")`); not autouse, so
    the rest of the suite shares one kernel build."""
    monkeypatch.setenv("LENGEN_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def no_gpu(monkeypatch):
    """torch sees no GPU, on any machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@functools.cache
def _module_text(path) -> str:
    return Path(path).read_text(encoding="utf-8")


def _starts_ray(item) -> bool:
    """The test calls importorskip("ray") (its module's text is read once; a test's own source only
    where the module mentions it)."""
    function = getattr(item, "function", None)
    return (function is not None and 'importorskip("ray")' in _module_text(item.path)
            and 'importorskip("ray")' in inspect.getsource(function))


def _is_ray_test(nodeid: str) -> bool:
    """Tests that start Ray say so in their names (`ray` as a word): pytest-xdist schedules from
    node ids alone."""
    return "ray" in re.split(r"[_\[\]-]+", nodeid.rpartition("::")[2])


def pytest_collection_modifyitems(config, items):
    """Every test in a module that mentions transformers is marked `hf`: scripts/hf_compat.py runs
    `pytest -m hf` against other transformers releases, and a new Hugging Face test is in it
    without anyone remembering to mark it."""
    for item in items:
        if "transformers" in _module_text(item.path):
            item.add_marker(pytest.mark.hf)
        if _starts_ray(item) and not _is_ray_test(item.nodeid):
            raise pytest.UsageError(f"{item.nodeid} starts Ray: put `ray` in its name, so that "
                                    "pytest-xdist keeps it apart from the other Ray tests")


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """pyproject's addopts run the suite on pytest-xdist workers, a file at a time (a module's
    expensive fixtures run once), with the tests that start Ray all on one worker: two local Ray
    instances at once would meet (`ray.init()` joins a running local instance)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileOrRay(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "ray" if _is_ray_test(nodeid) else super()._split_scope(nodeid)

    return FileOrRay(config, log)
