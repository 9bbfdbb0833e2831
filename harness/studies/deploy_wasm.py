"""The deploy study's WebAssembly target: an ONNX graph run by onnxruntime-web's wasm backend under Node.

The npm package is pinned in harness/studies/web/package.json with its package-lock.json; `npm ci` installs it into
a cache folder the command names (--npm-cache), once per lockfile; harness/studies/web/run_onnx.mjs runs the graph.
Where Node, npm or the package is missing, `WasmUnavailable` says so and how to install it: the rows carry that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

WEB = Path(__file__).with_name("web")  # package.json, package-lock.json, run_onnx.mjs
PACKAGE = "onnxruntime-web"
NODE_MAJOR = 20  # the oldest Node the wasm target is checked on
INSTALL_NODE = "install Node 20 or later with npm (Debian: apt-get install nodejs npm)"
NPM_CI_TIMEOUT_S = 600
RUN_TIMEOUT_S = 600


class WasmUnavailable(Exception):
    """The wasm target cannot run here (no Node, no npm, the package not installable); the message says how to fix."""


def default_cache() -> Path:
    """Where `npm ci` installs the pinned package unless --npm-cache says: $XDG_CACHE_HOME/attnsuite/npm."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnsuite" / "npm"


def node_version() -> str:
    """`node --version` ('v20.20.2'); WasmUnavailable without Node or with one older than NODE_MAJOR."""
    node = shutil.which("node")
    if node is None:
        raise WasmUnavailable(f"node not found on PATH: {INSTALL_NODE}")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    major = version.lstrip("v").split(".")[0]
    if not major.isdigit() or int(major) < NODE_MAJOR:
        raise WasmUnavailable(f"node {version or '(no version)'} is older than {NODE_MAJOR}: {INSTALL_NODE}")
    return version


def installed(cache: Path) -> Path:
    """`cache` with the pinned onnxruntime-web in cache/node_modules, `npm ci` run first when its lockfile changed.

    Raises WasmUnavailable without npm or when `npm ci` fails (its first error line and the command to rerun)."""
    lock = (WEB / "package-lock.json").read_text(encoding="utf-8")
    stamp = cache / "node_modules" / ".attnsuite-lock.json"  # the lockfile the last `npm ci` here installed
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == lock:
        return cache
    npm = shutil.which("npm")
    if npm is None:
        raise WasmUnavailable(f"npm not found on PATH: {INSTALL_NODE}, then rerun (it runs `npm ci` in {cache})")
    cache.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(WEB / name, cache / name)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"], cwd=cache, capture_output=True, text=True, timeout=NPM_CI_TIMEOUT_S
    )
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if "error" in line.lower()] or done.stderr.splitlines()
        first = lines[0].strip() if lines else f"exit {done.returncode}"
        raise WasmUnavailable(f"npm ci of {PACKAGE} into {cache} failed ({first}); run `npm ci` there, then rerun")
    stamp.write_text(lock, encoding="utf-8")
    return cache


def run_graph(
    model: Path, cases: list[dict[str, np.ndarray]], cache: Path, *, repeats: int, budget_s: float
) -> tuple[str, list[tuple[np.ndarray, float]]]:
    """Run the ONNX graph `model` in the wasm backend at each case's float32 inputs (name -> array).

    Returns (onnxruntime-web's version, [(output, median seconds per call)] per case). Raises WasmUnavailable when
    Node or the package is missing, RuntimeError with the runtime's own first message line when the run fails."""
    node_version()
    prefix = installed(cache)
    with tempfile.TemporaryDirectory(prefix="attnsuite-wasm-") as scratch:
        folder = Path(scratch)
        job = {"model": str(model), "repeats": repeats, "budget_s": budget_s, "cases": []}
        for i, inputs in enumerate(cases):
            entry: dict = {"inputs": {}, "output": str(folder / f"out{i}.bin")}
            for name, array in inputs.items():
                path = folder / f"{name}{i}.bin"
                np.ascontiguousarray(array, dtype="<f4").tofile(path)
                entry["inputs"][name] = {"file": str(path), "dims": list(array.shape)}
            job["cases"].append(entry)
        (folder / "job.json").write_text(json.dumps(job), encoding="utf-8")
        answer = _node_json(prefix, folder / "job.json")
        results = []
        for i, case in enumerate(answer["cases"]):
            output = np.fromfile(folder / f"out{i}.bin", dtype="<f4").reshape(case["dims"])
            results.append((output, float(case["latency_s"])))
    return str(answer["version"]), results


def _node_json(prefix: Path, job: Path) -> dict:
    """run_onnx.mjs's one JSON line; RuntimeError with the first line of its error (or of Node's stderr)."""
    node = shutil.which("node") or "node"
    done = subprocess.run(
        [node, str(WEB / "run_onnx.mjs"), str(prefix), str(job)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        stderr = [line for line in done.stderr.splitlines() if line.strip()]
        raise RuntimeError(stderr[0].strip() if stderr else f"node exited {done.returncode} with no answer")
    if "error" in answer:
        raise RuntimeError(str(answer["error"]).strip().splitlines()[0] if str(answer["error"]).strip() else "error")
    return answer
