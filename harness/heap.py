"""The measuring processes keep the memory they free (glibc's mallopt), so a call pays for its arithmetic, not for
page faults that the machine prices differently from one minute to the next.

By default glibc gives a large freed block back to the kernel (mmap'd blocks, and the heap's top past a threshold that
it adjusts as it goes), so a variant that allocates temporaries in every call touches fresh pages in every call:
chunked at N=1024 (causal, B=1, H=8, D=64, float32) took 8,333 minor page faults per call, 42.3 ms, against 0 and
30.2 ms with the heap kept; sliding_window 371 and 31, dense 0 and 0 (docs/timing.md, "The heap kept"). On this project's virtual machine a fault costs
what the host makes it cost at the moment, which moved chunked's and sliding_window's speed-ups between runs more than
anything in the process did. torch's CUDA caching allocator keeps freed blocks the same way on a GPU, and a serving or
training process reaches that state after its first steps; a measurement should start there.

keep_freed_memory() sets, through mallopt in this process: M_MMAP_THRESHOLD 32 MiB (glibc's largest: bigger blocks are
still mapped and unmapped per call), M_TRIM_THRESHOLD 2 GiB (the largest a C int holds: the heap's top is given back
only past it) and M_TOP_PAD 256 MiB (the heap grows in large steps). Called by the sweep's driver and by every process that measures cells
(harness.executors.worker), before their first cell. glibc's own settings, when the user made any (a MALLOC_*_
environment variable, or glibc.malloc in GLIBC_TUNABLES), win: nothing is changed. Elsewhere (macOS, musl) nothing is changed and the record says so. env.json's `heap` is
the record.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc's malloc.h parameter numbers
SETTINGS = (  # (parameter, its number, the value set, glibc's environment variable for it)
    ("mmap_threshold", M_MMAP_THRESHOLD, 32 * 1024 * 1024, "MALLOC_MMAP_THRESHOLD_"),
    ("trim_threshold", M_TRIM_THRESHOLD, 2**31 - 1, "MALLOC_TRIM_THRESHOLD_"),  # mallopt's value is a C int
    ("top_pad", M_TOP_PAD, 256 * 1024 * 1024, "MALLOC_TOP_PAD_"),
)
_DONE: dict[str, Any] = {}  # this process's record, once set


def keep_freed_memory() -> dict[str, Any]:
    """Keep freed memory in this process (see the module doc), once per process; what was done, for env.json."""
    if not _DONE:
        _DONE.update(_set())
    return dict(_DONE)


def _set() -> dict[str, Any]:
    user = {env: os.environ[env] for _, _, _, env in SETTINGS if env in os.environ}
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        user["GLIBC_TUNABLES"] = os.environ["GLIBC_TUNABLES"]
    if user:
        return {"set_by": "environment", **user}
    mallopt = _mallopt()
    done = {name: value for name, number, value, _ in SETTINGS if mallopt is not None and mallopt(number, value) == 1}
    if not done:  # no mallopt (macOS), or one that accepts nothing (musl's)
        return {"set_by": None, "reason": "no glibc mallopt in this process: the allocator's defaults"}
    return {"set_by": "harness (mallopt)", **done}


def _mallopt() -> Any:
    """glibc's mallopt(int, int) -> int, or None where this process has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        function = libc.mallopt
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return function
