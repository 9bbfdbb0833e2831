"""Effective attention maps computed in a child process, each panel under a time limit.

The maps run every variant again, so they get the same protection as the cells: a variant that
hangs, crashes, calls sys.exit or returns garbage costs its own panel (a note saying why),
never the report or the sweep. The panels run one after another in one child; when the child
dies or a panel runs past the limit, that panel is marked failed and a fresh child takes the rest.
A panel's limit starts when the child is ready (torch imported, plugins loaded), so a slow start on a busy machine
costs no panel; a child that cannot start (a plugin that fails or hangs on import) fails every panel left, once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.executors.isolated import child_env, death_status, die_with_parent
from harness.report.maps import MapPanel, MapSet, make_probe, map_panel

DEFAULT_PANEL_TIMEOUT_S = 120.0  # a panel's limit when the run recorded no cell_timeout_s
START_TIMEOUT_S = 600.0  # a child's start (imports, plugins, the probe): seconds when quiet, minutes under heavy load
READY_FILE = "ready"  # the child creates it in its folder once started
POLL_S = 0.05


def isolated_maps(
    series: Sequence[tuple[str, str, dict]],
    *,
    n: int = 64,
    inputs: str = "gaussian",
    seed: int = 0,
    causal: bool = False,
    calibrate: bool = False,
    timeout_s: float | None = None,
    plugins: Sequence[str] = (),
) -> MapSet:
    """harness.report.maps.attention_maps, each panel in a child process with `timeout_s` seconds (default 120)."""
    from variants import attention_weights

    q, k, used = make_probe(n, inputs, seed=seed)  # here too: an unknown distribution is the caller's ValueError
    exact = attention_weights(q, k, causal=causal)[0, 0].numpy()
    limit = timeout_s or DEFAULT_PANEL_TIMEOUT_S
    request = {"n": n, "inputs": used, "seed": seed, "causal": causal, "calibrate": calibrate, "plugins": list(plugins)}
    panels: list[MapPanel] = []
    while len(panels) < len(series):
        todo = list(series[len(panels) :])
        got, failure, started = _run_child({**request, "series": [list(s) for s in todo]}, limit)
        panels += got
        if failure is not None:  # the panel it was on; every panel left when the child could not start
            failed = series[len(panels) : len(panels) + 1] if started else series[len(panels) :]
            panels += [MapPanel(label, None, f"failed: {failure}", None) for label, _, _ in failed]
    return MapSet(exact=exact, panels=panels, n=n, inputs=used, seed=seed, causal=causal, calibrated=calibrate)


def _run_child(request: dict, limit: float) -> tuple[list[MapPanel], str | None, bool]:
    """The panels a child finished, why it stopped early (None when it finished them all), and whether it started."""
    with tempfile.TemporaryDirectory(prefix="attnsuite-maps-") as tmp:
        path_in, path_out, path_err = Path(tmp) / "request.json", Path(tmp) / "panels.jsonl", Path(tmp) / "stderr.txt"
        ready = Path(tmp) / READY_FILE
        path_in.write_text(json.dumps(request, default=str), encoding="utf-8")
        path_out.touch()
        done = 0  # panels the child has finished (complete lines), counted without parsing them
        with open(path_err, "w", encoding="utf-8") as err:
            child = subprocess.Popen(
                [sys.executable, "-m", "harness.report.maps_isolated", str(path_in), str(path_out)],
                env=child_env(),
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
            started, deadline = False, time.monotonic() + START_TIMEOUT_S
            try:
                while True:
                    if not started and ready.exists():
                        started, deadline = True, time.monotonic() + limit  # the first panel's clock starts here
                    finished = _count_lines(path_out)
                    if finished > done:
                        done, deadline = finished, time.monotonic() + limit  # each panel gets the whole limit
                    if done == len(request["series"]):
                        child.wait()
                        return _read_panels(path_out), None, True
                    code = child.poll()
                    if code is not None:
                        panels = _read_panels(path_out)
                        if len(panels) == len(request["series"]):
                            return panels, None, True
                        why = death_status(code, path_err.read_text(encoding="utf-8", errors="replace"))[1]
                        return panels, why, started or ready.exists()
                    if time.monotonic() > deadline:
                        child.kill()
                        child.wait()
                        why = (
                            f"did not finish within {limit:g} s (the run's per-cell limit); its process was killed"
                            if started
                            else f"the maps' process did not start within {START_TIMEOUT_S:g} s (imports and plugins); "
                            "it was killed"
                        )
                        return _read_panels(path_out), why, started
                    time.sleep(POLL_S)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()


def _count_lines(path: Path) -> int:
    """Complete lines in the child's output so far (a panel is one line, written and flushed whole)."""
    with open(path, "rb") as f:
        return f.read().count(b"\n")


def _read_panels(path: Path) -> list[MapPanel]:
    panels = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # a panel still being written
        data = json.loads(line)
        weights = None if data["weights"] is None else np.asarray(data["weights"], dtype=np.float64)
        panels.append(MapPanel(data["label"], weights, data["note"], data["rel_error"]))
    return panels


def main(argv: list[str]) -> int:
    """The child: read the request, write one JSON line per panel as each finishes."""
    from harness.plugins import load_plugins
    from variants import attention_weights

    path_in, path_out = Path(argv[0]), Path(argv[1])
    die_with_parent(path_in.parent)
    request = json.loads(path_in.read_text(encoding="utf-8"))
    load_plugins(request["plugins"])
    q, k, used = make_probe(request["n"], request["inputs"], seed=request["seed"])
    exact = attention_weights(q, k, causal=request["causal"])[0, 0].numpy()
    (path_in.parent / READY_FILE).touch()  # the panels' clocks start now
    with open(path_out, "a", encoding="utf-8") as out:
        for label, name, config in request["series"]:
            panel = map_panel(
                label,
                name,
                config,
                q,
                k,
                used,
                seed=request["seed"],
                causal=request["causal"],
                calibrate=request["calibrate"],
                exact=exact,
            )
            weights = None if panel.weights is None else panel.weights.tolist()
            out.write(
                json.dumps({"label": panel.label, "weights": weights, "note": panel.note, "rel_error": panel.rel_error})
                + "\n"
            )
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
