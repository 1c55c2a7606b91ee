"""Helpers the tests share: interrupt a run at a chosen call, and fail if a model is loaded."""


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
