"""The WebAssembly target where Node or npm is missing: the reason says what and how to install it."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from harness.studies import deploy_wasm


def test_without_node_the_reason_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(deploy_wasm.shutil, "which", lambda name: None)
    with pytest.raises(deploy_wasm.WasmUnavailable, match=r"node not found on PATH: install Node 20 .*apt-get install"):
        deploy_wasm.run_graph(tmp_path / "g.onnx", [{"q": np.zeros((1, 1, 2, 2))}], tmp_path, repeats=1, budget_s=0)


def test_without_npm_the_reason_names_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setattr(deploy_wasm.shutil, "which", lambda name: None if name == "npm" else shutil.which(name))
    with pytest.raises(deploy_wasm.WasmUnavailable, match=rf"npm not found on PATH: .*`npm ci` in {tmp_path}"):
        deploy_wasm.installed(tmp_path)


def test_the_lockfile_pins_onnxruntime_web_without_naming_a_registry():
    lock = (deploy_wasm.WEB / "package-lock.json").read_text()
    assert '"onnxruntime-web": "1.23.2"' in lock and "resolved" not in lock and "integrity" in lock
