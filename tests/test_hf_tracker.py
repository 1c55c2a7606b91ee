"""lengen.hf's view of positions (PositionTracker) for prefill, decoding with a cache, a cropped
cache, left padding and generate(), with the cache passed the way each supported transformers
release passes it. Expected positions are written out by hand.

Two stand-in decoder stacks reproduce the two calling conventions on any installed release:
transformers 5.0-5.23 (`past_key_values=`, `cache_position`, the cache returned as
`past_key_values`, positions given to the rotary module by keyword) and 5.24+ (`cache=`, no
`cache_position`, the cache returned as `cache`, positions given positionally as Qwen2 does).
The real tiny Llama then checks the installed release end to end.
"""

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

from lengen.errors import LengenError  # noqa: E402
from lengen.hf.tracker import PositionTracker  # noqa: E402
from tiny_llama import cache_keywords, returned_cache  # noqa: E402


class Rotary(nn.Module):
    def forward(self, x, position_ids):
        return position_ids.float()


class _Stack(nn.Module):
    """Writes one key per new token into layer 0 of the cache, as an attention layer would."""

    def __init__(self, positions_by_keyword: bool):
        super().__init__()
        self.rotary_emb = Rotary()
        self.by_keyword = positions_by_keyword

    def run(self, input_ids, attention_mask, position_ids, cache, use_cache, past_from=None):
        length = input_ids.shape[1]
        if use_cache and cache is None:
            cache = DynamicCache()
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            start = past if past_from is None else int(past_from[0])
            position_ids = torch.arange(start, start + length)[None]
        hidden = torch.zeros(input_ids.shape[0], length, 4)
        if self.by_keyword:
            self.rotary_emb(hidden, position_ids=position_ids)
        else:
            self.rotary_emb(hidden, position_ids)
        if cache is not None:
            key = torch.zeros(input_ids.shape[0], 1, length, 4)
            cache.update(key, key, 0)
        return cache


class StackCachePosition(_Stack):
    """transformers 5.0-5.23: past_key_values= and cache_position; output field past_key_values."""

    def __init__(self):
        super().__init__(positions_by_keyword=True)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, cache_position=None, use_cache=True, **kwargs):
        cache = self.run(input_ids, attention_mask, position_ids, past_key_values, use_cache,
                         past_from=cache_position)
        return {"last_hidden_state": None, "past_key_values": cache}


class StackCache(_Stack):
    """transformers 5.24+: cache=, no cache_position; output field cache; positions positional."""

    def __init__(self):
        super().__init__(positions_by_keyword=False)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None,
                inputs_embeds=None, use_cache=True, **kwargs):
        cache = self.run(input_ids, attention_mask, position_ids, cache, use_cache)
        return {"last_hidden_state": None, "cache": cache}


STACKS = {"past_key_values": StackCachePosition, "cache": StackCache}


def tracked(stack_cls):
    stack = stack_cls()
    tracker = PositionTracker()
    tracker.attach(stack, stack.rotary_emb)
    return stack, tracker


def ids(batch, length):
    return torch.ones(batch, length, dtype=torch.long)


def rows(*values):
    return torch.tensor(values, dtype=torch.long)


@pytest.mark.parametrize("name", STACKS)
def test_prefill_then_decode_with_the_cache(name):
    stack, tracker = tracked(STACKS[name])
    cache = stack(ids(1, 4))[name]
    assert tracker.step.pos_q.tolist() == [[0, 1, 2, 3]]
    assert tracker.step.pos_k.tolist() == [[0, 1, 2, 3]]
    assert tracker.step.key_valid is None
    stack(ids(1, 1), **{name: cache})
    assert tracker.step.pos_q.tolist() == [[4]]
    assert tracker.step.pos_k.tolist() == [[0, 1, 2, 3, 4]]
    stack(ids(1, 2), **{name: cache})   # a chunk of two new tokens
    assert tracker.step.pos_q.tolist() == [[5, 6]]
    assert tracker.step.pos_k.tolist() == [[0, 1, 2, 3, 4, 5, 6]]


@pytest.mark.parametrize("name", STACKS)
def test_cache_passed_positionally_is_found_by_type(name):
    stack, tracker = tracked(STACKS[name])
    cache = stack(ids(1, 3), None, rows([10, 11, 12]))[name]
    stack(ids(1, 1), None, rows([13]), cache)   # input_ids, attention_mask, position_ids, cache
    assert tracker.step.pos_k.tolist() == [[10, 11, 12, 13]]


@pytest.mark.parametrize("name", STACKS)
def test_a_cropped_cache_keeps_the_positions_of_its_first_keys(name):
    stack, tracker = tracked(STACKS[name])
    # positions the model would not pick itself, so that a default arange would be caught
    cache = stack(ids(1, 6), position_ids=rows([100, 101, 102, 103, 104, 105]))[name]
    cache.crop(-2)   # drop the last two keys (a negative count: both releases read it so)
    assert cache.get_seq_length() == 4
    stack(ids(1, 1), position_ids=rows([104]), **{name: cache})
    assert tracker.step.pos_q.tolist() == [[104]]
    assert tracker.step.pos_k.tolist() == [[100, 101, 102, 103, 104]]


@pytest.mark.parametrize("name", STACKS)
def test_left_padding_positions_and_key_validity(name):
    stack, tracker = tracked(STACKS[name])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    positions = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])   # generate()'s cumsum - 1, clamped
    cache = stack(ids(2, 5), attention_mask=mask, position_ids=positions)[name]
    assert tracker.step.pos_q.tolist() == positions.tolist()
    assert tracker.step.key_valid.tolist() == mask.bool().tolist()
    mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], dim=1)
    stack(ids(2, 1), attention_mask=mask, position_ids=torch.tensor([[3], [5]]), **{name: cache})
    assert tracker.step.pos_k.tolist() == [[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
    assert tracker.step.key_valid.tolist() == mask.bool().tolist()


@pytest.mark.parametrize("name", STACKS)
def test_two_caches_are_tracked_apart_and_an_unknown_one_gets_default_positions(name):
    stack, tracker = tracked(STACKS[name])
    first = stack(ids(1, 2), position_ids=rows([50, 51]))[name]
    second = stack(ids(1, 3))[name]
    stack(ids(1, 1), position_ids=rows([52]), **{name: first})
    assert tracker.step.pos_k.tolist() == [[50, 51, 52]]
    stack(ids(1, 1), **{name: second})
    assert tracker.step.pos_k.tolist() == [[0, 1, 2, 3]]
    foreign = DynamicCache()   # filled without the tracker: the model's own default positions
    foreign.update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4), 0)
    stack(ids(1, 1), **{name: foreign})
    assert tracker.step.pos_k.tolist() == [[0, 1, 2]]


def test_a_stack_without_an_attention_mask_argument_is_refused():
    class NoMask(nn.Module):
        def __init__(self):
            super().__init__()
            self.rotary_emb = Rotary()

        def forward(self, input_ids, cache=None):
            return None

    stack = NoMask()
    with pytest.raises(LengenError, match="attention_mask"):
        PositionTracker().attach(stack, stack.rotary_emb)


# --- the installed transformers release, end to end --------------------------------------------

def tiny_llama():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, vocab_size=50,
                         max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def recording(model):
    """Attach a tracker to the model's decoder stack; returns it and the list of each pass's
    (pos_q, pos_k, key_valid) as lists."""
    tracker = PositionTracker()
    tracker.attach(model.model, model.model.rotary_emb)
    seen = []

    def keep(module, args, kwargs, output):
        step = tracker.step
        seen.append((step.pos_q.tolist(), step.pos_k.tolist(),
                     None if step.key_valid is None else step.key_valid.int().tolist()))

    model.model.register_forward_hook(keep, with_kwargs=True)
    return tracker, seen


def test_the_installed_release_under_each_cache_keyword_it_accepts():
    model = tiny_llama()
    _, seen = recording(model)
    for keyword in cache_keywords(model):
        seen.clear()
        with torch.no_grad():
            cache = returned_cache(model(torch.arange(1, 5)[None], use_cache=True))
            model(torch.tensor([[7]]), use_cache=True, **{keyword: cache})
        assert seen == [([[0, 1, 2, 3]], [[0, 1, 2, 3]], None), ([[4]], [[0, 1, 2, 3, 4]], None)]


def test_generate_sees_prefill_then_one_position_per_new_token():
    model = tiny_llama()
    _, seen = recording(model)
    with torch.no_grad():
        model.generate(torch.arange(1, 6)[None], max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert [(q, k) for q, k, _ in seen] == [
        ([[0, 1, 2, 3, 4]], [[0, 1, 2, 3, 4]]),
        ([[5]], [[0, 1, 2, 3, 4, 5]]),
        ([[6]], [[0, 1, 2, 3, 4, 5, 6]]),
    ]


def test_generate_with_left_padding():
    model = tiny_llama()
    _, seen = recording(model)
    prompt = torch.tensor([[0, 0, 3, 4], [5, 6, 7, 8]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    with torch.no_grad():
        model.generate(prompt, attention_mask=mask, max_new_tokens=2, do_sample=False,
                       pad_token_id=0)
    first, second = seen
    # positions as generate() makes them: cumsum(mask) - 1, padding set to 1 (transformers' own
    # choice for padded slots; they are masked anyway)
    assert first[0][1] == [0, 1, 2, 3] and first[0][0][2:] == [0, 1]
    assert first[2] == mask.tolist()
    assert second[0] == [[2], [4]]
    assert second[1][0][2:] == [0, 1, 2] and second[1][1] == [0, 1, 2, 3, 4]
    assert second[2] == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
