"""The attention distribution of a cell's inputs: per head, what exact attention looks like on the sampled rows.

On the query rows the accuracy check samples (harness.measure.reference.sampled: the same rows, the same seed, padded
query rows left out), the exact float64 softmax weights of the inputs (full attention, causality and padding
respected) give per head, averaged over those rows:

- ``entropy``: -sum_j w_j log w_j (nats), and ``uniform_entropy`` beside it: log of the keys the row sees (log M, or a
  causal row's log(i + 1), fewer under padding), the entropy of uniform attention on the same rows;
- ``first_1``, ``first_4``: the mass on the first token and on the first FIRST_TOKENS tokens (attention sinks);
- ``within_16``, ``within_64``, ``within_256``: the mass on the keys j with |i - j| < W, i the query's position among
  the keys (a window of W keys around it; what a sliding window of that width keeps).

A head (one batch row's head: on `llm` inputs each batch row draws its own head types) is of the first kind whose rule
holds (KIND_RULE): sink, local, diffuse, else mixed (on `llm` inputs the retrieval heads: low entropy, far from the
query). The worker (harness.executors.worker) computes this once per DISTRIBUTION_FIELDS key of a run and stores it in
the run folder; the report (harness.report.distributions) shows it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from harness.measure.context import MeasureContext
from harness.measure.reference import sampled
from harness.measure.settings import MeasureSettings
from harness.schema import Cell
from variants import attention_weights
from variants._checks import query_offset
from variants.reference import visibility

FIRST_TOKENS = 4  # StreamingLLM's sink count
WINDOWS = (16, 64, 256)  # the windows whose mass is measured
METRICS = ("entropy", "uniform_entropy", "first_1", "first_4", *(f"within_{w}" for w in WINDOWS))
KINDS = ("sink", "local", "diffuse", "mixed")  # in the order the rule tries them
SINK_MASS = 0.5  # sink: mass on the first FIRST_TOKENS tokens above this
LOCAL_MASS = 0.5  # local: mass within WINDOWS[0] of the query above this
DIFFUSE_SHARE = 0.9  # diffuse: entropy above this share of uniform's
KIND_RULE = (
    f"sink: mass on the first {FIRST_TOKENS} tokens > {SINK_MASS}; else local: mass within {WINDOWS[0]} tokens of the "
    f"query > {LOCAL_MASS}; else diffuse: entropy > {DIFFUSE_SHARE} x uniform's; else mixed"
)
# the cell fields whose values make one distribution (dtype and device left out: the first cell's inputs stand for all)
DISTRIBUTION_FIELDS = (
    "inputs",
    "seq_len",
    "kv_len",
    "batch",
    "heads",
    "kv_heads",
    "head_dim",
    "causal",
    "padding",
    "seed",
)


def distribution_key(cell: Cell) -> dict[str, Any] | None:
    """The fields of the distribution a cell's inputs have, or None for a cell whose inputs are not q, k, v of N rows
    (a decode cell's context grows, a layer cell's attention sees its projections)."""
    if cell.phase != "prefill" or cell.scope != "attention":
        return None
    return {name: getattr(cell, name) for name in DISTRIBUTION_FIELDS}


def row_metrics(weights: Tensor, positions: Tensor, visible: Tensor | None) -> dict[str, Tensor]:
    """METRICS of each row of weights (B, H, R, M) at query `positions` (R,) among the keys; `visible` (B or 1, 1, R, M)
    the keys each row sees (None: all). Returns name -> (B, H, R)."""
    M = weights.shape[-1]
    seen = torch.full((1, 1, 1), M, device=weights.device) if visible is None else visible.sum(-1)  # (B or 1, 1, R)
    distance = (positions[:, None] - torch.arange(M, device=weights.device)[None, :]).abs()  # (R, M)
    out = {
        "entropy": torch.special.entr(weights).sum(-1),  # -w log w, 0 where w = 0
        "uniform_entropy": seen.clamp_min(1).double().log().expand(weights.shape[:3]),
        "first_1": weights[..., :1].sum(-1),
        "first_4": weights[..., :FIRST_TOKENS].sum(-1),
    }
    for w in WINDOWS:
        out[f"within_{w}"] = (weights * (distance < w)).sum(-1)
    return out


def head_metrics(
    q: Tensor, k: Tensor, *, causal: bool, rows: Tensor, valid: Tensor, chunk: int, kv_mask: Tensor | None = None
) -> dict[str, Tensor]:
    """METRICS per head (B, H), averaged over the sampled `rows` (R,) that `valid` (B, R) marks real, from the exact
    float64 weights computed `chunk` rows at a time (the accuracy check's memory bound)."""
    N, M = q.shape[2], k.shape[2]
    sums: dict[str, Tensor] = {}
    with torch.no_grad():
        for i in range(0, len(rows), chunk):
            part = rows[i : i + chunk]
            weights = attention_weights(q, k, causal=causal, kv_mask=kv_mask, rows=part)  # (B, H, r, M) float64
            positions = part + query_offset(N, M, causal)
            visible = visibility(positions, M, causal=causal, kv_mask=kv_mask)
            keep = valid[:, None, i : i + chunk].double()  # (B, 1, r)
            for name, value in row_metrics(weights, positions, visible).items():
                sums[name] = sums.get(name, 0) + (value * keep).sum(-1)  # (B, H)
    count = valid.sum(-1).clamp_min(1).double()[:, None]  # (B, 1)
    return {name: (total / count).cpu() for name, total in sums.items()}


def head_kind(head: dict[str, float]) -> str:
    """The kind of one head (its METRICS) by KIND_RULE."""
    if head["first_4"] > SINK_MASS:
        return "sink"
    if head[f"within_{WINDOWS[0]}"] > LOCAL_MASS:
        return "local"
    if head["entropy"] > DIFFUSE_SHARE * head["uniform_entropy"]:
        return "diffuse"
    return "mixed"


def heads_of(metrics: dict[str, Tensor]) -> list[dict[str, Any]]:
    """One record per (batch row, head) of head_metrics' tensors: its position, METRICS and kind."""
    B, H = metrics["entropy"].shape
    heads = []
    for b in range(B):
        for h in range(H):
            head: dict[str, Any] = {name: float(metrics[name][b, h]) for name in METRICS}
            heads.append({"batch": b, "head": h, **head, "kind": head_kind(head)})
    return heads


def inputs_distribution(
    cell: Cell, settings: MeasureSettings, context: MeasureContext, device: torch.device
) -> dict[str, Any] | None:
    """The distribution record of a cell's inputs (the context's cached ones when the cell just made them): its key
    (distribution_key), the rows scored, the rule and one record per head; None for a cell distribution_key skips."""
    key = distribution_key(cell)
    if key is None:
        return None
    inputs = context.cell_inputs(cell, settings, device)
    q, k, kv_mask = inputs.q, inputs.k, inputs.kv_mask
    rows, chunk, valid = sampled(q, k, settings.error_rows, cell.seed, kv_mask)
    metrics = head_metrics(q, k, causal=cell.causal, rows=rows, valid=valid, chunk=chunk, kv_mask=kv_mask)
    if not all(math.isfinite(float(t.sum())) for t in metrics.values()):
        return None  # non-finite inputs: no distribution to show (the cells' rows say why)
    return {"key": key, "rows": int(valid.sum()), "rule": KIND_RULE, "heads": heads_of(metrics)}
