"""Numbers for people: the one place that turns raw seconds, bytes, lengths, ratios and reasons into text.

Rows store raw values (seconds, bytes, floats); everything shown (the report, its figures, the
studies' tables, the sweep's terminal table) is formatted here. A missing or non-finite value is "-".
"""

from __future__ import annotations

import math
from typing import Any

REASON_WIDTH = 90  # characters of a failure reason shown in a table cell
NO_REASON = "(no reason recorded)"


def _finite(value: Any) -> float | None:
    """value as a float, or None when it is missing, not a number, NaN or infinite."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def format_number(value: Any, spec: str, suffix: str = "") -> str:
    """`value` with a format spec and a suffix ('1.23x' from (1.234, '.2f', 'x')); '-' when missing or not finite."""
    number = _finite(value)
    return "-" if number is None else f"{number:{spec}}{suffix}"


def format_seconds(value: Any) -> str:
    """Seconds in the report and on figure axes: '12.3 us', '4.56 ms', '1.23 s' (three significant digits)."""
    number = _finite(value)
    if number is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(number) >= scale:
            return f"{number / scale:.3g} {unit}"
    return f"{number * 1e9:.3g} ns"


def format_seconds_compact(value: Any) -> str:
    """Seconds in a narrow terminal column: '12us' (whole microseconds below 1 ms), '4.56ms', '1.23s'."""
    number = _finite(value)
    if number is None:
        return "-"
    if number < 1e-3:
        return f"{number * 1e6:.0f}us"
    if number < 1:
        return f"{number * 1e3:.3g}ms"
    return f"{number:.3g}s"


def format_bytes(value: Any) -> str:
    """Bytes in binary units: '512 B', '3 KiB', '1.5 MiB', '2 GiB' (three significant digits)."""
    number = _finite(value)
    if number is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(number) >= size:
            return f"{number / size:.3g} {unit}"
    return f"{number:.0f} B"


def format_n(n: Any) -> str:
    """A sequence length: '4K' for 4096 (whole multiples of 1024), '256', '1.5' for a non-integer axis tick."""
    x = float(n)
    if x >= 1024 and x % 1024 == 0:
        return f"{int(x) // 1024}K"
    return f"{int(x)}" if x == int(x) else f"{x:g}"


def format_ratio(value: Any, digits: int = 2) -> str:
    """A ratio to a baseline: '1.23x'; '-' when missing or not finite."""
    return format_number(value, f".{digits}f", "x")


def format_times(value: Any) -> str:
    """A speed-up without its 'x', short for a table cell: '3.1', '0.95', '12.8', '256' (two significant digits
    below 10, three from there, whole numbers from 100)."""
    number = _finite(value)
    if number is None:
        return "-"
    if abs(number) >= 100:
        return f"{number:.0f}"
    return f"{number:.3g}" if abs(number) >= 10 else f"{number:.2g}"


def format_error(value: Any, digits: int = 1) -> str:
    """An error in scientific notation: '1.2e-03' (digits after the point); '-' when missing or not finite."""
    return format_number(value, f".{digits}e")


def format_text(value: Any) -> str:
    """A value as recorded, '-' for None or an empty string."""
    return "-" if value is None or value == "" else str(value)


def short_reason(reason: Any, width: int = REASON_WIDTH, *, missing: str = NO_REASON) -> str:
    """A failure reason on one line, cut to `width` characters with '...'; `missing` when None or NaN ('' stays '')."""
    if reason is None or (isinstance(reason, float) and math.isnan(reason)):
        return missing
    text = " ".join(str(reason).split())
    return text if len(text) <= width else text[: width - 3] + "..."
