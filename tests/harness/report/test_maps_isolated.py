"""The report's maps run each variant in a child process: a hang, a crash, an exit or a bad shape costs one panel."""

from __future__ import annotations

import threading

import pytest

from harness.report.maps_isolated import isolated_maps
from tests.helpers.load import load_scaled
from tests.helpers.sweep_fixtures import PLUGIN


@pytest.mark.slow
def test_a_hanging_crashing_or_exiting_variant_costs_only_its_own_panel():
    series = [
        ("dense", "dense", {}),
        ("t_exit", "t_exit", {}),
        ("t_crash", "t_crash", {}),
        ("t_sleep", "t_sleep", {"seconds": 600.0}),
        ("t_fivedim", "t_fivedim", {}),
        ("chunked", "chunked", {}),
    ]
    limit = load_scaled(4.0)  # a panel's limit includes a fresh child's start, slow on a busy machine
    result = {}
    drawing = threading.Thread(
        target=lambda: result.update(maps=isolated_maps(series, n=16, timeout_s=limit, plugins=[str(PLUGIN)])),
        daemon=True,  # if the sleeper is never killed, the test fails here rather than hanging for ten minutes
    )
    drawing.start()
    drawing.join(timeout=10 * limit)
    assert not drawing.is_alive(), f"the maps did not finish within {10 * limit:g} s: the sleeper was not killed"
    maps = result["maps"]
    by_label = {p.label: p for p in maps.panels}
    assert [p.label for p in maps.panels] == [s[0] for s in series]
    assert by_label["dense"].weights is not None and by_label["dense"].rel_error < 1e-5
    assert by_label["chunked"].weights is not None and by_label["chunked"].rel_error < 1e-5  # after a fresh child
    assert "exited with code 3" in by_label["t_exit"].note
    assert "signal" in by_label["t_crash"].note
    assert f"did not finish within {limit:g} s" in by_label["t_sleep"].note
    assert (
        "expected a tensor of shape (1, 1, 16, 16)" in by_label["t_fivedim"].note
        and by_label["t_fivedim"].weights is None
    )


@pytest.mark.slow
def test_a_child_that_cannot_start_fails_every_panel_once_with_the_reason(tmp_path, monkeypatch):
    import harness.child as child

    children = []
    popen = child.subprocess.Popen
    monkeypatch.setattr(child.subprocess, "Popen", lambda *a, **kw: children.append(a) or popen(*a, **kw))
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise RuntimeError('this plugin is broken on import')\n")
    series = [("dense", "dense", {}), ("chunked", "chunked", {}), ("linformer", "linformer", {})]
    maps = isolated_maps(series, n=16, timeout_s=load_scaled(4.0), plugins=[str(broken)])
    assert [p.label for p in maps.panels] == ["dense", "chunked", "linformer"]
    assert all(p.weights is None and "this plugin is broken on import" in p.note for p in maps.panels)
    assert len(children) == 1  # not one fresh child (each importing torch) per panel
