"""Why a call is refused by what a variant declares: device, causality and its offset, padding, backward, GQA, call
features (int8 scores also by the integer kernel's shapes). AttentionVariant.not_supported_reasons adds its backend's and the variant's own reasons to these."""

from __future__ import annotations

from typing import Any, Mapping

from torch import Tensor

from variants._declarations import Capabilities
from variants._gqa import gqa_reasons
from variants._int8_scores import int8_scores_reasons
from variants._model_features import feature_reasons


def capability_reasons(
    variant: Any, q: Tensor, k: Tensor, *, causal: bool, kv_mask: Tensor | None, training: bool, features: Mapping
) -> list[str]:
    """Every reason the variant's capabilities (and feature_backends, for its configured backend) refuse this call."""
    caps: Capabilities = variant.capabilities
    reasons = []
    if q.device.type not in caps.devices:
        reasons.append(f"runs on {'/'.join(caps.devices)} only, got device {q.device.type!r}")
    if causal and not caps.causal:
        reasons.append("does not support causal=True")
    elif causal and q.shape[2] < k.shape[2] and not caps.causal_offset:
        reasons.append(
            f"does not support causal=True with a query offset ({q.shape[2]} queries over {k.shape[2]} keys, the "
            "last N positions: decoding against a KV cache, chunked prefill); Capabilities.causal_offset is False"
        )
    if kv_mask is not None and not caps.kv_mask:
        reasons.append("does not support a key padding mask (kv_mask)")
    if training and not caps.backward:
        reasons.append("has no backward pass (training mode)")
    reasons += gqa_reasons(caps.gqa, q.shape[1], k.shape[1])
    if features.get("int8_scores") and caps.int8_scores:
        reasons += int8_scores_reasons(q, k)
    backend = getattr(variant.config, "backend", "auto")
    return reasons + feature_reasons(caps, variant.feature_backends, backend, features)
