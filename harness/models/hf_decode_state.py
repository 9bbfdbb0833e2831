"""Constant-memory decoding inside a transformers model: VariantStateCache keeps each layer's variant decode state
(sliding_window's ring, distilled's and window_linear's running sums) where transformers' cache keeps keys and values.

    >>> model.set_attn_implementation(register_with_transformers("sliding_window", window=256))
    >>> out = model.generate(ids, max_new_tokens=32, cache=VariantStateCache(model))

The cache has one StateLayer per attention module. Its ``update`` keeps no keys, only the count of positions, binds
itself to its module (the adapter's LAYER_STATE attribute) and hands the new keys and values on; the adapter's
attention function sees that they are the ones this layer handed out and calls ``attend``: at the prefill the
variant's causal forward over the prompt and ``init_state(k, v, kv_mask=padding)``, then ``step(q_t, k_t, v_t,
state)`` for each new token. A layer with the model's own sliding window (Mistral, Qwen2's sliding layers) runs
``variant.windowed(window)`` from the first token (dense and sliding_window: sliding_window's ring of that window).
Refused with NotSupportedError naming why (never computed differently): a variant without init_state/step (or without
``windowed`` in a sliding layer), a bidirectional layer, the model's softcapping or sink logits (step takes neither),
padding among the new tokens, gradients (the state is updated in place), and every cache operation a state cannot
follow: beam search's reordering, cropping (assisted decoding), batch repeats.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

# transformers at the top: this module is a transformers Cache, imported only with the [hf] extra (never by hf_adapter)
from transformers.cache_utils import Cache, CacheLayerMixin

from harness.models.hf_adapter import LAYER_STATE
from harness.models.hf_layers import attention_modules
from variants import AttentionVariant, NotSupportedError

_NO_REORDER = "a decode state cannot be reordered, cropped or repeated ({}); generate greedily or by sampling, one beam"


class StateLayer(CacheLayerMixin):
    """One layer's decode state: the variant's (init_state/step) and the number of positions seen, no keys."""

    is_sliding = False

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module  # the attention module whose keys this layer sees
        self.seen = 0  # positions so far, padded slots included (the next token's position)
        self.state: Any = None  # what the variant's init_state/step returned
        self.variant: AttentionVariant | None = None  # the variant that made the state
        self.fresh: tuple[Tensor, int] | None = None  # (keys handed out by the last update, the position of the first)

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        self.is_initialized = True

    def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        """Hand the new keys and values (B, H_kv, N, D) on unchanged, remembering them for the attention call."""
        self.is_initialized = True
        self.module.__dict__[LAYER_STATE] = self  # bound at each update: the cache in use, not the last one built
        self.fresh = (key_states, self.seen)
        self.seen += key_states.shape[2]
        return key_states, value_states

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """As a DynamicLayer: the mask spans every position so far (the padding of the prompt stays readable)."""
        return self.seen + query_length, 0

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.seen, self.state, self.variant, self.fresh = 0, None, None, None

    def reorder_cache(self, beam_idx: Tensor) -> None:
        raise NotSupportedError(_NO_REORDER.format("beam search reorders the cache"))

    def crop(self, tokens_to_remove: int) -> None:
        raise NotSupportedError(_NO_REORDER.format("assisted decoding crops the cache"))

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotSupportedError(_NO_REORDER.format("the cache's batch is repeated"))

    def batch_select_indices(self, indices: Tensor) -> None:
        raise NotSupportedError(_NO_REORDER.format("the cache's batch is selected"))

    def handed_out(self, key: Tensor) -> bool:
        """Whether `key` is what this layer's last update handed out (else a binding left from another cache)."""
        return self.fresh is not None and self.fresh[0] is key

    def attend(
        self,
        variant: AttentionVariant,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool,
        kv_mask: Tensor | None,
        features: dict[str, Any],
    ) -> Tensor:
        """The layer's output (B, H, N, D) for q (B, H, N, D) and the new k, v (B, H_kv, N, D): the prefill's forward and
        init_state, or one step per new token. kv_mask: the padding of every position so far (B, seen) or None."""
        start = self.fresh[1]  # the adapter calls attend only for the keys this layer handed out
        self.fresh = None
        N = q.shape[2]
        new_mask = None if kv_mask is None else kv_mask[:, -N:]  # (B, N)
        reasons = self._reasons(variant, start, causal=causal, new_mask=new_mask, features=features)
        if reasons:
            raise NotSupportedError(variant.name, reasons)
        if start == 0:  # the prefill: the prompt's output as the cache path computes it, and the state after it
            self.state, self.variant = variant.init_state(k, v, kv_mask=new_mask), variant
            return variant(q, k, v, causal=True, kv_mask=new_mask)
        outs = []
        for i in range(N):
            out_t, self.state = variant.step(q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], self.state)
            outs.append(out_t)  # (B, H, 1, D)
        return torch.cat(outs, dim=2)

    def _reasons(
        self,
        variant: AttentionVariant,
        start: int,
        *,
        causal: bool,
        new_mask: Tensor | None,
        features: dict[str, Any],
    ) -> list[str]:
        reasons = []
        if not causal:
            reasons.append("the state path decodes causally; this layer is bidirectional (is_causal=False)")
        for feature, value in features.items():
            if value is not None:
                reasons.append(f"the model's {feature} in the state path: step() takes none; decode over the KV cache")
        if torch.is_grad_enabled():
            reasons.append("the state path updates the state in place: run it under torch.no_grad() (generate does)")
        if start and new_mask is not None and not bool(new_mask.all()):
            reasons.append("padding among the decoded tokens: the state takes padding only with the prompt")
        if start and self.variant is not variant:
            made_by = "no prefill through this cache" if self.variant is None else f"{self.variant.name}'s prefill"
            reasons.append(f"a step by {variant.name} after {made_by}; pass a new VariantStateCache(model)")
        return reasons


class VariantStateCache(Cache):
    """A transformers Cache holding, per attention layer of `model`, its variant's decode state instead of keys and
    values: pass it as generate's ``cache=`` (``past_key_values=`` before transformers 5), one per call. Memory:
    ``state_bytes()``. Written against transformers 5's per-layer Cache (tested on 5.25)."""

    def __init__(self, model: nn.Module):
        by_index = attention_modules(model)  # {the model's layer_idx: its attention module}
        numbers = [getattr(module, "layer_idx", None) for module in by_index.values()]
        if numbers != list(range(len(by_index))):  # transformers indexes the cache's layers by layer_idx
            raise NotSupportedError(
                f"a state cache needs attention modules numbered 0, 1, ... in order (layer_idx), got {numbers}"
            )
        layers = [StateLayer(module) for module in by_index.values()]
        super().__init__(layers=layers)

    def state_bytes(self) -> int:
        """Bytes of every layer's decode state now (each variant's state_bytes: tensor storages, each once)."""
        return sum(layer.variant.state_bytes(layer.state) for layer in self.layers if layer.variant is not None)
