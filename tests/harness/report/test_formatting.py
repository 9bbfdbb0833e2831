"""harness.report.render: the one formatter of seconds, bytes, lengths, ratios, errors and reasons."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.report.render import (
    format_bytes,
    format_error,
    format_n,
    format_number,
    format_ratio,
    format_seconds,
    format_seconds_compact,
    format_text,
    short_reason,
)
from tests.helpers.load import load_scaled

MISSING = [None, float("nan"), float("inf"), "n/a"]


@pytest.mark.parametrize(
    "value,text", [(1.234e-5, "12.3 us"), (4.56e-3, "4.56 ms"), (1.234, "1.23 s"), (5e-10, "0.5 ns"), (120.0, "120 s")]
)
def test_seconds_in_the_report_and_figures(value, text):
    assert format_seconds(value) == text


@pytest.mark.parametrize("value,text", [(1.234e-5, "12us"), (4.56e-3, "4.56ms"), (0.5, "500ms"), (1.234, "1.23s")])
def test_seconds_in_the_terminal_table(value, text):
    assert format_seconds_compact(value) == text


@pytest.mark.parametrize(
    "value,text", [(512, "512 B"), (3072, "3 KiB"), (1.5 * 2**20, "1.5 MiB"), (2 * 2**30, "2 GiB"), (0, "0 B")]
)
def test_bytes(value, text):
    assert format_bytes(value) == text


@pytest.mark.parametrize(
    "n,text", [(4096, "4K"), (np.int64(8192), "8K"), (256, "256"), (1536, "1536"), (1024.0, "1K"), (1.5, "1.5")]
)
def test_lengths(n, text):
    assert format_n(n) == text


def test_ratios_errors_and_numbers():
    assert (
        format_ratio(1.234) == "1.23x"
        and format_ratio(10.0) == "10.00x"
        and format_ratio(1.23456, digits=3) == "1.235x"
    )
    assert format_error(0.0012) == "1.2e-03" and format_error(0.0012, digits=2) == "1.20e-03"
    assert format_number(2.345, ".3g") == "2.35" and format_number(4, ".2f", "x") == "4.00x"
    assert format_text(None) == format_text("") == "-" and format_text(0) == "0"


@pytest.mark.parametrize("fmt", [format_seconds, format_seconds_compact, format_bytes, format_ratio, format_error])
@pytest.mark.parametrize("value", MISSING)
def test_a_missing_value_is_a_dash(fmt, value):
    assert fmt(value) == "-"


def test_reasons_are_one_line_and_cut():
    assert short_reason(None) == short_reason(math.nan) == "(no reason recorded)"
    assert short_reason(None, missing="") == "" and short_reason("") == ""
    assert short_reason("CUDA out of memory.\n  Tried to allocate") == "CUDA out of memory. Tried to allocate"
    long = short_reason("x" * 200)
    assert len(long) == 90 and long.endswith("...")
    assert short_reason("y" * 61, 60) == "y" * 57 + "..." and short_reason("y" * 60, 60) == "y" * 60


def test_importing_the_report_package_does_no_heavy_import():
    code = (
        "import sys, harness.report, harness.report.render; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'matplotlib', 'torch')))"
    )
    repo = Path(__file__).resolve().parents[3]
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, timeout=load_scaled(60)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
