"""The deploy study's WebAssembly graph in a real browser (issue 39): dense exported to ONNX (the deploy study's own
export), loaded by a tiny page with onnxruntime-web (the pinned package, installed by `npm ci` as the Node target
does), served from localhost and opened in headless Chromium; the sum the page prints equals PyTorch's to 1e-4.

Skips with the reason where Chromium, Node or npm is absent (CI installs no Chromium: scripts/test.sh leaves it out).
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import subprocess
import threading

import pytest
import torch

from harness.studies import deploy_targets
from harness.studies.deploy_targets import Call, export_onnx, export_program
from harness.studies.deploy_wasm import WasmUnavailable, default_cache, installed, node_version
from variants import build_variant

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        deploy_targets.missing_extra_reason() is not None, reason=str(deploy_targets.missing_extra_reason())
    ),
]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=30000",  # --dump-dom waits for the page's own work (fetch, wasm compile, the run)
]
PAGE = """<!doctype html>
<html><body><p id="out">pending</p>
<script type="module">
import * as ort from "/ort/ort.wasm.min.mjs";
const out = document.getElementById("out");
try {
  ort.env.wasm.numThreads = 1;  // no cross-origin isolation: one thread
  ort.env.wasm.wasmPaths = "/ort/";
  const inputs = await (await fetch("/inputs.json")).json();
  const session = await ort.InferenceSession.create("/dense.onnx", { executionProviders: ["wasm"] });
  const feeds = {};
  for (const [name, x] of Object.entries(inputs)) feeds[name] = new ort.Tensor("float32", Float32Array.from(x.data), x.dims);
  const result = (await session.run(feeds))[session.outputNames[0]];
  let sum = 0;
  for (const value of result.data) sum += value;
  out.textContent = "sum=" + sum.toPrecision(12);
} catch (error) {
  out.textContent = "error=" + String(error?.message ?? error);
}
</script></body></html>
"""


def _chromium_or_skip() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium not found on PATH: the browser check needs Debian's chromium (apt-get install chromium)")
    return found


def _ort_or_skip():
    try:
        node_version()
        return installed(default_cache()) / "node_modules" / "onnxruntime-web" / "dist"
    except WasmUnavailable as exc:
        pytest.skip(f"onnxruntime-web cannot be installed here: {exc}")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = {".mjs": "text/javascript", ".wasm": "application/wasm", ".json": "application/json"}

    def log_message(self, *args) -> None:  # the test's output is its assertion, not an access log
        pass


def test_dense_onnx_graph_in_headless_chromium_gives_pytorchs_sum(tmp_path):
    chromium, dist = _chromium_or_skip(), _ort_or_skip()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    module = Call(build_variant("dense").eval(), causal=False)
    export_onnx(export_program(module, (q, k, v)), tmp_path / "dense.onnx")
    with torch.no_grad():
        expected = float(module(q, k, v).double().sum())
    inputs = {name: {"data": t.flatten().tolist(), "dims": list(t.shape)} for name, t in zip("qkv", (q, k, v))}
    (tmp_path / "inputs.json").write_text(json.dumps(inputs))
    (tmp_path / "index.html").write_text(PAGE)
    (tmp_path / "ort").symlink_to(dist, target_is_directory=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
        flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url]
        done = subprocess.run([chromium, *flags], capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
        server.server_close()
    shown = re.search(r'<p id="out">([^<]*)</p>', done.stdout)
    assert shown is not None, f"no page in chromium's output (exit {done.returncode}): {done.stderr[-500:]}"
    text = shown.group(1)
    assert text.startswith("sum="), f"the page says {text!r}"
    assert float(text.removeprefix("sum=")) == pytest.approx(expected, abs=1e-4)
    assert abs(expected) > 1e-3  # a page printing zeros (no run, an empty output) cannot pass
