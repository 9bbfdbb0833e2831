"""Which cells are measured: the one rule planning skips by and measuring refuses by, and a variant's declared refusals.

tricks_reason judges a combination of settings (planning skips it, measuring refuses it with the same words);
scores_reason where a cell's scores_dtype is measured and which variants declare it; kv_refusals what a variant
declares it cannot take (a quantized K/V store).
"""

from __future__ import annotations

from typing import Any, Mapping

from harness.schema import DEFAULTS

# Cell.precision's value for a layer cell whose blocks' projections are dynamically quantized to int8
# (harness.measure.layer_quant); the other precisions autocast a train cell
INT8_DYNAMIC = "int8-dynamic"


def tricks_reason(values: Mapping[str, Any]) -> str | None:
    """Why a cell's recompute, precision, layer_depth and kv_dtype are not worth measuring (planning skips it, measuring
    refuses it), or None. The tricks trade backward-pass memory (recompute) and training memory (autocast), so a forward
    cell keeps Cell's defaults; checkpointing a block (or a stack) needs one; autocast runs float32 inputs and weights;
    a quantized K/V store is an inference cache of the attention call; int8-dynamic quantizes an inference block's
    projections on CPU."""
    plain = {name: DEFAULTS[name] for name in ("recompute", "precision", "layer_depth")}  # Cell's defaults
    recompute, precision = (values.get(name) or plain[name] for name in ("recompute", "precision"))
    if (values.get("layer_depth") or plain["layer_depth"]) != plain["layer_depth"] and values.get("scope") != "layer":
        return f"a stack of layer_depth {values.get('layer_depth')} blocks needs --scopes layer"
    if precision == INT8_DYNAMIC and (reason := _int8_reason(values)) is not None:
        return reason
    autocast = plain["precision"] if precision == INT8_DYNAMIC else precision  # the train-only precisions
    if values.get("mode") != "train" and (recompute, autocast) != (plain["recompute"], plain["precision"]):
        return f"recompute {recompute} and precision {precision} are measured for train cells only (--modes train)"
    if recompute == "layer" and values.get("scope") != "layer":
        return "recompute layer checkpoints a transformer block: it needs --scopes layer (at the attention scope: recompute attention)"
    if autocast != plain["precision"] and (dtype := values.get("dtype")) != "float32":
        return f"precision {precision} autocasts float32 inputs and weights; dtype {dtype} is cast already"
    kv, mode, scope = values.get("kv_dtype") or "none", values.get("mode"), values.get("scope") or "attention"
    if kv != "none" and (mode, scope) != ("forward", "attention"):
        return f"kv_dtype {kv} (a quantized K/V store) is measured for forward cells at the attention scope"
    return None


def _int8_reason(values: Mapping[str, Any]) -> str | None:
    """Why a cell cannot take precision int8-dynamic (a forward layer cell over float32 on CPU), or None."""
    where = (values.get("mode"), values.get("scope") or "attention", values.get("dtype"), values.get("device"))
    if where == ("forward", "layer", "float32", "cpu"):
        return None
    return (
        f"precision {INT8_DYNAMIC} (a block's projections dynamically quantized to int8) is measured for forward cells "
        f"at the layer scope over float32 on CPU (torch's dynamically quantized Linear has no CUDA kernel); got mode "
        f"{where[0]}, scope {where[1]}, dtype {where[2]}, device {where[3]}"
    )


# int8 scores are computed inside the variant's call (a call feature, variants._int8_scores), so they are measured where
# the harness makes that call itself: forward prefill cells at the attention scope (no gradient flows through int8
# rounding; a decode step and a layer's block take no call features), of a variant that declares Capabilities.int8_scores
SCORES_MEASURED_AT = ("forward", "prefill", "attention")  # (mode, phase, scope) where int8 scores are measured


def scores_reason(values: Mapping[str, Any], capabilities: Any = None) -> str | None:
    """Why a cell's scores_dtype is not measured (planning skips it, measuring refuses it), or None; `capabilities`
    (the variant's Capabilities; None: the setting alone, as planning asks before any variant) must declare
    int8_scores for "int8"."""
    scores = values.get("scores_dtype") or "none"
    if scores == "none":
        return None
    where = (values.get("mode"), values.get("phase") or "prefill", values.get("scope") or "attention")
    if where != SCORES_MEASURED_AT:
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


def kv_refusals(capabilities: Any, kv_dtype: str) -> list[str]:
    """Why a variant cannot read K/V stored as kv_dtype: it declares Capabilities.quantized_kv False; [] when it can."""
    if kv_dtype == "none" or getattr(capabilities, "quantized_kv", True):
        return []
    reason = (
        f"kv_dtype {kv_dtype}: it declares that it cannot read quantized K/V (Capabilities.quantized_kv=False); "
        "measure it with --kv-dtypes none"
    )
    return [reason]
