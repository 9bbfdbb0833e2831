"""Where a cell's scores_dtype (Cell.scores_dtype) is measured: the one rule planning skips by and measuring refuses by.

int8 scores are computed inside the variant's call (a call feature, variants._int8_scores), so they are measured where
the harness makes that call itself: forward prefill cells at the attention scope (no gradient flows through int8
rounding; a decode step and a layer's block take no call features), of a variant that declares
Capabilities.int8_scores.
"""

from __future__ import annotations

from typing import Any, Mapping

MEASURED_AT = ("forward", "prefill", "attention")  # (mode, phase, scope) where int8 scores are measured


def scores_reason(values: Mapping[str, Any], capabilities: Any = None) -> str | None:
    """Why a cell's scores_dtype is not measured (planning skips it, measuring refuses it), or None; `capabilities`
    (the variant's Capabilities; None: the setting alone, as planning asks before any variant) must declare
    int8_scores for "int8"."""
    scores = values.get("scores_dtype") or "none"
    if scores == "none":
        return None
    where = (values.get("mode"), values.get("phase") or "prefill", values.get("scope") or "attention")
    if where != MEASURED_AT:
        return (
            f"scores_dtype {scores} (scores from int8 Q and K, computed in the variant's call) is measured for forward "
            f"prefill cells at the attention scope; got mode {where[0]}, phase {where[1]}, scope {where[2]}"
        )
    if capabilities is not None and not getattr(capabilities, "int8_scores", False):
        return (
            f"scores_dtype {scores}: it does not declare that it computes its scores from int8 Q and K "
            "(Capabilities.int8_scores=False); measure it with --scores-dtypes none"
        )
    return None
