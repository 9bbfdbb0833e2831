"""`--isolate`: kept for callers of the sweep issue's API; it is now `--executor subprocess` (harness.executors.subprocess)."""
from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

from harness.executors import STARTUP_SLACK_S  # noqa: F401 - re-exported
from harness.executors.subprocess import death_status as _death  # noqa: F401 - re-exported
from harness.executors.subprocess import main as _main
from harness.executors.worker import CellJob


def measure_isolated(cell: Any, settings: Any, run: Any, plugins: tuple[str, ...] = ()) -> dict[str, Any]:
    """Measure `cell` in a subprocess; a crash, a kill or a hang becomes the row's status."""
    from harness.executors.subprocess import measure_isolated as measure

    return measure(cell, CellJob(settings=settings.to_dict(), run=asdict(run), plugins=tuple(plugins)))


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
