"""Hand-made jobs for the child-process runner (harness.child): standard library only, so a child starts quickly.

`serve(setup)` returns a handler; each job is [what, value]: "scale" returns value * setup["scale"] with the child's
pid, "sleep" sleeps value seconds, "raise" raises ValueError, "exit" leaves with exit code value after a line on
stderr, "sigkill" kills itself. `broken(setup)` fails as a plugin that raises on import does.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, Callable


def serve(setup: dict[str, Any]) -> Callable[[list], Any]:
    """The handler of a child set up with `setup` ({"scale": number})."""

    def handle(job: list) -> Any:
        what, value = job
        if what == "scale":
            return {"value": value * setup["scale"], "pid": os.getpid()}
        if what == "sleep":
            time.sleep(value)
            return "slept"
        if what == "raise":
            raise ValueError(f"bad job {value}")
        if what == "exit":
            print(f"last words before exit {value}", file=sys.stderr, flush=True)
            os._exit(value)
        if what == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise KeyError(what)

    return handle


def broken(setup: dict[str, Any]) -> Callable[[list], Any]:
    """A setup that fails, as a plugin that raises on import does."""
    raise RuntimeError("this setup is broken on purpose")
