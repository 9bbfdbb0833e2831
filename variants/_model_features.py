"""The features a call may carry besides q, k, v: logit softcapping, learned sink logits, int8 scores; checked, refused.

- ``softcap`` (Gemma 2's ``attn_logit_softcapping``): each scaled score s becomes softcap * tanh(s / softcap) before
  the mask and the softmax;
- ``sink_logits`` (gpt-oss's ``s_aux``), (H,): one logit per query head that joins each row's softmax denominator
  and brings no value: out_i = sum_j exp(s_ij) v_j / (sum_j exp(s_ij) + exp(sink_logits[h])). Not sliding_window's
  ``sinks`` config, which keeps the first keys visible (attention-sink *tokens*).
- ``int8_scores=True``: not the model's but how the scores are computed, from Q and K quantized to int8 per token and
  head, summed by an integer matmul (variants._int8_scores); a harness asks for it (Cell.scores_dtype).

A variant that honours one declares it in ``Capabilities``; otherwise a call with it is refused naming the feature.
``feature_backends`` (a variant class attribute) names the backends that honour a feature where not all do: "auto"
runs the first of them, a named other backend is refused with the reason.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import Tensor

from variants._declarations import Capabilities
from variants._gqa import group, sdpa, ungroup

FEATURE_NAMES = {
    "softcap": "logit softcapping",
    "sink_logits": "learned sink logits",
    "int8_scores": "scores computed from int8 Q and K",
}


def check_model_features(q: Tensor, *, softcap: Any = None, sink_logits: Any = None, int8_scores: Any = None) -> None:
    """Raise TypeError/ValueError unless softcap is None or a finite number > 0, sink_logits None or (H,) floats and
    int8_scores None or a bool."""
    if int8_scores is not None and not isinstance(int8_scores, bool):
        raise TypeError(f"int8_scores must be True, False or None, got {int8_scores!r} ({type(int8_scores).__name__})")
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
            raise TypeError(f"softcap must be a positive number or None, got {softcap!r} ({type(softcap).__name__})")
        if not (math.isfinite(softcap) and softcap > 0):
            raise ValueError(
                f"softcap must be finite and > 0 (scores become softcap * tanh(s / softcap)), got {softcap}"
            )
    if sink_logits is None:
        return
    H = q.shape[1]
    if not isinstance(sink_logits, Tensor) or not sink_logits.is_floating_point():
        raise TypeError(f"sink_logits must be a floating-point tensor of shape (H,) = ({H},), got {sink_logits!r}")
    if tuple(sink_logits.shape) != (H,):
        raise ValueError(
            f"sink_logits must have shape (H,) = ({H},), one logit per query head, got {tuple(sink_logits.shape)}"
        )
    if sink_logits.device != q.device:
        raise ValueError(f"sink_logits must be on q's device {q.device}, got {sink_logits.device}")


def given_features(
    softcap: float | None, sink_logits: Tensor | None, int8_scores: bool | None = None
) -> dict[str, Any]:
    """The features a call carries, by argument name: only those given (int8_scores only when True), so a variant
    without them gets none."""
    features = {"softcap": softcap, "sink_logits": sink_logits, "int8_scores": int8_scores or None}
    return {name: value for name, value in features.items() if value is not None}


def feature_reasons(
    caps: Capabilities, feature_backends: Mapping[str, tuple[str, ...]], backend: str, features: Mapping[str, Any]
) -> list[str]:
    """Why a variant with these capabilities, configured `backend`, cannot take the given `features` ([] if it can)."""
    reasons = []
    for name, value in features.items():
        shown = {"softcap": f"softcap={value}", "int8_scores": "int8_scores=True"}.get(
            name, "sink_logits, one per query head: gpt-oss's s_aux"
        )
        if not getattr(caps, name):
            reasons.append(f"does not support {FEATURE_NAMES[name]} ({shown}); Capabilities.{name} is False")
        elif backend != "auto" and backend not in feature_backends.get(name, (backend,)):
            honouring = " or ".join(repr(b) for b in feature_backends[name])
            reasons.append(
                f"backend {backend!r} cannot apply {FEATURE_NAMES[name]} ({shown}); use {honouring} or 'auto'"
            )
    return reasons


def feature_backend(feature_backends: Mapping[str, tuple[str, ...]], backend: str, features: Mapping[str, Any]) -> str:
    """The backend that runs a call carrying `features`: `backend` if it honours them all, else (under "auto", as the
    refusals leave only it) the first backend that does."""
    for name in features:
        honouring = feature_backends.get(name, (backend,))
        if backend not in honouring:
            backend = honouring[0]
    return backend


def softcapped(scores: Tensor, softcap: float | None) -> Tensor:
    """softcap * tanh(scores / softcap), or the scores themselves without a softcap."""
    return scores if softcap is None else torch.tanh(scores / softcap) * softcap


def softmax_with_sinks(scores: Tensor, sink_logits: Tensor | None, *, dtype: torch.dtype) -> Tensor:
    """softmax over the last dim of scores (B, H, R, M) in `dtype`, each head's sink logit joining the denominator:
    (B, H, R, M), rows summing to less than one with sinks. A row of -inf scores gets NaN without sinks, 0 with."""
    if sink_logits is None:
        return torch.softmax(scores, dim=-1, dtype=dtype)
    B, H, R, _ = scores.shape
    sinks = sink_logits.to(scores.dtype).view(1, H, 1, 1).expand(B, H, R, 1)  # (B, H, R, 1)
    return torch.softmax(torch.cat([scores, sinks], dim=-1), dim=-1, dtype=dtype)[..., :-1]


def sdpa_with_sinks(q: Tensor, k: Tensor, v: Tensor, keep: Tensor | None, sink_logits: Tensor, scale: float) -> Tensor:
    """Fused SDPA with each head's sink logit as one more key: a zero key (score 0) whose additive bias is the sink
    logit and whose value is zero, so it joins the denominator only. keep: bool (B|1, 1, N|1, M) visibility or None.

    K/V get one row appended (a copy) and the mask is materialised as (B|1, H, N, M + 1) floats.
    """
    B, H, N, D = q.shape
    M = k.shape[2]
    zero = k.new_zeros(B, k.shape[1], 1, D)
    k1, v1 = torch.cat([k, zero], dim=2), torch.cat([v, zero], dim=2)  # (B, H_kv, M + 1, D)
    rows = 1 if keep is None else keep.shape[0]
    bias = torch.zeros(rows, H, N, M, dtype=q.dtype, device=q.device)
    if keep is not None:
        bias.masked_fill_(~keep, float("-inf"))
    sinks = sink_logits.to(q.dtype).view(1, H, 1, 1).expand(rows, H, N, 1)
    return sdpa(q, k1, v1, attn_mask=torch.cat([bias, sinks], dim=-1), scale=scale)  # (B, H, N, D)


def capped_attention(
    q: Tensor, k: Tensor, v: Tensor, keep: Tensor, softcap: float, sink_logits: Tensor | None
) -> Tensor:
    """softmax(softcap * tanh(q k^T / (sqrt(D) softcap)) over the keys `keep` shows) v with the scores materialised
    (fused SDPA cannot cap them), sink_logits (H,) joining each row's denominator. q (B, H, N, D); k, v (B, H_kv, M, D)
    (GQA: the G query heads of a K/V head stacked as rows, K/V not repeated); keep bool (B|1, 1, N, M). A row that
    sees no key gets zeros, with finite gradients."""
    B, H, N, D = q.shape
    H_kv, M = k.shape[1], k.shape[2]
    qg = group(q * D**-0.5, H_kv).flatten(2, 3)  # (B, H_kv, G*N, D)
    scores = softcapped(torch.matmul(qg, k.transpose(-2, -1)).view(B, H, N, M), softcap)
    blind = ~keep.any(-1, keepdim=True)  # (B|1, 1, N, 1): softmax over nothing is NaN, forward and backward
    scores = scores.masked_fill(~keep, -math.inf).masked_fill(blind, 0.0)
    weights = softmax_with_sinks(scores, sink_logits, dtype=torch.float32).masked_fill(blind, 0.0)
    out = torch.matmul(weights.to(v.dtype).view(B, H_kv, -1, M), v)  # (B, H_kv, G*N, D)
    return ungroup(out.view(B, H_kv, H // H_kv, N, D))
