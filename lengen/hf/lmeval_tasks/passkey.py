"""lengen_passkey's prompts and scoring: lengen.protocols.passkey's, sized by the tokenizer the
task's metadata names (a local folder; lm-eval passes metadata to custom_dataset)."""

from __future__ import annotations

import datasets
from transformers import AutoTokenizer

from lengen.protocols.passkey import make_trials, parse_answer

ANSWER_TOKENS = 10   # the task's max_gen_toks: the prompt leaves room for them within max_length


def dataset(tokenizer: str | None = None, length=None, max_length=None, trials=20, seed=0,
            pretrained=None, gguf_file=None, **_):
    """`tokenizer`: a local tokenizer folder; else lm-eval's model_args (which it merges into the
    metadata): `pretrained`, a local folder, with its `gguf_file` if any."""
    source = tokenizer or (pretrained if isinstance(pretrained, str) else None)
    if not source:
        raise ValueError("lengen_passkey sizes its prompts in tokens: give a local tokenizer folder in "
                         "the metadata (--metadata '{\"tokenizer\": \"DIR\", \"length\": 8192}')")
    if not (length or max_length):
        raise ValueError("lengen_passkey: give length (or max_length) in the metadata")
    tok = AutoTokenizer.from_pretrained(source, local_files_only=True,
                                        **({"gguf_file": gguf_file} if gguf_file and not tokenizer else {}))
    target = int(length) if length else int(max_length) - ANSWER_TOKENS
    rows = [{"prompt": t.prompt, "key": str(t.key), "length": t.length, "prompt_tokens": len(t.prompt_ids)}
            for t in make_trials(lambda s: tok(s, add_special_tokens=False)["input_ids"], target,
                                 int(trials), int(seed))]
    return {"test": datasets.Dataset.from_list(rows)}


def process_results(doc: dict, results: list[str]) -> dict:
    return {"acc": float(parse_answer(results[0]) == int(doc["key"]))}
