"""A study row's outcome, declared once for model-eval, lm-eval, tasks and deploy: the sweep's status and reason columns
(harness.store.COL), a refused or failed call turned into one, and whether a row succeeded."""

from __future__ import annotations

from typing import Any

from harness.report.render import REASON_WIDTH, short_reason
from harness.store import COL
from variants import NotSupportedError

OK = "ok"
FAILURES = (NotSupportedError, TypeError, ValueError)  # what a study's call of a variant raises for a row, not a crash


def with_outcome(row: dict[str, Any], status: str, reason: str | None = None) -> dict[str, Any]:
    """The row with its status and reason (a new dict)."""
    return {**row, COL.status: status, COL.reason: reason}


def failed(row: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """The row of a call that raised one of FAILURES: `unsupported` with a NotSupportedError's reasons, else `error`
    with the exception's type and message."""
    if isinstance(exc, NotSupportedError):
        return with_outcome(row, "unsupported", "; ".join(exc.reasons))
    return with_outcome(row, "error", f"{type(exc).__name__}: {exc}")


def succeeded(row: dict[str, Any]) -> bool:
    """Whether a study row ran (an older or partial row without a status did not)."""
    return row.get(COL.status) == OK


def outcome_text(row: dict[str, Any], width: int | None = REASON_WIDTH) -> str:
    """A failed row for people: 'status: reason', the reason on one line, cut to `width` characters (None: whole)."""
    reason = row.get(COL.reason)
    whole = len(str(reason))  # at least the one-line text's length: never cut
    return f"{row.get(COL.status)}: {short_reason(reason, whole if width is None else width, missing='')}"
