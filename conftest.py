"""pytest options that must work from the repository root: `pytest --variant-plugin my_attn.py`.

Here rather than in tests/conftest.py because pytest reads the root conftest before it parses the
command line, so the option is known however the tests are selected.
"""

from __future__ import annotations

import pytest


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
