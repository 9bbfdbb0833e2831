"""The decode half of the variant contract: decode_reasons, init_state/step defaults that refuse, one step's FLOPs.

AttentionVariant (variants/base.py) inherits it; a variant with ``Capabilities.decode`` overrides ``init_state`` and
``step``, and may add ``extra_decode_reasons``; one whose step does less than a forward over its whole context (a ring,
running sums) overrides ``decode_step_flops``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from torch import Tensor

from variants._declarations import Capabilities, NotSupportedError
from variants._decode import state_bytes
from variants._decode_step import DecodeStep
from variants._flops import count_flops
from variants._gqa import gqa_reasons


class DecodeContract:
    """Incremental decoding's defaults: refusals that explain themselves, and the state's bytes."""

    capabilities: ClassVar[Capabilities]  # declared by AttentionVariant and its subclasses
    name: str  # AttentionVariant's property: the registry name
    _decode_step: DecodeStep | None = None  # a variant whose config chooses its step (decode_backend) sets its own

    def decode_kind(self) -> str | None:
        """What ran the last decode step where the config chooses (decode_backend): "native", "compiled" or "eager",
        with why not the kernel or the compile (variants._decode_step); None for a variant with one way to step."""
        return None if self._decode_step is None else self._decode_step.kind

    def decode_reasons(self, q: Tensor, k: Tensor, v: Tensor, *, kv_mask: Tensor | None = None) -> list[str]:
        """Every reason this variant cannot decode after the context k, v ([] if it can).

        Args: q, a query like the decoded ones, (B, H, 1 or N, D) (only its heads, dtype and
        device are read); k, v the context (B, H_kv, N, D); kv_mask its padding, bool (B, N).
        """
        caps = self.capabilities
        if not caps.decode:
            reasons = ["has no incremental decoding (init_state/step); Capabilities.decode is False"]
        else:
            reasons = []
            if q.device.type not in caps.devices:
                reasons.append(f"runs on {'/'.join(caps.devices)} only, got device {q.device.type!r}")
            if kv_mask is not None and not caps.kv_mask:
                reasons.append("does not support a key padding mask (kv_mask)")
            reasons += gqa_reasons(caps.gqa, q.shape[1], k.shape[1])
        return reasons + self.extra_decode_reasons(q, k, v, kv_mask=kv_mask)

    def extra_decode_reasons(self, q: Tensor, k: Tensor, v: Tensor, *, kv_mask: Tensor | None) -> list[str]:
        """Variant-specific decode refusals (e.g. why it cannot decode at all). Default: none."""
        return []

    def check_decode(self, q: Tensor, k: Tensor, v: Tensor, *, kv_mask: Tensor | None = None) -> None:
        """Raise NotSupportedError listing decode_reasons, if there are any."""
        reasons = self.decode_reasons(q, k, v, kv_mask=kv_mask)
        if reasons:
            raise NotSupportedError(self.name, reasons)

    def init_state(self, k: Tensor, v: Tensor, *, kv_mask: Tensor | None = None) -> Any:
        """The decode state after the context k, v (B, H_kv, N, D); kv_mask (B, N) marks real tokens.

        Positions count from the start of the context, padded slots included, so decoded token t
        sits at position N + t. The default refuses with ``NotSupportedError``.
        """
        raise NotSupportedError(
            self.name, self.decode_reasons(k, k, v, kv_mask=kv_mask) or ["init_state is not implemented"]
        )

    def step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: Any) -> tuple[Tensor, Any]:
        """Append one token (q_t (B, H, 1, D); k_t, v_t (B, H_kv, 1, D)) and return its causal output.

        Returns (out_t (B, H, 1, D) in q_t's dtype, the new state); the state may be updated in
        place, so use the returned one. The default refuses with ``NotSupportedError``.
        """
        raise NotSupportedError(self.name, self.decode_reasons(q_t, k_t, v_t) or ["step is not implemented"])

    def state_bytes(self, state: Any) -> int:
        """Bytes held by a decode state: ``variants.state_bytes`` (tensor storages, each once)."""
        return state_bytes(state)

    def decode_step_flops(self, B: int, H: int, context: int, D: int, *, H_kv: int | None = None) -> int:
        """Forward FLOPs one decode step executes: generating one token whose query (B, H, 1, D) attends to `context`
        keys already cached or summarised (K/V heads H_kv, default H). The default, a KV cache's step: the variant's
        executed forward of one query over all context + 1 keys (the token's own key included), causal with the query
        the last position where the variant takes the offset (so a windowed variant counts its window's keys). A
        variant whose step does less (a ring of `window` keys, running sums) overrides it; a decode cell's `flops` is
        this, averaged over its steps (harness.measure.decode)."""
        causal = self.capabilities.causal_offset  # as the KV-cache step calls the forward (variants._decode)
        return count_flops(self, B, H, 1, context + 1, D, causal, H_kv=H_kv, executed=True)
