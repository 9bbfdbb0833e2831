"""The deploy study's numbers: a target's errors against the PyTorch call and float64, its latency ratio, its reason.

Pure (numpy in, floats out), so a hand-made case checks each value (tests/harness/studies/test_deploy_numbers.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

MATCH_TOLERANCE = 1e-4  # max abs difference to the PyTorch call above which a target's row is a mismatch


def target_scores(output: np.ndarray, call: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    """max_abs_error of `output` against the PyTorch call's `call` and rel_l2_error against the float64 `exact`.

    rel_l2_error = ||output - exact|| / ||exact|| (Frobenius over the whole tensor, computed in float64)."""
    if output.shape != call.shape or output.shape != exact.shape:
        raise ValueError(f"output shape {output.shape} differs from the PyTorch call's {call.shape} or {exact.shape}")
    out64, exact64 = output.astype(np.float64), exact.astype(np.float64)
    return {
        "max_abs_error": float(np.max(np.abs(out64 - call.astype(np.float64)), initial=0.0)),
        "rel_l2_error": float(np.linalg.norm(out64 - exact64) / max(np.linalg.norm(exact64), 1e-300)),
    }


def latency_ratio(latency_s: float | None, eager_latency_s: float | None) -> float | None:
    """A target's seconds per call over PyTorch eager's in the same run (2.0: twice as slow); None without both."""
    if latency_s is None or not eager_latency_s:
        return None
    return latency_s / eager_latency_s


def timed_fields(latency_s: float, eager_latency_s: float, scores: dict[str, float]) -> dict[str, Any]:
    """An ok row's measured fields, status 'mismatch' (with the reason) when max_abs_error exceeds MATCH_TOLERANCE."""
    fields: dict[str, Any] = {
        "status": "ok",
        "latency_s": latency_s,
        "latency_ratio": latency_ratio(latency_s, eager_latency_s),
        **scores,
    }
    if scores["max_abs_error"] > MATCH_TOLERANCE or not np.isfinite(scores["max_abs_error"]):
        fields["status"] = "mismatch"
        fields["reason"] = (
            f"max abs error {scores['max_abs_error']:.3g} against the PyTorch call exceeds {MATCH_TOLERANCE:g}"
        )
    return fields


def first_line(exc: BaseException) -> str:
    """The exporter's or runtime's own first message line, with its exception type: 'TypeError: unhashable ...'.

    torch.export's constraint errors open with 'Constraints violated (...)! For more information, run with ...': the
    first '- ' line after it (what specialised) is kept beside it, since that says why."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = lines[0] if lines else "(no message)"
    head = head.split(" For more information, run with")[0]
    detail = next((line[2:] for line in lines[1:] if line.startswith("- ")), None)
    if detail and head.startswith("Constraints violated"):
        head = f"Constraints violated: {detail.split(' If you')[0]}"
    return f"{type(exc).__name__}: {head}"
