"""Tiny random models of the hybrid-layer families lengen.hf supports, built with transformers'
own config classes (no download), for tests/test_hf_families.py."""

import copy
import warnings

import torch

TRAIN = 32  # max_position_embeddings: 64-token inputs are 2x beyond it
WINDOW = 8  # sliding window / attention chunk of the windowed layers

COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, vocab_size=100, max_position_embeddings=TRAIN,
              initializer_range=0.1, pad_token_id=0, bos_token_id=1, eos_token_id=2)

# per family: (model_type, config options); layer kinds of the 4 layers in the comment
FAMILIES = {
    # sliding, global, sliding, global; logit soft-capping 50, query_pre_attn_scalar scaling
    "gemma2": ("gemma2", dict(sliding_window=WINDOW, query_pre_attn_scalar=24,
                              attn_logit_softcapping=50.0, final_logit_softcapping=30.0)),
    # sliding (base 10k), global (base 1M), sliding, global; q/k norms, query_pre_attn_scalar
    "gemma3": ("gemma3_text", dict(sliding_window=WINDOW, query_pre_attn_scalar=24,
                                   layer_types=["sliding_attention", "full_attention"] * 2)),
    # rope, rope, rope, NoPE (no_rope_layers: 1 = uses RoPE)
    "smollm3": ("smollm3", dict(no_rope_layers=[1, 1, 1, 0], rope_theta=10000.0)),
    # rope, rope, rope, NoPE with attention-temperature tuning; qk L2 norm on RoPE layers. No
    # chunks (every layer full_attention): transformers 5.0 needs attention_chunk_size set even
    # then (None fails inside its cache and masks), so it is given, and unused
    "llama4": ("llama4_text", dict(intermediate_size_mlp=128, num_local_experts=2,
                                   attention_chunk_size=64, layer_types=["full_attention"] * 4,
                                   no_rope_layers=[1, 1, 1, 0], floor_scale=4, attn_scale=0.5,
                                   rope_theta=10000.0)),
    "olmo2": ("olmo2", dict()),
    # sliding, sliding, sliding, global
    "olmo3": ("olmo3", dict(sliding_window=WINDOW)),
    "granite": ("granite", dict(attention_multiplier=0.2, embedding_multiplier=2.0,
                                residual_multiplier=0.5, logits_scaling=2.0)),
    "qwen3_moe": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
}
# Gemma 2 soft-caps its logits: transformers' sdpa refuses it (eager only)
IMPLEMENTATIONS = {name: ("eager",) if name == "gemma2" else ("eager", "sdpa") for name in FAMILIES}


def tiny_family(name: str, impl: str = "eager", **extra):
    import transformers

    model_type, options = FAMILIES[name]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type, **{**COMMON, **options, **extra})
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                              attn_implementation=impl)
    model.generation_config.eos_token_id = None   # greedy decoding never stops early
    return model.eval()
