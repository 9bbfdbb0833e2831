"""What a variant declares besides its forward: its config base, its capabilities, its quality knob, and the error
that refuses a call with reasons. Re-exported by variants.base (and variants), where users import them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


class NotSupportedError(RuntimeError):
    """A variant was asked for something it declares it cannot do; the message lists why.

    ``NotSupportedError("causal is not implemented")`` (one plain message, the natural call in a
    plugin) and ``NotSupportedError(variant, reasons)`` (what the built-ins raise) both work.
    """

    def __init__(self, variant: str, reasons: list[str] | str | None = None):
        if reasons is None:  # a plain message: it is the one reason
            variant, reasons = "", [variant]
        elif isinstance(reasons, str):
            reasons = [reasons]
        self.variant = variant
        self.reasons = [str(r) for r in reasons]
        super().__init__((f"{variant} cannot run this call: " if variant else "") + "; ".join(self.reasons))

    def __reduce__(self):  # pickles (Ray, submitit) with both arguments, not just the message
        return (NotSupportedError, (self.variant, self.reasons))


@dataclass(frozen=True, kw_only=True)
class VariantConfig:
    """Base of every variant config: a frozen, keyword-only dataclass validated on construction.

    Subclasses add fields (each with a default that builds on CPU and a comment) and override
    ``validate`` to raise ``ValueError``/``TypeError`` naming the field and the value.
    """

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError/TypeError for an invalid field; the base class has none."""

    def to_dict(self) -> dict[str, Any]:
        """The config as a plain dict, as it goes into every result row."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Capabilities:
    """What a variant can do; the harness and the contract tests read these flags."""

    exact: bool = False  # equals softmax attention (under its own sparsity pattern) up to rounding
    causal: bool = True  # supports causal=True
    # supports causal=True with fewer queries than keys (N < M), the queries being the last N positions (bottom-right:
    # decoding against a KV cache, chunked prefill); False (the default: a plain causal mask aligns top-left) refuses it
    causal_offset: bool = False
    kv_mask: bool = True  # supports a key padding mask
    backward: bool = True  # gradients flow to q, k, v (and parameters)
    learnable: bool = False  # has parameters fitted against the exact teacher
    devices: tuple[str, ...] = ("cpu", "cuda")  # device types it runs on
    approximates: str = ""  # for approximate variants: what it approximates and how, one line
    # accepts k, v with H_kv < H heads (H % H_kv == 0); False (the default, so a plugin that never heard of GQA is
    # not handed one): a grouped-query call is refused with the reason
    gqa: bool = False
    decode: bool = False  # implements init_state/step (incremental causal decoding, one token per step)
    # honours forward(..., softcap=c): scores s -> c * tanh(s / c) before the softmax (Gemma 2); False refuses it
    softcap: bool = False
    # honours forward(..., sink_logits=(H,)): one logit per query head in the softmax's denominator, no value (gpt-oss's
    # s_aux; not sliding_window's sink tokens); False refuses it
    sink_logits: bool = False
    # reads K and V that a harness stored quantized (int8, fp8) and dequantized to the compute dtype before the call
    # (harness.measure.kv_quant); False refuses such a cell with the reason (a variant whose K/V must stay exact)
    quantized_kv: bool = True
    # honours forward(..., int8_scores=True): its scores from Q and K quantized to int8 per token and head, summed by an
    # integer matmul (variants._int8_scores); False refuses it (a harness asks for it: Cell.scores_dtype)
    int8_scores: bool = False


@dataclass(frozen=True)
class QualityKnob:
    """The config field that trades speed for accuracy, and the range worth searching.

    More of it is more accurate and slower (a wider window, a longer projection, more features);
    error-budget searches move it between `low` and `high` (integers, both inclusive).
    """

    field: str  # an int field of the variant's config
    low: int  # the cheapest value worth trying
    high: int  # the most accurate value worth trying (the search gives up above it)
    at_most_length: bool = False  # values above the key length M change nothing (a window, a projection of M rows)
    # other config fields searched with the knob, (field, values) each: the knob is searched at every combination of
    # their values and the cheapest config within the budget wins (sliding_window: (("sinks", (0, 4)),))
    searched_with: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.low, int) and isinstance(self.high, int) and 1 <= self.low < self.high):
            raise ValueError(
                f"QualityKnob({self.field!r}): needs integers 1 <= low < high, got low={self.low!r}, high={self.high!r}"
            )
        for name, values in self.searched_with:
            if not (isinstance(name, str) and values and all(isinstance(v, int) for v in values)):
                raise ValueError(
                    f"QualityKnob({self.field!r}): searched_with needs (field, (int, ...)) pairs, got {name!r}: {values!r}"
                )

    @property
    def fields(self) -> tuple[str, ...]:
        """Every config field an error-budget search chooses: the knob's, then those searched with it."""
        return (self.field,) + tuple(name for name, _ in self.searched_with)

    def range_for(self, M: int) -> tuple[int, int]:
        """(low, high) worth searching at key length M: high capped at M where larger values change nothing."""
        high = min(self.high, M) if self.at_most_length else self.high
        return min(self.low, high), high
