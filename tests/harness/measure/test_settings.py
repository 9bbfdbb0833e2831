"""MeasureSettings: its defaults are the CPU default spec's, so measuring without a spec measures as a CPU sweep does."""

from __future__ import annotations

from harness.measure import MeasureSettings
from harness.spec.build import build_spec


def test_the_defaults_are_the_cpu_default_specs_settings():
    assert MeasureSettings() == MeasureSettings.from_spec(build_spec(cli={"device": "cpu"}))
