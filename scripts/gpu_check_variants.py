"""The GPU check's variants, from the registry: every registered variant with each of its CUDA backends.

    python scripts/gpu_check_variants.py        # prints the value of `harness sweep --variants`

A variant registered later (a built-in, or a plugin imported first) is in the check with no change here. The
tables below are the only choices: backends left out, and config overrides by field name.
"""

from __future__ import annotations

import dataclasses
import sys

# Left out: the O(N^2) baselines that materialise N x M scores (OOM long before 64K; dense's SDPA row is the baseline).
SKIP_BACKENDS = ("reference", "masked")
# The backend a bare name runs on CUDA, where it is the sweep's baseline: `dense` (auto) is timed alone, and every
# other cell is paired with it, so a separate dense:backend=sdpa cell would time SDPA against itself.
AUTO_BACKEND = {"dense": "sdpa"}
# Config overrides for every variant that has the field: the window of the headline rows (ideal speed-up N/(2*512)).
FIELD_OVERRIDES = {"window": 512}


def entries() -> list[str]:
    """`--variants` entries: name[:field=value,...,backend=B] per variant and backend, in registry order."""
    from variants import get_variant, list_variants

    out = []
    for name in list_variants():
        spec = get_variant(name)
        fields = {f.name for f in dataclasses.fields(spec.config)}
        config = [f"{key}={value}" for key, value in FIELD_OVERRIDES.items() if key in fields]
        backends = [b for b in spec.backends if b not in SKIP_BACKENDS] or [None]
        for backend in backends:
            if backend is not None and backend == AUTO_BACKEND.get(name):
                backend = None  # the bare name: auto, which is this backend on CUDA
            parts = config + ([f"backend={backend}"] if backend else [])
            out.append(name + (":" + ",".join(parts) if parts else ""))
    return out


if __name__ == "__main__":
    print(",".join(entries()))
    sys.exit(0)
