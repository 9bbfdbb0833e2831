"""The deploy study over the whole registry: each variant's ONNX graph matches PyTorch at two lengths or says why not.

Registry-wide: every registered variant (a plugin's too) at its small_config, no per-variant code. The
WebAssembly target (Node, onnxruntime-web) is checked for dense and sliding_window (masked backend) where Node and
npm are installed, and skips with the reason elsewhere.
"""

from __future__ import annotations

import json

import pytest

from harness.studies import deploy_targets
from harness.studies.deploy import DeployShape, run_deploy
from harness.studies.deploy_numbers import MATCH_TOLERANCE
from harness.studies.deploy_wasm import WasmUnavailable, default_cache, installed, node_version
from variants import get_variant, list_variants

pytestmark = pytest.mark.skipif(
    deploy_targets.missing_extra_reason() is not None, reason=str(deploy_targets.missing_extra_reason())
)
LENGTHS = [16, 24]
SHAPE = DeployShape(batch=1, heads=2, head_dim=8)


def _small_configs(names: list[str]) -> dict[str, dict]:
    return {name: dict(get_variant(name).cls.small_config or {}) for name in names}


@pytest.fixture(scope="module")
def registry_run(tmp_path_factory):
    """One run of the study over the registry, torch.export and onnxruntime, timed briefly: (rows, the folder)."""
    folder = tmp_path_factory.mktemp("deploy")
    names = list_variants()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deploy_targets, "BUDGET_S", 0.01)  # the numbers, not the timing, are under test here
        patch.setattr(deploy_targets, "REPEATS", 2)
        rows = _run(names, folder)
    return rows, folder


def _run(names: list[str], folder):
    return run_deploy(
        names,
        LENGTHS,
        shape=SHAPE,
        overrides=_small_configs(names),
        seed=0,
        wanted=("torch.export", "onnxruntime"),
        folder=folder,
        npm_cache=folder / "npm",
        log=lambda line: None,
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", list_variants())
def test_the_onnx_graph_matches_pytorch_at_two_lengths_or_says_why(registry_run, name):
    rows = [r for r in registry_run[0] if r["variant"] == name and r["target"] == "onnxruntime"]
    assert sorted(r["seq_len"] for r in rows) == LENGTHS
    for r in rows:
        assert r["status"] in ("ok", "unsupported"), r
        if r["status"] == "ok":
            assert r["max_abs_error"] <= MATCH_TOLERANCE and r["file_bytes"] > 0 and r["latency_ratio"] > 0
            assert r["opset"] == deploy_targets.OPSET and r["rel_l2_error"] is not None
        else:
            assert r["step"] and len(r["reason"]) > 10, r  # the exporter's or runtime's own words


@pytest.mark.slow
def test_rows_are_in_the_jsonl_as_returned_and_the_files_exist(registry_run):
    rows, folder = registry_run
    lines = [json.loads(line) for line in (folder / "deploy.jsonl").read_text().splitlines()]
    assert lines == rows
    assert (folder / "deploy" / "dense.onnx").stat().st_size == next(
        r["file_bytes"] for r in rows if r["variant"] == "dense" and r["target"] == "onnxruntime"
    )


@pytest.mark.slow
def test_distilled_exports_now(registry_run):
    """Issue 39 part 4: the non-causal student goes through torch.export and ONNX at both lengths."""
    rows = [r for r in registry_run[0] if r["variant"] == "distilled"]
    assert {(r["target"], r["status"]) for r in rows} == {("torch.export", "ok"), ("onnxruntime", "ok")}


def _wasm_cache_or_skip():
    try:
        node_version()
        return installed(default_cache())  # `npm ci` once per lockfile, then cached
    except WasmUnavailable as exc:
        pytest.skip(f"the WebAssembly target cannot run here: {exc}")


@pytest.mark.slow
def test_dense_and_sliding_window_run_in_webassembly_as_in_pytorch(tmp_path):
    cache = _wasm_cache_or_skip()
    rows = run_deploy(
        ["dense", "sliding_window"],
        LENGTHS,
        shape=SHAPE,
        overrides={"sliding_window": {"window": 4, "backend": "masked"}},  # banded does not export (docs/deploy.md)
        seed=0,
        wanted=("onnxruntime-web",),
        folder=tmp_path,
        npm_cache=cache,
        log=lambda line: None,
    )
    assert [(r["variant"], r["seq_len"]) for r in rows] == [
        (v, n) for v in ("dense", "sliding_window") for n in LENGTHS
    ]
    for r in rows:
        assert r["status"] == "ok", r
        assert r["max_abs_error"] <= MATCH_TOLERANCE and r["runtime"].startswith("onnxruntime-web 1.")
