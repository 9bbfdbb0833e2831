"""A memory size as a spec gives it ('2GiB', '80GiB', 'device', 'none'): the value of --memory-budget, in bytes."""

from __future__ import annotations

import re
from typing import Any

from harness.spec.convert import SpecError

MIN_MEMORY_BUDGET = 2**10  # bytes: no train cell's peak memory beyond its inputs is smaller, so no answer lies below
BYTE_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6,
              "gb": 10**9, "tb": 10**12}  # fmt: skip


def memory_budget(value: Any, where: str) -> int | str | None:
    """A memory size in bytes ('2GiB', '80GiB', '512MiB', '16GB', 2147483648), 'device' (the device's memory: a GPU's
    total, a CPU machine's RAM; resolved when the sweep runs), or None ('none', '', 0: no search)."""
    text = str(value).strip().lower().replace(" ", "")
    if value is None or text in ("", "none", "0"):
        return None
    if text == "device":
        return "device"
    found = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)([a-z]*)", text)
    if isinstance(value, bool) or found is None or found.group(2) not in BYTE_UNITS or float(found.group(1)) <= 0:
        raise SpecError(
            f"{where}: expected a memory size like '2GiB', '80GiB', '512MiB' or 'device', got {value!r}; "
            "units: B, KiB, MiB, GiB, TiB (or KB, MB, GB, TB)"
        )
    size = int(float(found.group(1)) * BYTE_UNITS[found.group(2)])
    if size < MIN_MEMORY_BUDGET:  # 0.5 would be read as 0 bytes, and the search would silently never run
        raise SpecError(
            f"{where}: {value!r} is {size} bytes, below the minimum of {MIN_MEMORY_BUDGET} bytes (1KiB); give a size "
            "like '512MiB' or '2GiB', or 'none' for no search"
        )
    return size
