"""Load: the machine's load per usable CPU around a cell, and the thresholds from which its timing follows the
machine, not the code (the noisy flag a row gets from them: harness.measure.roofline.noise_fields)."""

from __future__ import annotations

import os
import time

import torch

HIGH_LOAD_PER_CPU = 0.6  # other processes' load per usable CPU from which timings follow the machine, not the code
NOISY_SHARE = 0.1  # a run with at least this share of noisy rows is called noisy as a whole (fewer: only those cells)
RETIME_SPREAD = 1.6  # blocks disagreeing this badly are timed once more (the second timing is kept)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS has one, else os.cpu_count())."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def load_per_cpu(own_threads: int | None = None) -> float | None:
    """Other processes' demand for CPU per usable CPU, now.

    On Linux: the runnable threads the kernel counts right now (/proc/loadavg's fourth field) less
    this process's own runnable threads (/proc/self/task/*/stat), the mean of a few samples a few ms
    apart. Elsewhere: the 1-minute load average less `own_threads` (default: torch's thread count).
    Either way the sweep's own threads are not load: left in, a quiet 2-core machine read as loaded.
    None where the OS tells neither.
    """
    samples = [n for n in (_others_running() for _ in range(SAMPLES)) if n is not None]
    if samples:
        return sum(samples) / len(samples) / usable_cpus()
    try:
        average = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    if own_threads is None:
        own_threads = torch.get_num_threads()
    return max(0.0, average - own_threads) / usable_cpus()


SAMPLES = 3  # instantaneous runnable counts averaged per reading


def _others_running() -> float | None:
    """Runnable threads of other processes now (Linux /proc), or None."""
    counts = _runnable_threads()
    time.sleep(0.002)
    return None if counts is None else float(max(0, counts[0] - counts[1]))


def _runnable_threads() -> tuple[int, int] | None:
    """(runnable threads the kernel counts, this process's runnable threads), from Linux /proc; None elsewhere."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            running = int(f.read().split()[3].split("/")[0])
        own = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat", encoding="ascii") as f:
                    own += f.read().rpartition(")")[2].split()[0] == "R"
            except OSError:
                continue  # a thread that just ended
    except (OSError, ValueError, IndexError):
        return None
    return running, own


def larger(a: float | None, b: float | None) -> float | None:
    """The larger of two loads, ignoring a missing one."""
    known = [x for x in (a, b) if x is not None]
    return max(known) if known else None
