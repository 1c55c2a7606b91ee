"""Helpers the tests share: interrupt a run at a chosen call, fail if a model is loaded, a CLI
refusal's one line, and find headless Chromium (the report page and the docs site render in it)."""

import os
import shutil

import pytest

from lengen.cli import main


def interrupt_on_call(real, n: int):
    """`real`, except that its n-th call raises KeyboardInterrupt (a Ctrl-C at that point)."""
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return wrapped


class ModelLoaded(Exception):
    pass


def no_model(*args, **kwargs):
    raise ModelLoaded("the model was loaded before the options were checked")


def chromium() -> str:
    """The path of a Chromium to run headless; skips the test where there is none, except in CI."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("CI"):
        pytest.fail("CI must have headless Chromium (.ci/run installs Debian's chromium)")
    pytest.skip("no Chromium here (apt-get install chromium)")


def refused(argv, capsys) -> str:
    """The one error line of a `lengen` command that must refuse (exit 2, no traceback)."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err
