"""Any registered variant as a Hugging Face transformers attention implementation: register_with_transformers.

    >>> name = register_with_transformers("sliding_window", window=256)
    >>> model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=name)   # or model.set_attn_implementation(name)

transformers calls ``fn(module, query (B, H, N, D), key (B, H_kv, M, D), value, attention_mask, scaling=,
dropout=, **kwargs)`` and wants ``(out (B, N, H, D), None)``. The mapping onto the variant contract:
- causality: the call's ``is_causal`` if given, else ``module.is_causal`` (True for decoders, False for BERT);
- a KV cache (``generate``, ``past_key_values``): the N new queries over the M cached keys are the contract's causal
  query offset (the last N positions, bottom-right), run by every variant that declares ``causal_offset``;
- padding: the registered mask function hands over the 2-D key padding mask (B, M) as ``kv_mask``, or None;
- the model's own sliding window (a layer's ``sliding_window`` narrower than its keys: Mistral, Qwen2's sliding
  layers): the layer runs ``variant.windowed(window)``, the variant restricted to that causal window exactly (dense:
  sliding_window's band; sliding_window: the narrower band), over transformers' sliding-window cache as well;
- logit softcapping (Gemma 2's ``softcap``) and learned sink logits (gpt-oss's ``s_aux``, one per query head) become the
  contract's ``softcap=`` and ``sink_logits=``: run by a variant declaring ``Capabilities.softcap`` / ``sink_logits``
  (dense and chunked both, sliding_window sink logits), refused by the others naming the feature;
- GQA: k, v keep their H_kv heads (repeated only for a variant that declares ``gqa=False``);
- scaling: a ``scaling`` other than 1/sqrt(D) multiplies q by scaling * sqrt(D) first, so softmax(q' k^T / sqrt(D))
  is the model's softmax(q k^T * scaling): exact for every variant whose scores are q . k (all built-ins); a
  variant that fits features of q is calibrated on the same pre-scaled q (``capture_qkv`` records it).
Refused with ``NotSupportedError`` naming the model feature (never computed differently): a sliding window narrower
than the keys for a variant whose ``windowed`` gives None, a cache whose keys do not end at the last query (a static
cache's unwritten slots, a sliding-window cache's dropped ones), attention dropout while training, a position bias,
softcapping or sink logits for a variant without the capability, a prepared 4-D mask, any mask pattern other than
causal or bidirectional plus padding (packed sequences, chunked layers, overlays), a keyword argument the adapter does
not know (``KWARGS`` lists each it knows with its meaning: a new model feature is a refusal until it is mapped), and
everything the variant itself refuses. Each call is tallied per layer (``hf_layers``): a swapped forward in which the
variant did not run in every layer of the model is refused.

Constant-memory decoding: with ``cache=VariantStateCache(model)`` (hf_decode_state) each layer keeps its
variant's decode state (init_state at the prefill, step per new token) instead of transformers' keys and values.

Per-layer variants (fitted per layer) and recording q, k, v go through attributes of each attention module,
set with ``hf_layers.set_layer_variant`` and ``record_qkv``. Needs ``pip install 'attnsuite[hf]'`` (transformers >= 4.51).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
from typing import Any

import torch
from torch import Tensor, nn

from harness.models import hf_layers
from variants import AttentionVariant, NotSupportedError, build_variant

PREFIX = "attnsuite_"  # every implementation name this module registers starts with it
INSTALL_HINT = "pip install 'attnsuite[hf]'"
LAYER_RECORD = "_attnsuite_record"  # attribute of an attention module: a list that receives (q, k, v)
LAYER_STATE = "_attnsuite_state"  # attribute of an attention module: its VariantStateCache layer (hf_decode_state)
LAYER_WINDOWED = "_attnsuite_windowed"  # attribute of an attention module: (variant, window, its windowed variant)
_SHARED: dict[str, AttentionVariant] = {}  # implementation name -> the variant used where a layer sets none


def missing_transformers_reason() -> str | None:
    """Why the adapter cannot run here (transformers missing, with the install command), or None."""
    if importlib.util.find_spec("transformers") is None:
        return f"the transformers adapter needs the optional extra (missing: transformers); install it: {INSTALL_HINT}"
    return None


def register_with_transformers(variant: str | AttentionVariant, **config: Any) -> str:
    """Register `variant` (a registered name and its config fields, or a built instance) with transformers.

    Registers an attention function and its mask function under one name (``AttentionInterface`` and
    ``AttentionMaskInterface``) and returns that name, for ``attn_implementation=`` or
    ``model.set_attn_implementation``. The same name and config give the same implementation name.
    Raises ImportError without transformers, ValueError/TypeError for a bad config, NotSupportedError at call time.
    """
    reason = missing_transformers_reason()
    if reason:
        raise ImportError(reason)
    from transformers import AttentionInterface, AttentionMaskInterface

    if isinstance(variant, AttentionVariant):
        if config:
            raise TypeError(f"config fields {sorted(config)} go with a variant name, not with a built {variant.name}")
        instance = variant
        key = f"{variant.name}_{id(variant):x}"
    else:
        instance = build_variant(variant, **config)
        fields = json.dumps(instance.config.to_dict(), sort_keys=True, default=str)
        key = f"{instance.name}_{hashlib.sha1(fields.encode()).hexdigest()[:8]}"
    name = PREFIX + key
    _SHARED[name] = instance
    AttentionInterface.register(name, _attention_function(name))
    AttentionMaskInterface.register(name, _mask_function(instance.name))
    return name


def record_qkv(module: nn.Module, record: list[tuple[Tensor, Tensor, Tensor]] | None) -> None:
    """Make one attention module append the (q, k, v) its variant receives to `record` (None stops)."""
    module.__dict__[LAYER_RECORD] = record


# Every keyword argument (besides query, key, value, attention_mask, dropout, scaling, is_causal) a model may pass to the
# attention function, and what it means here; any other one that is not None is refused (model_feature_reasons), so a
# new model feature is a refusal until it is mapped.
KWARGS = {
    "sliding_window": "the layer's own causal window: the layer runs variant.windowed(window)",
    "softcap": "Gemma 2's logit softcapping: the contract's softcap=, refused by a variant without it",
    "s_aux": "gpt-oss's learned sink logits, one per query head: the contract's sink_logits=",
    "position_bias": "an additive position bias (T5-style): refused when given, the contract has none",
    # ignored, harmless: each only informs code that ran before the call, or outputs the adapter does not touch
    "position_ids": "ignored: the positions RoPE has already applied to query and key",
    "cache_position": "ignored: where the cache wrote the new keys; key and value arrive with the cache's keys",
    "use_cache": "ignored: whether the model keeps a KV cache; key and value arrive with the cache's keys",
    "output_attentions": "ignored: the adapter returns no attention weights (None), as transformers' SDPA does",
    "output_router_logits": "ignored: a mixture-of-experts router's outputs (gpt-oss, JetMoE), not attention",
    "encoder_hidden_states": "ignored: None in self-attention (BERT passes it); cross-attention's key, value arrive projected",
    "output_hidden_states": "ignored: whether the model also returns each layer's hidden states; attention is the same",
    "num_items_in_batch": "ignored: the Trainer's count of label tokens, for the loss's normalisation, not attention",
}


def model_feature_reasons(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Any,
    *,
    dropout: float,
    kwargs: dict[str, Any],
) -> list[str]:
    """Every feature of this transformers call the variant contract cannot express ([] if none), a keyword argument
    not in KWARGS among them; softcap and s_aux it can (the variant refuses them if it lacks them)."""
    reasons = [
        f"the model passes {key}, which attnsuite's adapter does not map (it would compute plain attention without it); "
        "map it in harness/models/hf_adapter.py KWARGS, or evaluate a model that does not pass it"
        for key in sorted(kwargs)
        if key not in KWARGS and kwargs[key] is not None
    ]
    if dropout and module.training:
        reasons.append(f"attention dropout while training (dropout={dropout}); call model.eval() or set it to 0")
    if kwargs.get("position_bias") is not None:
        reasons.append("the model's additive position bias (position_bias) is not in the contract")
    if isinstance(attention_mask, Tensor) and attention_mask.dim() != 2:
        reasons.append(
            f"a prepared {attention_mask.dim()}-D attention mask; pass the 2-D padding mask (B, N) as attention_mask"
        )
    if key.shape[-1] != value.shape[-1]:
        reasons.append(
            f"values of head_dim {value.shape[-1]} differ from keys' {key.shape[-1]} (the contract has one D)"
        )
    return reasons


def _attention_function(name: str):
    def attnsuite_attention(
        module: nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        dropout: float = 0.0,
        scaling: float | None = None,
        is_causal: bool | None = None,
        **kwargs: Any,
    ) -> tuple[Tensor, None]:
        variant = module.__dict__.get(hf_layers.LAYER_VARIANT)
        variant = _SHARED[name] if variant is None else variant
        hf_layers.tally(module, variant)
        reasons = model_feature_reasons(module, query, key, value, attention_mask, dropout=dropout, kwargs=kwargs)
        state = module.__dict__.get(LAYER_STATE)  # a VariantStateCache's layer: the constant-memory decode path
        state = state if state is not None and state.handed_out(key) else None  # before k, v are repeated for GQA
        M = math.inf if state is not None else key.shape[2]  # a state runs the model's window from the first token
        variant, window_reasons = _windowed_variant(module, variant, kwargs.get("sliding_window"), M)
        reasons += window_reasons
        if reasons:
            raise NotSupportedError(variant.name, reasons)
        causal = bool(is_causal) if is_causal is not None else bool(getattr(module, "is_causal", True))
        D = query.shape[-1]
        if scaling is not None and not math.isclose(scaling, D**-0.5, rel_tol=1e-6):
            query = query * (scaling * math.sqrt(D))  # softmax(q' k^T / sqrt(D)) = softmax(q k^T * scaling)
        H, H_kv = query.shape[1], key.shape[1]
        if H != H_kv and not variant.capabilities.gqa:
            key, value = (t.repeat_interleave(H // H_kv, dim=1) for t in (key, value))  # (B, H, M, D)
        record = module.__dict__.get(LAYER_RECORD)
        if record is not None:
            record.append((query.detach(), key.detach(), value.detach()))
        features = {"softcap": kwargs.get("softcap"), "sink_logits": kwargs.get("s_aux")}  # Gemma 2's, gpt-oss's
        if state is not None:
            out = state.attend(variant, query, key, value, causal=causal, kv_mask=attention_mask, features=features)
        else:
            out = variant(query, key, value, causal=causal, kv_mask=attention_mask, **features)  # (B, H, N, D)
        return out.transpose(1, 2).contiguous(), None  # (B, N, H, D)

    attnsuite_attention.__name__ = name
    return attnsuite_attention


def _windowed_variant(module: nn.Module, variant: AttentionVariant, window: Any, M: float):
    """(the variant a layer runs under the model's sliding window, [] or the reason it cannot): the variant itself when
    the window covers the M keys (math.inf: a decode state's, all to come), else ``variant.windowed(window)``, built once
    per module, variant and window."""
    if window is None or int(window) >= M:
        return variant, []
    window = int(window)
    cached = module.__dict__.get(LAYER_WINDOWED)
    if cached is not None and cached[0] is variant and cached[1] == window:
        return cached[2], []
    windowed = variant.windowed(window)
    if windowed is None:
        keys = f"{M} keys" if M != math.inf else "the keys a decode state sees"
        reason = (
            f"the model's own sliding-window layer (sliding_window={window} < {keys}): {variant.name} cannot "
            "restrict itself to it exactly (its windowed() gives None; dense and sliding_window can); evaluate at "
            "seq_len <= the model's window"
        )
        return variant, [reason]
    module.__dict__[LAYER_WINDOWED] = (variant, window, windowed)  # not a submodule: the state_dict stays the model's
    return windowed, []


def _mask_function(variant_name: str):
    """The mask function: the 2-D key padding mask (B, M), True = real token, or None; other patterns refused."""

    def attnsuite_mask(
        batch_size: int,
        q_length: int,
        kv_length: int,
        q_offset: Any = 0,
        kv_offset: Any = 0,
        mask_function: Any = None,
        attention_mask: Tensor | None = None,
        device: Any = "cpu",
        **kwargs: Any,
    ) -> Tensor | None:
        q_offset, kv_offset, window = int(q_offset), int(kv_offset), kwargs.get("local_size")
        # keys dropped in front (kv_offset) only by a sliding-window layer's cache: outside every query's window
        if q_offset + q_length != kv_offset + kv_length or (kv_offset and window is None):
            raise NotSupportedError(
                variant_name,
                f"a cache whose {kv_length} keys (from position {kv_offset}) do not end at the last of the {q_length} "
                f"queries (from position {q_offset}): a static cache's unwritten slots or a sliding-window cache's "
                "dropped keys; use transformers' DynamicCache (generate's default) or use_cache=False",
            )
        lengths = (batch_size, q_length, kv_length, q_offset, kv_offset)
        if mask_function is not None and not _standard_pattern(mask_function, *lengths, window, device):
            raise NotSupportedError(
                variant_name,
                "the model's own attention pattern (chunked layers, packed sequences, or an overlay) is neither "
                "causal, causal within its sliding window, nor bidirectional",
            )
        if attention_mask is None:
            return None
        padding = attention_mask[:, -kv_length:].to(dtype=torch.bool)  # (B, M)
        return None if bool(padding.all()) else padding

    return attnsuite_mask


def _standard_pattern(
    mask_function: Any,
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int,
    kv_offset: int,
    window: Any,
    device: Any,
) -> bool:
    """Whether mask_function is the plain causal or bidirectional pattern, or causal within a sliding `window` (the
    layer's, enforced by its windowed variant), evaluated at the queries' and keys' positions."""
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function

    if mask_function in (causal_mask_function, bidirectional_mask_function):
        return True
    b_idx = torch.arange(batch_size, device=device)[:, None, None]  # (B, 1, 1)
    q_idx = torch.arange(q_length, device=device)[None, :, None] + q_offset  # (1, N, 1): positions
    kv_idx = torch.arange(kv_length, device=device)[None, None, :] + kv_offset  # (1, 1, M)
    head = torch.zeros((), dtype=torch.long, device=device)
    pattern = torch.as_tensor(mask_function(b_idx, head, q_idx, kv_idx), device=device)
    pattern = pattern.expand(batch_size, q_length, kv_length)
    causal = kv_idx <= q_idx
    if window is not None:
        causal = causal & (kv_idx > q_idx - int(window))
    return bool(pattern.all()) or bool((pattern == causal).all())
