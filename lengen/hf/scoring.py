"""A loaded Hugging Face model as lengen.protocols scores it: nll_fn (the decoder once, the output
head in chunks, then what the family does to its logits) and greedy_fn; and the corpus sequences
perplexity is scored on (sequences) with their digest (sequences_digest, which hf eval's rows and
hf tune's slices record). Token ids go to the model's device in nll_fn / greedy_fn."""

from __future__ import annotations

import hashlib

import numpy as np
import torch
import torch.nn.functional as F

from lengen.data import load_documents, long_sequences
from lengen.errors import LengenError
from lengen.hf.arch import decoder_stack
from lengen.hf.loading import bos_prefix, corpus_encoder
from lengen.hf.settings import EvalSettings


def output_logits(model):
    """hidden [B, T, D] -> float32 logits as the model's own forward gives them: the output head,
    then what a family does after it (Gemma 2/3: final-logit soft-capping; Granite: division by
    logits_scaling). Checked against each supported family's forward (tests/test_hf_families.py)."""
    head, config = model.get_output_embeddings(), model.config.get_text_config()
    cap = getattr(config, "final_logit_softcapping", None)
    scaling = getattr(config, "logits_scaling", None)   # Granite and its MoE variants

    def logits(hidden: torch.Tensor) -> torch.Tensor:
        out = head(hidden)
        if scaling is not None:
            out = out / scaling
        if cap is not None:
            out = torch.tanh(out / cap) * cap
        return out.float()

    return logits


def nll_fn(model, chunk: int = 1024):
    """lengen.protocols.NllFn (ids [B, T], last -> [B, last]) for a causal LM: the decoder runs
    once over the context ids[:, :-1], the output head in chunks of `chunk` positions (a 16k x
    49k-vocab logits tensor would need 3 GB)."""
    decoder, logits_of = decoder_stack(model), output_logits(model)
    device = next(model.parameters()).device

    @torch.inference_mode()
    def nll(ids: torch.Tensor, last: int) -> torch.Tensor:
        ids = ids.to(device)
        hidden = decoder(input_ids=ids[:, :-1], use_cache=False).last_hidden_state[:, -last:]
        targets = ids[:, -last:]
        return torch.cat([F.cross_entropy(logits_of(h).transpose(1, 2), t, reduction="none")
                          for h, t in zip(hidden.split(chunk, dim=1), targets.split(chunk, dim=1))],
                         dim=1).cpu()

    return nll


def greedy_fn(model, pad_token_id: int):
    device = next(model.parameters()).device

    @torch.inference_mode()
    def greedy(ids: list[int], max_new_tokens: int) -> list[int]:
        x = torch.tensor([ids], device=device)
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=pad_token_id, temperature=None,
                             top_p=None, top_k=None)
        return out[0, x.shape[1]:].tolist()

    return greedy


def sequences_digest(seqs: list[np.ndarray]) -> str:
    """What perplexity rows (and hf tune's slices) were scored on: the token ids of every
    sequence, hashed."""
    h = hashlib.sha256()
    for s in seqs:
        h.update(np.ascontiguousarray(s, dtype=np.int64).tobytes())
    return h.hexdigest()[:20]


def sequences(settings: EvalSettings, tokenizer, need: int | None = None) -> list[np.ndarray]:
    """settings.docs sequences of `need` (default max(lengths) + 1) tokens: a context of L tokens
    and one more target, from the corpus by lengen.data.long_sequences, deterministic; each
    begins with the tokenizer's BOS where it adds one (bos_prefix), then the text."""
    need = need or max(settings.lengths) + 1
    docs = load_documents(settings.corpus, corpus_encoder(tokenizer))
    prefix = np.array(bos_prefix(tokenizer), dtype=np.int64)
    seqs = [np.concatenate([prefix, s]) for s in long_sequences(docs.docs, need - len(prefix), settings.docs,
                                                                 docs.eos)]
    if len(seqs) < settings.docs:
        raise LengenError(f"the corpus {docs.source} gives only {len(seqs)} sequences of {need} tokens, "
                          f"{settings.docs} needed: use a larger --corpus or fewer --docs")
    return seqs
