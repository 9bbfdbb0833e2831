"""Presets: small embedded specs a sweep names with --preset NAME (harness/spec/<NAME>.toml).

A preset's values lie over the device's embedded default and under a --config file and the flags.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from harness.errors import UsageError
from harness.spec.toml_io import parse_toml
from variants._checks import did_you_mean

PRESETS = {  # name -> one line for `sweep --help` and the refusal of an unknown name
    "quick": "a first look in about a minute on 2 cores: dense, sliding_window and chunked at N=512 and 2K on "
    "local inputs, one error budget (0.1), CPU-time speed-ups",
}


def preset_values(name: str) -> dict[str, Any]:
    """The preset's spec values; UsageError naming the presets for an unknown name."""
    if name not in PRESETS:
        listed = "; ".join(f"{key} ({line})" for key, line in PRESETS.items())
        raise UsageError(f"--preset {name!r}: no such preset; the presets: {listed}{did_you_mean(name, PRESETS)}")
    return parse_toml(resources.files("harness.spec").joinpath(f"{name}.toml").read_text(encoding="utf-8"))
