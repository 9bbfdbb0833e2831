"""The code is formatted by ruff format (configured in pyproject.toml), so a diff shows changes, not reflows."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers import REPO
from tests.helpers.load import load_scaled


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -e '.[test]')")
def test_every_python_file_is_formatted():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=load_scaled(120),
    )
    assert result.returncode == 0, f"run `ruff format .` to format:\n{result.stdout}{result.stderr}"
