"""The sweep spec: what a sweep measures (SweepSpec), built from defaults < TOML < flags and written back as TOML."""

from harness.spec.build import FLAGS, KEYS, build_spec, default_text, describe
from harness.spec.sweep_spec import (
    ACCURACY_REFERENCES,
    DTYPES,
    MODES,
    RESUMED_SPEC_DEFAULTS,
    SweepSpec,
    VariantEntry,
)
from harness.spec.toml_io import load_toml, spec_to_toml, stored_spec_values

__all__ = [
    "ACCURACY_REFERENCES",
    "DTYPES",
    "FLAGS",
    "KEYS",
    "MODES",
    "RESUMED_SPEC_DEFAULTS",
    "SweepSpec",
    "VariantEntry",
    "build_spec",
    "default_text",
    "describe",
    "load_toml",
    "spec_to_toml",
    "stored_spec_values",
]
