"""Input and config validation with messages that say what was given, what was expected, how to fix it."""

from __future__ import annotations

import math
from typing import Any, Iterable

import torch
from torch import Tensor


def check_qkv(q: Any, k: Any, v: Any, *, causal: bool = False, kv_mask: Any = None) -> None:
    """Raise TypeError/ValueError unless q (B, H, N, D), k and v (B, H_kv, M, D) fit the contract.

    H_kv may be smaller than H when it divides it (GQA; MQA when H_kv = 1): query head h reads
    K/V head h // (H // H_kv).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of shape (B, H, N, D), got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must have 4 dims (B, H, N, D), got shape {tuple(t.shape)}; "
                "for (B, N, E) inputs use variants.MultiHeadAttention"
            )
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got q={q.dtype}, k={k.dtype}, v={v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got q={q.device}, k={k.device}, v={v.device}")
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape (B, H_kv, M, D), got k={tuple(k.shape)}, v={tuple(v.shape)}"
        )
    B, H, N, D = q.shape
    if (k.shape[0], k.shape[3]) != (B, D):
        raise ValueError(f"k must be (B={B}, H_kv, M, D={D}) to match q {tuple(q.shape)}, got {tuple(k.shape)}")
    check_kv_heads(H, k.shape[1], what=f"q {tuple(q.shape)}, k {tuple(k.shape)}")
    M = k.shape[2]
    if N < 1 or M < 1 or D < 1:
        raise ValueError(f"sequence lengths and head dim must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    if causal and N > M:
        raise ValueError(
            f"causal=True needs N <= M (the N queries are the last N of the M key positions, bottom-right), got "
            f"N={N}, M={M}; pass the keys of every query position, or causal=False"
        )
    if kv_mask is not None:
        if not isinstance(kv_mask, Tensor):
            raise TypeError(f"kv_mask must be a bool tensor of shape (B, M) or None, got {type(kv_mask).__name__}")
        if kv_mask.dtype != torch.bool:
            raise TypeError(
                f"kv_mask must have dtype torch.bool (True = real token), got {kv_mask.dtype}; "
                "convert with kv_mask.bool()"
            )
        if tuple(kv_mask.shape) != (B, M):
            raise ValueError(f"kv_mask must have shape (B, M) = ({B}, {M}), got {tuple(kv_mask.shape)}")
        if kv_mask.device != q.device:
            raise ValueError(f"kv_mask must be on q's device {q.device}, got {kv_mask.device}")


def query_offset(N: int, M: int, causal: bool) -> int:
    """The position of query row 0 among the M key positions: M - N under causal=True (the queries are the last N,
    bottom-right, as FlashAttention >= 2.1 and torch's causal_lower_right align them), else 0 (aligned at the start)."""
    return M - N if causal else 0


def check_kv_heads(H: int, H_kv: int, *, what: str = "") -> int:
    """Raise ValueError unless H_kv >= 1 divides H; return the group size G = H // H_kv."""
    if H_kv < 1 or H % H_kv:
        divisors = ", ".join(str(d) for d in range(1, H + 1) if H % d == 0)
        given = f" (got {what})" if what else ""
        raise ValueError(
            f"k and v have H_kv={H_kv} heads, which does not divide the H={H} query heads{given}; "
            f"grouped-query attention needs H % H_kv == 0 (query head h reads K/V head h // (H // H_kv)): "
            f"use H_kv in ({divisors})"
        )
    return H // H_kv


def check_int(field: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> None:
    """Raise unless value is an int (not a bool) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} must be an integer, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{field} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{field} must be <= {maximum}, got {value}")


def check_float(field: str, value: Any, *, minimum: float | None = None, positive: bool = False) -> None:
    """Raise unless value is a real number (> 0 if positive, >= minimum if given)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field} must be a number, got {value!r} ({type(value).__name__})")
    if positive and not value > 0:
        raise ValueError(f"{field} must be > 0, got {value}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{field} must be >= {minimum}, got {value}")


def check_choice(field: str, value: Any, choices: Iterable[str]) -> None:
    """Raise unless value is one of choices; suggest the closest one."""
    choices = list(choices)
    if value in choices:
        return
    raise ValueError(
        f"{field} must be one of {', '.join(map(repr, choices))}, got {value!r}{did_you_mean(value, choices)}"
    )


def did_you_mean(value: Any, choices: Iterable[str]) -> str:
    """'. Did you mean 'x'?' for the closest choice, or '' when none is close."""
    import difflib

    close = difflib.get_close_matches(str(value), list(choices), n=1)
    return f". Did you mean {close[0]!r}?" if close else ""


def softmax_scale(D: int) -> float:
    """1/sqrt(head_dim): the scale of every variant (D is the head dim, not the model width)."""
    return 1.0 / math.sqrt(D)
