"""Import the user's variant plugins (--plugin, a spec's `plugins`), refusing one that fails or changes the process.

A plugin is imported into the driver (its names, configs and capabilities plan the sweep) and into the processes that
measure its cells. Its import may only define and register: one that changes a global of this process (torch's
default dtype or threads, a `torch.backends` flag, a function of torch, `variants` or `harness`, a registered entry;
harness.process_state) would change the numbers of built-in rows, so it is refused with its changes named.
"""

from __future__ import annotations

from typing import Iterable

from harness.errors import UsageError

SHOWN = 3  # changes a refusal names; more are counted
_LOADED: set[str] = set()  # targets imported and checked in this process: importing again is a no-op
# targets refused for what their import changed, with the refusal: the module stays imported (and its changes made),
# so asking again in this process (a reused worker, a second sweep from Python) is refused again, never taken
_REFUSED: dict[str, str] = {}


def load_plugins(targets: Iterable[str]) -> None:
    """Import each target (module name or .py file) so its variants register; UsageError names a failing one.

    Whatever a plugin raises while it is imported is this one line, a SystemExit (sys.exit, exit()) or another
    BaseException too; only the user's Ctrl-C passes through. So is a plugin whose import changed this process's
    state (harness.process_state): the refusal names the change.
    """
    # torch: a command without plugins never loads these here
    from harness.inputs import list_inputs
    from harness.process_state import changes, snapshot
    from variants import list_variants, load_plugin

    targets = [str(target) for target in targets if str(target) not in _LOADED]
    for target in targets:
        if target in _REFUSED:
            raise UsageError(_REFUSED[target])
    if targets:  # the built-in variants and inputs (and installed plugins) registered before the snapshot
        list_variants()
        list_inputs()
        # heavy (sympy), but every measuring process imports it anyway; its first import wraps torch.manual_seed and
        # sets TORCHINDUCTOR_CACHE_DIR, which must not be taken for a plugin's change
        import torch._dynamo  # noqa: F401
    for target in targets:
        before = snapshot()
        try:
            module = load_plugin(target)
        except KeyboardInterrupt:
            raise
        except SystemExit as exc:
            raise UsageError(
                f"--plugin {target}: the plugin called sys.exit({exc.code!r}) while being imported; "
                "a plugin module should only define and register variants"
            ) from None
        except BaseException as exc:  # noqa: BLE001 - a plugin's failure is one line naming it, never a traceback
            raise UsageError(f"--plugin {target}: {type(exc).__name__}: {exc}") from None
        changed = changes(before, snapshot(), module)
        if changed:
            more = f" (and {len(changed) - SHOWN} more)" if len(changed) > SHOWN else ""
            _REFUSED[target] = (
                f"--plugin {target}: importing it changed what built-in cells run with: {'; '.join(changed[:SHOWN])}"
                f"{more}; a plugin module should only define and register variants and inputs: make such changes "
                "inside your variant's forward, with the local or subprocess executor (there its cells run in a "
                "process of their own; Ray and Slurm workers run built-in cells in the same process)"
            )
            raise UsageError(_REFUSED[target])
        _LOADED.add(target)
