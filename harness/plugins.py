"""Import the user's variant plugins (--plugin, a spec's `plugins`), naming the one that fails."""

from __future__ import annotations

from typing import Iterable

from harness.errors import UsageError


def load_plugins(targets: Iterable[str]) -> None:
    """Import each target (module name or .py file) so its variants register; UsageError names a failing one.

    Whatever a plugin raises while it is imported is this one line, a SystemExit (sys.exit, exit()) or another
    BaseException too; only the user's Ctrl-C passes through.
    """
    from variants import load_plugin  # torch: a command without plugins never loads it here

    for target in targets:
        try:
            load_plugin(str(target))
        except KeyboardInterrupt:
            raise
        except SystemExit as exc:
            raise UsageError(
                f"--plugin {target}: the plugin called sys.exit({exc.code!r}) while being imported; "
                "a plugin module should only define and register variants"
            ) from None
        except BaseException as exc:  # noqa: BLE001 - a plugin's failure is one line naming it, never a traceback
            raise UsageError(f"--plugin {target}: {type(exc).__name__}: {exc}") from None
