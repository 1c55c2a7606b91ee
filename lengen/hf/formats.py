"""`lengen.hf.export`: one entry for the export formats, above the modules that write them
(lengen.hf.exporting: a transformers model folder; lengen.hf.gguf_export: a GGUF file for
llama.cpp, which builds on the former's table and checks)."""

from __future__ import annotations

from lengen.errors import LengenError
from lengen.hf import exporting, gguf_export

FORMATS = ("transformers", "gguf")


def export(model, spec: str, out, tokenizer=None, *, format: str = "transformers", gguf_type: str = "f32",
           **kwargs) -> dict:
    """Write `model` extended with `spec` to `out` and check it; returns the record written to
    `out`/lengen_export.json. `format="transformers"`: a model folder plain transformers loads
    (lengen.hf.exporting.export, whose keywords `kwargs` are); `format="gguf"`: one GGUF file for
    llama.cpp, weights in `gguf_type` "f32" or "f16" (lengen.hf.gguf_export.export)."""
    if format == "gguf":
        return gguf_export.export(model, spec, out, tokenizer, gguf_type=gguf_type, **kwargs)
    if format != "transformers":
        raise LengenError(f"lengen hf export: format {format!r}: choose {' or '.join(FORMATS)}")
    return exporting.export(model, spec, out, tokenizer, **kwargs)
