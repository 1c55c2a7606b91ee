"""Training-free context extension for Hugging Face causal LMs of the Llama family and of the
hybrid-layer families (Gemma 2/3, SmolLM3, Llama 4, OLMo 2/3, Granite, Qwen3-MoE), per layer.

    from lengen.hf import extend, restore, tune
    extend(model, "yarn", factor=4)        # or "dynamic", "rerope:window=512+logn", ...
    ...
    restore(model)                         # exactly the original model again
    export(model, "yarn:factor=4", "out/")  # a folder plain transformers loads (exportable methods)
    export(model, "yarn:factor=4", "out/", format="gguf")   # a GGUF file for llama.cpp
    tune(model_path="./llama", length=16384, text="books/", budget=30)   # choose a method's options
    banded.use(model)   # before extend: sliding-window layers without a T x T mask (long inputs)

See docs/huggingface.md. Needs `transformers` (the `hf` extra)."""

from lengen.hf import banded
from lengen.hf.arch import SUPPORTED_MODEL_TYPES
from lengen.hf.formats import export
from lengen.hf.extensions import extension_of
from lengen.hf.patch import extend, restore
from lengen.hf.settings import TuneSettings
from lengen.hf.tuning import tune

__all__ = ["banded", "extend", "restore", "export", "extension_of", "tune", "TuneSettings",
           "SUPPORTED_MODEL_TYPES"]
