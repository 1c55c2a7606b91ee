"""Shared test settings."""

import functools
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The test models are tiny: intra-op thread hand-offs cost more than the work, and on a busy
    2-core machine two threads can be several times slower than one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def no_gpu(monkeypatch):
    """torch sees no GPU, on any machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@functools.cache
def _mentions_transformers(path) -> bool:
    return "transformers" in Path(path).read_text(encoding="utf-8")


def pytest_collection_modifyitems(config, items):
    """Every test in a module that mentions transformers is marked `hf`: scripts/hf_compat.py runs
    `pytest -m hf` against other transformers releases, and a new Hugging Face test is in it
    without anyone remembering to mark it."""
    for item in items:
        if _mentions_transformers(item.path):
            item.add_marker(pytest.mark.hf)
