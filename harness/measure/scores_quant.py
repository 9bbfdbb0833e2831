"""The int8 scores a prefill cell asks its variant for (Cell.scores_dtype): call features, backend, row fields.

Where they are measured is harness.cell_rules's. Here: the call features that ask the variant for them, the backend
that then runs, and the row fields of their kernel and their own error.

int8 scores are computed inside the variant's call (variants._int8_scores), so unlike a quantized K/V store
(harness.measure.kv_quant) the harness only asks: its timed and checked calls carry ``int8_scores=True``, the paired
baseline (plain dense) does not. The row's error against float64 is the whole call's, as for any cell;
scores_quant_rel_l2 is the scores' own: the int8 scores of the first SCORED_ROWS queries of each head against their
float64 products, computed by the same function the variant calls.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from harness.measure.reference import rel_l2
from variants._gqa import group
from variants._int8_scores import INT8_SCORES_KERNEL, int8_scores
from variants._model_features import feature_backend

SCORED_ROWS = 64  # queries per head whose int8 scores are scored against float64 (all M keys each)


def scores_features(scores_dtype: str) -> dict[str, Any]:
    """The call features asking the variant for `scores_dtype`: {"int8_scores": True} for "int8", {} for "none"."""
    return {"int8_scores": True} if scores_dtype == "int8" else {}


def call_backend(attn: Any, q: Tensor, *, training: bool, scores_dtype: str) -> str:
    """The backend the variant's call runs with the cell's call features: its resolved backend, or under "auto" the
    first that honours them (dense's int8 scores: its textbook backend, "reference")."""
    backend = attn.resolve_backend(q, training=training)
    return feature_backend(attn.feature_backends, backend, scores_features(scores_dtype))


def scores_fields(q: Tensor, k: Tensor, scores_dtype: str) -> dict[str, Any]:
    """The row's scores_kernel (the integer matmul the int8 scores ran on) and scores_quant_rel_l2 (their own error on
    the first SCORED_ROWS queries of each head, see the module doc); None for "none"."""
    if scores_dtype == "none":
        return {"scores_kernel": None, "scores_quant_rel_l2": None}
    rows = group(q[:, :, :SCORED_ROWS], k.shape[1]).flatten(2, 3)  # (B, H_kv, G*R, D): as dense stacks them
    exact = torch.matmul(rows.double(), k.double().transpose(-2, -1))  # (B, H_kv, G*R, M)
    return {"scores_kernel": INT8_SCORES_KERNEL, "scores_quant_rel_l2": rel_l2(int8_scores(rows, k), exact)}
