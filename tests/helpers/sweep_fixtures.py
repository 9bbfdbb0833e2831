"""Shared helpers for the sweep tests (imported by them; registers nothing at import)."""

from __future__ import annotations

import sys
from pathlib import Path

PLUGIN = Path(__file__).with_name("sweep_test_variants.py")  # tests/helpers/


def load_test_variants():
    """Register the test-only variants; returns a function that removes them again."""
    from variants import _registry, list_variants, load_plugin

    list_variants()  # built-ins first
    module_name = load_plugin(str(PLUGIN))
    names = sys.modules[module_name].NAMES

    def unload() -> None:
        for name in names:
            _registry._REGISTRY.pop(name, None)
        sys.modules.pop(module_name, None)

    return unload
