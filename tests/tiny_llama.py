"""A tiny random Llama with a character tokenizer, saved to disk, for the `lengen hf` tests."""

import torch

TEXT = ("def area(r):\n    return 3.14159 * r * r\n\nclass Point:\n    x = 0\n    y = 1\n\n"
        "# The grass is green. The sky is blue. Here we go.\n") * 20


def char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(i) for i in range(32, 127)] + ["\n"]
    vocab = {"<unk>": 0, "<eos>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


def bos_char_tokenizer():
    """char_tokenizer that begins every encoded text with <bos>, as Gemma's and Llama's do."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    inner = char_tokenizer().backend_tokenizer
    inner.add_special_tokens(["<bos>"])
    bos = inner.token_to_id("<bos>")
    inner.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])
    return PreTrainedTokenizerFast(tokenizer_object=inner, unk_token="<unk>", eos_token="<eos>", bos_token="<bos>")


def save_tiny_llama(root):
    """root/model (a 2-layer random Llama, 64 positions, and its tokenizer) and root/corpus."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=100, max_position_embeddings=64, eos_token_id=1)
    transformers.LlamaForCausalLM(config).save_pretrained(root / "model")
    char_tokenizer().save_pretrained(root / "model")
    (root / "corpus").mkdir(exist_ok=True)
    for i in range(3):
        (root / "corpus" / f"part{i}.txt").write_text(TEXT)
    return root


def cache_keywords(model) -> list[str]:
    """The keywords the installed transformers release's forward takes a KV cache by
    (5.0-5.23: past_key_values; 5.24+: cache, with past_key_values deprecated until 5.40)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return [name for name in ("past_key_values", "cache") if name in params] or ["past_key_values"]


def returned_cache(output):
    """The KV cache a forward returned, whatever the release calls the output field."""
    from transformers.cache_utils import Cache

    return next(v for v in output.values() if isinstance(v, Cache))


def decode_step(model, ids, cache):
    """One forward of `ids` after the keys in `cache`, the cache passed by the keyword the
    installed release names first in its signature: (output, the cache it returned)."""
    out = model(ids, use_cache=True, **{cache_keywords(model)[-1]: cache})
    return out, returned_cache(out)
