"""The cells and notes the studies' tables share (harness.report.study_results).

The variant with the knob value a budget found, the budget columns and note, and a KL as people read it."""

from __future__ import annotations

from typing import Any

from harness.entries import config_label
from harness.report.render import format_number

KL_ROUNDING = 1e-6  # nats: a KL in [-KL_ROUNDING, 0) is float32 rounding of a zero KL and is shown as 0 (stored raw)


def variant_cell(row: dict[str, Any]) -> str:
    """The variant; for a row matched to an error budget, with the knob value found: 'sliding_window(window=64)'."""
    tuning = row.get("tuning")
    if row.get("budget") is None or not isinstance(tuning, dict):
        return str(row.get("variant"))
    return config_label(str(row.get("variant")), row.get("config"), show=[str(tuning.get("knob"))])


def budget_cells(rows: list[dict[str, Any]], row: dict[str, Any]) -> list[str]:
    """[the row's error budget, or '-'] when any row has one (model-eval --error-budgets), else []."""
    if all(r.get("budget") is None for r in rows):
        return []
    return [format_number(row.get("budget"), "g")]


def budget_header(rows: list[dict[str, Any]]) -> list[str]:
    """['budget (what it bounds)'] when any row has one, else []."""
    metrics = {r["tuning"].get("metric") for r in rows if isinstance(r.get("tuning"), dict)}
    if all(r.get("budget") is None for r in rows):
        return []
    return [f"budget ({', '.join(sorted(str(m) for m in metrics))})" if metrics else "budget"]


def budget_note(rows: list[dict[str, Any]]) -> str:
    """What a budget row is, when there are any (model-eval --error-budgets), else ''."""
    if all(r.get("budget") is None for r in rows):
        return ""
    return (
        " A row with a budget runs its variant at the cheapest value of its quality knob (named in the variant column)"
        " whose error on calibration texts, never the evaluated ones, is within the budget; unreachable: not even the"
        " top of the searched range is, its error in the note."
    )


def kl_text(kl: float | None) -> str:
    """A KL for people: a negative one that rounding made (down to -KL_ROUNDING) as '0', else in .2e."""
    if kl is not None and -KL_ROUNDING <= kl < 0:
        return "0"
    return format_number(kl, ".2e")
