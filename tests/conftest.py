"""Shared test settings."""

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
