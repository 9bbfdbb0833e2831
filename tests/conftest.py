"""Shared test set-up: plugin loading for the contract tests, and the cuda marker's skip."""
from __future__ import annotations

import pytest
import torch


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--variant-plugin",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="import a module or .py file that registers variants, so the contract tests cover them "
        "(also: ATTNSUITE_PLUGINS=mod1,path/file.py or pytest -p my_module)",
    )


def pytest_configure(config: pytest.Config) -> None:
    from variants import load_plugin

    for target in config.getoption("--variant-plugin"):
        load_plugin(target)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
