"""Time limits for tests that wait on processes: stretched by the machine's load, so a busy neighbour is not a failure.

A limit here bounds a hang (a test must end), not a speed: on a machine with load L per CPU every wall-clock wait
is stretched by about 1 + L, capped, so the test still ends when the product hangs.
"""

from __future__ import annotations

from harness.measure.noise import load_per_cpu

MAX_STRETCH = 12.0  # a hang still ends the test within 12x its quiet limit


def load_scaled(seconds: float) -> float:
    """`seconds` times 1 + (other processes' load per usable CPU now), at most MAX_STRETCH times."""
    load = load_per_cpu() or 0.0
    return seconds * min(MAX_STRETCH, 1.0 + load)
