"""Generic converters for spec values: each takes (value, where) and raises SpecError("<where>: <what>; <fix>").

Values come from TOML (typed) or flags (strings); both are accepted.
"""

from __future__ import annotations

import math
import re
from typing import Any

from variants._checks import did_you_mean

# Values that reach a job script or a command line (sbatch options, a Ray address): printable ASCII without
# spaces, quotes, '$', '`', ';', '&', '|' or a backslash, so no value can start a new line or a command.
SAFE_VALUE = re.compile(r"[A-Za-z0-9_.:/@%+=,\[\]-]+")
SAFE_VALUE_RULE = "letters, digits and _ . : / @ % + = , [ ] - (no space, quote, newline or control character)"
SAFE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


class SpecError(ValueError):
    """A bad spec value; build_spec turns it into one UsageError line."""


# Bounds far beyond what any machine holds (a 16M-token sequence, a 64K batch): a larger value is a typo.
MAX_SEQ_LEN, MAX_BATCH, MAX_HEADS, MAX_HEAD_DIM, MAX_STEPS = 2**24, 2**16, 2**12, 2**12, 2**20


def as_list(value: Any, where: str | None = None) -> list:
    """A list from a list, a comma string ('' -> []) or one value; with `where`, an empty item ('64,,128') is a
    SpecError."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
        if where is not None and len(items) > 1 and not all(items):
            raise SpecError(f"{where}: {value!r} has an empty item between commas; write e.g. 64,128")
        return [v for v in items if v]
    return [value]


def to_int(value: Any, where: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise SpecError(f"{where}: expected an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise SpecError(f"{where}: must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(f"{where}: must be <= {maximum}, got {value}")
    return value


def positive_int(value: Any, where: str) -> int:
    return to_int(value, where, minimum=1)


def timing_processes(maximum: int):
    """A converter for --processes: 1, or 3 to `maximum` (two processes give a t quantile of 12.7, an interval too
    wide to read: harness.measure.rounds.process_interval)."""

    def convert(value: Any, where: str) -> int:
        count = to_int(value, where, minimum=1, maximum=maximum)
        if count == 2:
            raise SpecError(
                f"{where}: 2 processes give an interval 12.7 standard deviations wide (Student's t at one degree of "
                "freedom); give 1 (this process only) or 3 or more"
            )
        return count

    return convert


def bounded_int(maximum: int, minimum: int = 1):
    """A converter for an integer in [minimum, maximum]."""
    return lambda value, where: to_int(value, where, minimum=minimum, maximum=maximum)


def optional_int(minimum: int):
    """A converter for an integer >= minimum, or None ('' / 'none')."""

    def convert(value: Any, where: str) -> int | None:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
            return None
        return to_int(value, where, minimum=minimum)

    return convert


def number(value: Any, where: str, *, positive: bool = False) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise SpecError(f"{where}: expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value):
        raise SpecError(f"{where}: expected a finite number, got {value!r}")
    if positive and not value > 0:
        raise SpecError(f"{where}: must be > 0, got {value}")
    return float(value)


def positive_number(value: Any, where: str) -> float:
    return number(value, where, positive=True)


def timeout(value: Any, where: str) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "0", "off")) or value == 0:
        return None
    return number(value, where, positive=True)


def lengths(item: Any, where: str) -> list[int]:
    """One seq-len item: 4096, "4k", or a doubling range "256..8192"."""
    if isinstance(item, str):
        text = item.strip().lower()
        if ".." in text:
            lo, _, hi = text.partition("..")
            if ".." in hi:
                raise SpecError(f"{where}: range {item!r} has more than one '..'; write low..high, e.g. 256..8192")
            start, stop = lengths(lo, where)[0], lengths(hi, where)[0]
            if stop < start:
                raise SpecError(f"{where}: range {item!r} runs backwards; write low..high, e.g. 256..8192")
            out = [start]
            while out[-1] * 2 <= stop:
                out.append(out[-1] * 2)
            return out
        scale = 1024 if text.endswith("k") else 1
        try:
            return [int(text[:-1] if scale > 1 else text) * scale]
        except ValueError:
            raise SpecError(f"{where}: {item!r} is not a length; write e.g. 1024, 4k or 256..8192") from None
    if isinstance(item, bool) or not isinstance(item, int):
        raise SpecError(f"{where}: {item!r} is not a length; write e.g. 1024, 4k or 256..8192")
    return [item]


def positive_ints(value: Any, where: str, *, as_lengths: bool = False, maximum: int = MAX_HEAD_DIM) -> tuple[int, ...]:
    """Distinct integers in [1, maximum] (sequence lengths with `as_lengths`: 4k and 256..8192 too, up to MAX_SEQ_LEN)."""
    items = as_list(value, where)
    if not items:
        raise SpecError(f"{where}: needs at least one value")
    maximum = MAX_SEQ_LEN if as_lengths else maximum
    out: list[int] = []
    for item in items:
        numbers = lengths(item, where) if as_lengths else [to_int(item, where)]
        for n in numbers:
            if n < 1:
                what = "sequence lengths" if as_lengths else "values"
                raise SpecError(f"{where}: {what} must be positive integers, got {n}")
            if at_most(n, maximum, where) not in out:
                out.append(n)
    return tuple(out)


def at_most(n: int, maximum: int, where: str) -> int:
    """`n` when it is at most `maximum` (MAX_SEQ_LEN for a length); else SpecError naming `where` and the limit."""
    if n > maximum:
        raise SpecError(f"{where}: {n} is beyond what any machine holds; the limit is {maximum}")
    return n


def optional_positive_ints(value: Any, where: str) -> tuple[int, ...]:
    """Positive integers up to MAX_HEADS, or none at all (an empty list or '': the setting's default applies)."""
    return positive_ints(value, where, maximum=MAX_HEADS) if as_list(value) else ()


def fractions(value: Any, where: str) -> tuple[float, ...]:
    """Distinct numbers in [0, 1), e.g. padding fractions '0,0.25'."""
    items = as_list(value, where)
    if not items:
        raise SpecError(f"{where}: needs at least one value in [0, 1), e.g. 0 or 0.25")
    out: list[float] = []
    for item in items:
        x = number(item, where)
        if not 0 <= x < 1:
            raise SpecError(f"{where}: must be in [0, 1) (a fraction of the keys), got {item!r}")
        if x not in out:
            out.append(x)
    return tuple(out)


def budgets(value: Any, where: str, *, bounds: str = "relative L2 error or 1 - cosine") -> tuple[float, ...]:
    """Error budgets: distinct positive numbers, ascending ('none' or empty: no search, every config as given);
    `bounds`: what they bound, for the message."""
    if isinstance(value, str) and value.strip().lower() in ("", "none"):
        return ()
    out: set[float] = set()
    for item in as_list(value, where):
        x = number(item, where)
        if not 0 < x <= 2:
            raise SpecError(
                f"{where}: an error budget must be in (0, 2] ({bounds}), got {item!r}; "
                "e.g. --error-budgets 0.01,0.05,0.1"
            )
        out.add(x)
    return tuple(sorted(out))


def seq_lens(value: Any, where: str) -> tuple[int, ...]:
    return positive_ints(value, where, as_lengths=True)


def choices(options: tuple[str, ...], aliases: dict[str, str] | None = None, *, single: bool = False):
    """A converter to a tuple of distinct names from `options` (aliases allowed), or one name if `single`."""
    aliases = aliases or {}

    def convert(value: Any, where: str):
        out: list[str] = []
        items = as_list(value, where)
        if not items:
            raise SpecError(f"{where}: needs at least one of {', '.join(options)}")
        for item in items:
            name = aliases.get(str(item).strip().lower(), str(item).strip().lower())
            if name not in options:
                raise SpecError(
                    f"{where}: unknown value {item!r}; expected one of {', '.join(options)}{did_you_mean(item, options)}"
                )
            if name not in out:
                out.append(name)
        if single:
            if len(out) != 1:
                raise SpecError(f"{where}: expected one of {', '.join(options)}, got {value!r}")
            return out[0]
        return tuple(out)

    return convert


def bools(value: Any, where: str) -> tuple[bool, ...]:
    """true, false or both."""
    if isinstance(value, str) and value.strip().lower() == "both":
        return (False, True)
    out: list[bool] = []
    for item in as_list(value, where):
        if isinstance(item, str):
            low = item.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise SpecError(f"{where}: expected true, false or both, got {item!r}")
            item = low in ("true", "1", "yes")
        if not isinstance(item, bool):
            raise SpecError(f"{where}: expected true, false or both, got {item!r}")
        if item not in out:
            out.append(item)
    if not out:
        raise SpecError(f"{where}: needs true, false or both")
    return tuple(out)


def texts(value: Any, where: str) -> tuple[str, ...]:
    """Non-empty strings (a module name or a file path each)."""
    out = tuple(str(v).strip() for v in as_list(value, where))
    if not all(out):
        raise SpecError(f"{where}: an empty name; give a module name or a .py file")
    return out


def safe_text(value: Any, where: str) -> str:
    """A value bound for a job script or a command line (SAFE_VALUE), stripped at its ends; else SpecError."""
    text = str(value).strip()
    if not SAFE_VALUE.fullmatch(text):
        raise SpecError(f"{where}: {value!r} is not a plain value; use only {SAFE_VALUE_RULE}")
    return text


def optional_safe_text(value: Any, where: str) -> str | None:
    """safe_text, or None for None or ''."""
    return None if value is None or str(value).strip() == "" else safe_text(value, where)


def key_values(value: Any, where: str) -> tuple[str, ...]:
    """ "key=value" items (repeated flags and comma lists alike): a key of letters, digits, '-' and '_', a safe value."""
    out = []
    for item in [part for item in as_list(value, where) for part in as_list(str(item), where)]:
        key, eq, val = str(item).partition("=")
        key, val = key.strip(), val.strip()
        if not eq or not SAFE_KEY.fullmatch(key) or not val:
            raise SpecError(
                f"{where}: {item!r} is not key=value with a key of letters, digits, '-' and '_'; "
                "write e.g. account=myproject,qos=high"
            )
        out.append(f"{key}={safe_text(val, where)}")
    return tuple(out)
