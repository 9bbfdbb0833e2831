"""Attention scores computed from int8 Q and K (a call's ``int8_scores=True``; dense's textbook path runs it).

Each row of q and of k (one token of one head) is quantized to int8 with its own float32 scale by the project's one
quantizer (variants._quantize); the products are summed exactly in int32 by an integer matmul, torch._int_mm, and
rescaled to float32 by the two rows' scales: score[i, j] = (sum_d q8[i, d] k8[j, d]) * sq[i] * sk[j]. The int32 sum is
exact, |sum| <= 127^2 * D < 2^31 for D below 133,000. torch._int_mm takes 2-D matrices, so it runs once per (batch,
K/V head), each writing its slice of one int32 tensor. On CUDA it needs more than 16 rows and D and M multiples of 8:
other shapes are refused (int8_scores_reasons); on CPU it takes any.
"""

from __future__ import annotations

import torch
from torch import Tensor

from variants._quantize import quantize

INT8_SCORES_KERNEL = "torch._int_mm"  # the integer matmul that sums the int8 products (a row's scores_kernel)


def int8_scores(q: Tensor, k: Tensor) -> Tensor:
    """The float32 scores q k^T (B, H, R, M) of q (B, H, R, D) and k (B, H, M, D) from their per-row int8 quantization
    (GQA: a K/V head's query heads stacked as its R rows)."""
    B, H, R, D = q.shape
    M = k.shape[2]
    q8, k8 = quantize(q, "int8"), quantize(k, "int8")
    rows, keys = q8.values.reshape(B * H, R, D), k8.values.reshape(B * H, M, D)
    exact = torch.empty(B * H, R, M, dtype=torch.int32, device=q.device)  # sum_d q8 k8, exact
    for i in range(B * H):  # (R, D) @ (D, M), int8 in, int32 out, into its slice (stacking would copy R x M again)
        torch._int_mm(rows[i], keys[i].t(), out=exact[i])  # K^T a view (column-major), no copy
    scores = exact.view(B, H, R, M).to(torch.float32)
    return scores.mul_(q8.scale).mul_(k8.scale.transpose(-2, -1))  # (B, H, R, M) * (B, H, R, 1) * (B, H, 1, M)


def int8_scores_reasons(q: Tensor, k: Tensor) -> list[str]:
    """Why torch._int_mm cannot take this call's scores ([] if it can): on CUDA it needs more than 16 query rows per
    K/V head and D and M multiples of 8."""
    if q.device.type != "cuda":
        return []
    rows, D, M = q.shape[2] * (q.shape[1] // k.shape[1]), q.shape[3], k.shape[2]
    if rows > 16 and D % 8 == 0 and M % 8 == 0:
        return []
    return [
        f"int8 scores: torch._int_mm on CUDA needs more than 16 query rows per K/V head and D and M multiples of 8, "
        f"got {rows} rows, D={D}, M={M}"
    ]
