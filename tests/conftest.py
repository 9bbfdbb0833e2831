"""Shared test set-up: the cuda marker's skip, serial tests alone under xdist (--variant-plugin: the root conftest.py)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
import torch

from harness.spec import build
from tests.helpers.serial import LOCKS_ENV, holding

CPU_PROCESSES = "processes = 4"  # harness/spec/cpu.toml's line: each paired cell timed in 4 processes


@pytest.fixture(autouse=True)
def one_timing_process(monkeypatch):
    """A sweep a test runs in its own process times each cell in one process unless the test asks for more
    (--processes): the CPU default's three later timing processes (harness.runner.processes) would start three
    children in each of the suite's sweeps. The default itself is read from the file
    (tests/harness/spec/test_processes_default.py); sweeps a test starts as a command give --processes 1 themselves."""
    default_text = build.default_text

    def one_process(device: str) -> str:
        text = default_text(device)
        if device.startswith("cuda"):
            return text
        assert CPU_PROCESSES in text, f"cpu.toml no longer says {CPU_PROCESSES!r}: update tests/conftest.py"
        return text.replace(CPU_PROCESSES, "processes = 1")

    monkeypatch.setattr(build, "default_text", one_process)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    """Ctrl-C as a terminal delivers it, even when the suite was started in the background: a shell starts a
    background job with SIGINT ignored, and the tests of the harness's Ctrl-C handling (a variant's own
    KeyboardInterrupt is a row, the user's stops the sweep; a child sweep stopped by SIGINT) would then test nothing
    but the inherited SIG_IGN. A Python handler here also gives every child process the default disposition back."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if _is_xdist_controller(config):  # the workers start after this and inherit the folder of their shared lock
        os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="attnsuite-test-locks-")


def pytest_unconfigure(config):
    if _is_xdist_controller(config):
        shutil.rmtree(os.environ.pop(LOCKS_ENV), ignore_errors=True)


def _is_xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under xdist a `serial` test (set-up and tear-down included) runs while no other worker runs one; a pytest that
    a test starts inherits the folder but is no xdist worker, so it takes no lock its parent test could be waiting on."""
    if not hasattr(item.config, "workerinput") or LOCKS_ENV not in os.environ:
        yield
        return
    with holding(Path(os.environ[LOCKS_ENV]), alone=item.get_closest_marker("serial") is not None):
        yield
