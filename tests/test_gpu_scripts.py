"""The GPU scripts, checked on CPU: shell syntax, the wheel selection, and gpu_check.sh's plan (--dry-run)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = ("gpu_sweep.sh", "gpu_check.sh")


def _missing_wheels():
    spec = importlib.util.spec_from_file_location("missing_wheels", REPO / "scripts" / "missing_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse(script):
    result = subprocess.run(["bash", "-n", str(REPO / "scripts" / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_only_missing_wheels_are_installed_and_never_the_cuda_stack():
    mw = _missing_wheels()
    names = [
        "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "triton-3.6.0-cp312-cp312-manylinux_2_27_x86_64.whl",
        "numpy-2.2.0-cp312-cp312-manylinux_2_17_x86_64.whl",
        "nvidia_cudnn_cu13-9.13.0-py3-none-manylinux_2_27_x86_64.whl",
        "pandas-2.3.0-cp312-cp312-manylinux_2_17_x86_64.whl",  # the machine has pandas
        "xformers-0.0.35-py39-none-manylinux_2_28_x86_64.whl",  # it lacks xformers
        "Typing_Extensions-4.0.0-py3-none-any.whl",  # the name as the file spells it: still the installed one
    ]
    have = {"torch", "triton", "pandas", "typing-extensions"}  # numpy, nvidia-* missing: still never brought
    chosen, skipped = mw.select([Path(n) for n in names], have)
    assert [p.name for p in chosen] == ["xformers-0.0.35-py39-none-manylinux_2_28_x86_64.whl"]
    assert len(skipped) == len(names) - 1
    assert any("numpy is the machine's own CUDA stack" in s for s in skipped)
    assert any("pandas is installed already" in s for s in skipped)


def test_two_versions_of_one_wheel_install_one_and_say_so():
    mw = _missing_wheels()
    chosen, skipped = mw.select([Path("einops-0.8.0-py3-none-any.whl"), Path("einops-0.7.0-py3-none-any.whl")], set())
    assert len(chosen) == 1 and "a second wheel of einops" in skipped[0]


def test_the_selection_reads_this_pythons_packages(tmp_path):
    (tmp_path / "pytest-1.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "not_installed_here_pkg-1.0-py3-none-any.whl").write_bytes(b"")
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "missing_wheels.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert [Path(line).name for line in result.stdout.split()] == ["not_installed_here_pkg-1.0-py3-none-any.whl"]
    assert "pytest is installed already" in result.stderr


def _check_variants():
    spec = importlib.util.spec_from_file_location("gpu_check_variants", REPO / "scripts" / "gpu_check_variants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_check_covers_every_registered_variant_with_its_cuda_backends():
    from variants import get_variant, list_variants

    entries = _check_variants().entries()
    assert {e.split(":")[0] for e in entries} == set(list_variants())  # from the registry: a new variant is in
    assert "dense" in entries and "dense:backend=xformers" in entries  # bare dense: the baseline, auto = sdpa
    for backend in ("flex", "xformers", "banded"):
        assert f"sliding_window:window=512,backend={backend}" in entries
    assert not any("backend=reference" in e or "backend=masked" in e for e in entries)  # the O(N^2) baselines
    backends = sum(
        len([b for b in get_variant(n).backends if b not in ("reference", "masked")]) or 1 for n in list_variants()
    )
    assert len(entries) == backends


def test_the_checks_plan_is_the_trimmed_sweep():
    """bf16, D=128, GQA 4:1, N 4K..64K, causal and not, forward and train, decode: 15 cells per variant entry."""
    from harness.plan import plan
    from harness.runner import sweep_spec

    entries = _check_variants().entries()
    spec = sweep_spec(
        toml_path=REPO / "scripts" / "gpu_check.toml",
        cli={"variants": ",".join(entries), "device": "cuda"},
        plan_only=True,
    )
    cells = plan(spec)
    assert {(c.dtype, c.head_dim, c.heads, c.kv_heads) for c in cells} == {("bfloat16", 128, 16, 4)}
    assert sorted({c.seq_len for c in cells}) == [4096, 16384, 65536]
    prefill = [c for c in cells if c.phase == "prefill"]
    assert {(c.causal, c.mode) for c in prefill} == {
        (False, "forward"),
        (True, "forward"),
        (False, "train"),
        (True, "train"),
    }
    assert len(cells) == len(entries) * 3 * (4 + 1)  # per N: 4 prefill settings and one decode cell
    assert not spec.error_budgets and spec.memory_budget is None  # the searches belong to the full GPU default
