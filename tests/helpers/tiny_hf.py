"""Tiny random-initialised transformers models saved into folders (offline, seconds): hidden 64, 2 layers, 4 heads."""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB = 128  # token ids 0..127; the models have no tokenizer, text is mapped by the harness's byte fallback


def tiny_config(kind: str, **overrides):
    """A transformers config of `kind`: llama (GQA 4/2, RoPE), qwen2 (q/k/v biases, GQA 4/1), gemma2 (another scaling),
    gpt_oss (learned sink logits, 4 experts of which 2 per token; alternating 128-token windows), and the kinds of
    OTHER_PROJECTIONS."""
    import transformers

    common = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=1024,
        attention_dropout=0.0,
    )
    if kind == "llama":
        config = transformers.LlamaConfig(**common, num_key_value_heads=2)
    elif kind == "qwen2":
        config = transformers.Qwen2Config(**common, num_key_value_heads=1, use_sliding_window=False)
    elif kind == "mistral":
        config = transformers.MistralConfig(**common, num_key_value_heads=2, sliding_window=4096)
    elif kind == "gemma2":
        config = transformers.Gemma2Config(
            **common, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=64, attn_logit_softcapping=None
        )
    elif kind == "gpt_oss":  # its YaRN RoPE expects 32 x 4096 positions: anything else warns
        common = {**common, "max_position_embeddings": 131072, "intermediate_size": 64}
        config = transformers.GptOssConfig(
            **common, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2
        )
    elif kind in OTHER_PROJECTIONS:
        config = OTHER_PROJECTIONS[kind](transformers, common)
    else:
        raise ValueError(f"no tiny config {kind!r}")
    for key, value in overrides.items():
        setattr(config, key, value)
    config.architectures = [transformers.AutoModelForCausalLM._model_mapping[type(config)].__name__]
    return config


# Models whose attention projections are not named q_proj/query (GPT-NeoX query_key_value, Phi-3 qkv_proj, GPT-2
# c_attn, Persimmon, JetMoE) yet call transformers' attention interface, and an ALiBi model (Bloom) that computes attention itself.
OTHER_PROJECTIONS = {
    "gpt_neox": lambda t, common: t.GPTNeoXConfig(**common),
    "phi3": lambda t, common: t.Phi3Config(**common, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "gpt2": lambda t, common: t.GPT2Config(
        vocab_size=VOCAB,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=1024,
        attn_pdrop=0.0,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "persimmon": lambda t, common: t.PersimmonConfig(**common),  # query_key_value, q/k layer norms, partial RoPE
    "jetmoe": lambda t, common: t.JetMoeConfig(  # mixture of attention experts: experts.input_linear
        **{k: v for k, v in common.items() if k != "num_attention_heads"}, num_key_value_heads=2, kv_channels=16
    ),  # 4 query heads: num_key_value_heads x num_experts_per_tok
    "bloom": lambda t, common: t.BloomConfig(
        vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4, attention_dropout=0.0
    ),
}


def save_tiny(folder: Path, kind: str, *, seed: int = 0, **overrides) -> Path:
    """A tiny causal LM of `kind` with seeded random weights, saved (safetensors) into `folder`; returns it."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(kind, **overrides))
    model.save_pretrained(folder)
    return folder
