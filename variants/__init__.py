"""attnsuite variants: interchangeable attention implementations behind one interface.

>>> from variants import build_variant, list_variants
>>> attn = build_variant("dense", backend="sdpa")
>>> out = attn(q, k, v, causal=True, kv_mask=mask)   # q: (B, H, N, D); k, v: (B, H_kv, N, D)
>>> state = attn.init_state(k, v, kv_mask=mask)      # decoding: context, then one token per step
>>> out_t, state = attn.step(q_t, k_t, v_t, state)   # q_t: (B, H, 1, D); k_t, v_t: (B, H_kv, 1, D)

Importing this package does no work: built-ins and plugins register on the first registry query.
"""

from variants._registry import (
    ENTRY_POINT_GROUP,
    PLUGINS_ENV_VAR,
    VariantSpec,
    build_config,
    build_variant,
    get_variant,
    list_variants,
    load_plugin,
    register_variant,
)
from variants.base import (
    AttentionVariant,
    Capabilities,
    NotSupportedError,
    QualityKnob,
    VariantConfig,
    count_flops,
    dense_flops,
    train_flops,
)
from variants._decode import live_state_bytes, state_bytes
from variants.calibrate import CalibrationReport, calibrate
from variants.checkpoint import load_variant, save_variant
from variants.multihead import MultiHeadAttention
from variants.reference import attention_weights, reference_attention

__all__ = [
    "AttentionVariant",
    "CalibrationReport",
    "Capabilities",
    "ENTRY_POINT_GROUP",
    "MultiHeadAttention",
    "NotSupportedError",
    "PLUGINS_ENV_VAR",
    "QualityKnob",
    "VariantConfig",
    "VariantSpec",
    "attention_weights",
    "build_config",
    "build_variant",
    "calibrate",
    "count_flops",
    "dense_flops",
    "get_variant",
    "list_variants",
    "load_plugin",
    "load_variant",
    "reference_attention",
    "register_variant",
    "save_variant",
    "state_bytes",
    "live_state_bytes",
    "train_flops",
]
