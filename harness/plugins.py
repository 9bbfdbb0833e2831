"""Import the user's variant plugins (--plugin, a spec's `plugins`), naming the one that fails."""

from __future__ import annotations

from typing import Iterable

from harness.errors import UsageError


def load_plugins(targets: Iterable[str]) -> None:
    """Import each target (module name or .py file) so its variants register; UsageError names a failing one."""
    from variants import load_plugin

    for target in targets:
        try:
            load_plugin(str(target))
        except Exception as exc:
            raise UsageError(f"--plugin {target}: {type(exc).__name__}: {exc}") from None
