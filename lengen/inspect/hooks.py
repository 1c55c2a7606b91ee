"""One eval-mode forward pass with forward hooks on some modules, removed afterwards."""

from __future__ import annotations


def forward_with_hooks(model, modules, hook, *args, with_kwargs: bool = False):
    """Run model(*args) in eval mode with `hook` registered on every module of `modules`; the
    hooks are removed and the model's train/eval mode restored whatever happens."""
    was_training = model.training
    model.eval()
    handles = [m.register_forward_hook(hook, with_kwargs=with_kwargs) for m in modules]
    try:
        return model(*args)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
