"""attnsuite harness: sweep variants over sequence lengths, measure, store, report.

Run ``python -m harness --help``. Each stage is a module you can call from Python:
spec -> plan -> inputs -> [calibrate] -> measure -> store -> report.
"""

__all__ = ["open_run", "sweep"]


def __getattr__(name: str):
    """`from harness import sweep, open_run` (harness.api), imported on first use: `import harness` stays light (the
    command line, the isolated-cell child and every submodule import this package first)."""
    if name in __all__:
        from harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
