"""Shared test set-up: the cuda marker's skip (the --variant-plugin option lives in the root conftest.py)."""

from __future__ import annotations

import signal

import pytest
import torch


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
