"""Which wheels of a folder to install: only packages this Python lacks, never the ones its torch is built with.

    python scripts/missing_wheels.py WHEELS_DIR      # prints the wheel paths to install, one a line

scripts/gpu_sweep.sh and scripts/gpu_check.sh install what this prints into a folder put on PYTHONPATH, so a
brought torch, triton or numpy never shadows the machine's own (the CUDA build its torch expects), and a package
the machine already has is never replaced by a brought copy. A skipped wheel is named on stderr with the reason.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

# The machine's CUDA stack: whatever is brought, these are never installed from a wheels folder.
NEVER = ("torch", "triton", "pytorch-triton", "numpy")
NEVER_PREFIXES = ("nvidia-",)  # CUDA libraries torch's wheels depend on (nvidia-cudnn-cu13, ...)


def normalized(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503): lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> str:
    """The distribution a wheel file installs, from its file name (name-version-...-platform.whl)."""
    return normalized(path.name.split("-", 1)[0])


def installed() -> set[str]:
    """The distributions this Python (and its PYTHONPATH) already has."""
    return {normalized(d.metadata["Name"]) for d in metadata.distributions() if d.metadata["Name"]}


def select(wheels: list[Path], have: set[str]) -> tuple[list[Path], list[str]]:
    """The wheels to install and, for each other one, why not."""
    chosen, skipped = [], []
    for wheel in sorted(wheels):
        name = wheel_name(wheel)
        if name in NEVER or name.startswith(NEVER_PREFIXES):
            skipped.append(f"{wheel.name}: {name} is the machine's own CUDA stack; never installed from wheels")
        elif name in have:
            skipped.append(f"{wheel.name}: {name} is installed already; the machine's copy is kept")
        elif name in {wheel_name(w) for w in chosen}:
            skipped.append(f"{wheel.name}: a second wheel of {name}; keep one version in the folder")
        else:
            chosen.append(wheel)
    return chosen, skipped


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(
            f"usage: python scripts/missing_wheels.py WHEELS_DIR (got {' '.join(argv) or 'nothing'})", file=sys.stderr
        )
        return 2
    chosen, skipped = select(list(Path(argv[0]).glob("*.whl")), installed())
    for line in skipped:
        print(f"not installing {line}", file=sys.stderr)
    for wheel in chosen:
        print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
