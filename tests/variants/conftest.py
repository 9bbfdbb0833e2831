"""Contract-test set-up: a plugin that refuses a call by raising NotSupportedError is skipped with its reason, not failed.

Built-ins must declare every refusal first (not_supported_reasons), so for them it stays a failure. Fixture
`no_c_compiler`: no C compiler for the hand-written decode kernels while a test runs.
"""

from __future__ import annotations

import pytest

from variants._native import native_library


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = (yield).get_result()
    if (
        call.when != "call"
        or call.excinfo is None
        or not item.module.__name__.rpartition(".")[2].startswith("test_contract")
    ):
        return
    from variants import NotSupportedError, get_variant

    name = getattr(item, "callspec", None) and item.callspec.params.get("name")
    plugin = bool(name) and not get_variant(name).module.startswith("variants.")
    if plugin and call.excinfo.errisinstance(NotSupportedError):  # the plugin's own words, as the sweep records them
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"refused by the variant: {call.excinfo.value}")


@pytest.fixture
def no_c_compiler(monkeypatch):
    """No C compiler for the hand-written kernels (variants._native) while the test runs: $CC names none."""
    native_library.cache_clear()
    monkeypatch.setenv("CC", "no-such-compiler-attnsuite")
    yield
    native_library.cache_clear()
