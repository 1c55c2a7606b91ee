"""A real, small, seeded training run: at 4x its training length a RoPE byte-level LM is worse
with plain RoPE than with each of NTK, YaRN and ReRoPE (training-free methods help)."""

import os

import pytest

from lengen.data import load_corpus, long_sequences
from lengen.extrapolation import build_method
from lengen.lm.config import LMConfig
from lengen.lm.evaluate import load_run
from lengen.lm.train import train_lm
from lengen.models.config import ModelConfig
from lengen.protocols import perplexity_vs_length

TRAIN = 32


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("lm")
    old = os.environ.get("LENGEN_CACHE")
    os.environ["LENGEN_CACHE"] = str(root / "cache")
    try:
        model = ModelConfig(num_layers=2, num_heads=4, d_model=64, d_ff=128, dropout=0.0, norm="pre",
                            causal=True, pe="rope", embed_scale=False)
        cfg = LMConfig(model=model, train_length=TRAIN, steps=400, batch_size=32, lr=3e-3, warmup=20,
                       val_windows=32, checkpoint_every=1000, log_every=100, seed=0)  # corpus: the stdlib
        record = train_lm(cfg, root / "run", progress=False)
        _, lm = load_run(root / "run")
        corpus = load_corpus(None)
        seqs = long_sequences(corpus.val_docs, 4 * TRAIN + 1, 8, corpus.eos)
    finally:
        if old is None:
            os.environ.pop("LENGEN_CACHE", None)
        else:
            os.environ["LENGEN_CACHE"] = old
    return record, lm, seqs


def ppl_at(lm, seqs, spec, length):
    method = None if spec == "rope" else build_method(spec, lm.rope_spec())
    return perplexity_vs_length(lm.nll_fn(method), seqs, [length], batch_size=8)[0].ppl


def test_tiny_model_learned_something(trained):
    record, _, _ = trained
    assert record["val_ppl"] < 0.6 * record["unigram_ppl"], record


# Perplexity at 4 x TRAIN = 128 tokens, measured (two runs, identical: seeded, one thread):
#   rope 17.49 | ntk:factor=4 16.57 (0.95x) | yarn:factor=4 16.30 (0.93x) | rerope:window=16 13.41 (0.77x)
# (pi:factor=4 is worse, 23.48, and is not asserted). Each of the three beats plain RoPE.
BEAT_ROPE_AT_4X = ("ntk:factor=4", "yarn:factor=4", "rerope:window=16")


def test_training_free_methods_beat_plain_rope_at_4x(trained):
    _, lm, seqs = trained
    assert len(seqs) == 8
    rope = ppl_at(lm, seqs, "rope", 4 * TRAIN)
    others = {s: ppl_at(lm, seqs, s, 4 * TRAIN) for s in BEAT_ROPE_AT_4X}
    for spec, ppl in others.items():
        assert ppl < rope, (spec, ppl, rope, others)
    # sanity: within its window ReRoPE is plain RoPE
    assert ppl_at(lm, seqs, f"rerope:window={TRAIN}", TRAIN) == pytest.approx(ppl_at(lm, seqs, "rope", TRAIN), rel=1e-5)
