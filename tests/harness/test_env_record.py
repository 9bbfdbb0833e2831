"""env.json's process_env: the start-up settings that move timings, recorded as set (None: unset) and read back."""

from __future__ import annotations

import json
import warnings

from harness.env import PROCESS_VARS, collect_env
from harness.store.reader import read_env


def test_the_process_settings_are_recorded_as_set_and_read_back_as_a_table(monkeypatch, tmp_path):
    for name in PROCESS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_PROC_BIND", "true")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    recorded = collect_env("cpu")["process_env"]
    assert recorded == {
        "OMP_NUM_THREADS": None,
        "OMP_PROC_BIND": "true",
        "OMP_PLACES": None,
        "MALLOC_MMAP_THRESHOLD_": None,
        "MALLOC_TRIM_THRESHOLD_": "0",
    }
    (tmp_path / "env.json").write_text(json.dumps({"process_env": recorded}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a table where the reader expects one: no note
        assert read_env(tmp_path / "env.json")["process_env"] == recorded
