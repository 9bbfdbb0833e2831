"""Fixtures shared by the sweep, executor and spec tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def test_variants():
    """Register the test-only variants (sweep_test_variants.py) for one test; yields that plugin file's path."""
    from tests.helpers.sweep_fixtures import PLUGIN, load_test_variants

    unload = load_test_variants()
    yield str(PLUGIN)
    unload()


@pytest.fixture
def no_report(monkeypatch):
    """Stub the report (it draws figures and runs variants in-process for attention maps)."""
    report = pytest.importorskip("harness.report")
    monkeypatch.setattr(report, "write_report", lambda run_dir, **options: None)
