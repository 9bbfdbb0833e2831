"""README's "Add your own variant", copied verbatim: it passes its contract tests and `harness list` tells the truth."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.load import load_scaled

ROOT = Path(__file__).resolve().parents[1]


def _readme_block(after: str, language: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(after) :]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def readme_plugin(tmp_path_factory) -> Path:
    code = _readme_block("## Add your own variant", "python")
    assert code.startswith("# my_attn.py\n"), "README's plugin example moved: update this test's anchor"
    path = tmp_path_factory.mktemp("plugin") / "my_attn.py"
    path.write_text(code, encoding="utf-8")
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_readme_contract_command_passes_on_readme_plugin(readme_plugin):
    command = _readme_block("## Add your own variant", "bash")
    argv = command.split("#")[0].split()
    assert argv[:2] == ["pytest", "tests/variants/test_contract.py"], command
    argv = [sys.executable, "-m", *argv, "-q", "-p", "no:cacheprovider"]
    argv[argv.index("my_attn.py")] = str(readme_plugin)
    done = subprocess.run(argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=load_scaled(600))
    tail = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    passed = int(re.search(r"(\d+) passed", done.stdout).group(1))
    assert passed >= 10, tail  # the contract ran on it, not only skips
    assert "failed" not in done.stdout.splitlines()[-1], tail


@pytest.mark.slow
def test_harness_list_shows_what_the_readme_plugin_supports(readme_plugin):
    done = subprocess.run(
        [sys.executable, "-m", "harness", "list", "--plugin", str(readme_plugin)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=load_scaled(300),
    )
    assert done.returncode == 0, done.stderr
    block = done.stdout[done.stdout.index("my_attn") :]
    capabilities = next(line for line in block.splitlines() if "capabilities:" in line)
    assert "causal" not in capabilities.split(";")[0] and "gqa" not in capabilities.split(";")[0], capabilities
