"""--processes: the CPU default times each paired cell in 4 processes (read from the file: the suite's own sweeps run
one, tests/conftest.py), the quick preset and the GPU default in one, and 2 is refused with the reason."""

from __future__ import annotations

from importlib import resources

import pytest

from harness.errors import UsageError
from harness.spec import build_spec
from harness.spec.toml_io import parse_toml


def _file(name: str) -> dict:
    return parse_toml(resources.files("harness.spec").joinpath(name).read_text(encoding="utf-8"))


def test_the_cpu_default_times_in_four_processes_the_quick_preset_and_the_gpu_default_in_one():
    assert _file("cpu.toml")["processes"] == 4
    assert _file("quick.toml")["processes"] == 1
    assert "processes" not in _file("gpu.toml")  # the knob's default: 1


def test_two_processes_are_refused_and_three_taken():
    with pytest.raises(UsageError, match=r"--processes: 2 processes give an interval 12.7 standard deviations wide"):
        build_spec(cli={"processes": "2"}, plan_only=True)
    assert build_spec(cli={"processes": "3"}, plan_only=True).processes == 3
    assert build_spec(cli={"device": "cuda"}, plan_only=True).processes == 1
