"""The inputs' attention distribution stored once per key in RUN_DIR/distributions/ by the worker
(harness.executors.distributions), and read back by the store (harness.store.distributions)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from harness.executors.distributions import DISTRIBUTIONS_DIR, distribution_path, store_distribution
from harness.executors.worker import CellJob, run_cell
from harness.measure import MeasureContext, MeasureSettings, RunInfo
from harness.measure import distribution as measure_distribution
from harness.measure.distribution import distribution_key
from harness.schema import Cell
from harness.store.distributions import read_distributions

RUN = RunInfo(run_id="t", device_name="cpu", host="h", threads=1)
SETTINGS = MeasureSettings(time_budget_s=0.005, repeats=1, error_rows=8)


def _cell(**changes) -> Cell:
    base = Cell(
        variant="dense", config={}, seq_len=32, kv_len=32, batch=1, heads=2, head_dim=8, dtype="float32",
        device="cpu", causal=False, mode="forward", inputs="llm", seed=0,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_an_ok_cell_stores_its_inputs_distribution_once_per_key(tmp_path, monkeypatch):
    calls = []
    real = measure_distribution.inputs_distribution

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("harness.executors.distributions.inputs_distribution", spy)
    job = CellJob(settings=SETTINGS.to_dict(), run=dataclasses.asdict(RUN), run_dir=str(tmp_path))
    cell = _cell()
    assert run_cell(cell, job, MeasureContext())["status"] == "ok"
    path = distribution_path(tmp_path, distribution_key(cell))
    record = json.loads(path.read_text())
    assert record["key"] == distribution_key(cell) and len(record["heads"]) == 2 and record["rows"] == 8
    # the same inputs in another process (a fresh context) and mode: not computed again
    assert run_cell(dataclasses.replace(cell, mode="train"), job, MeasureContext())["status"] == "ok"
    assert len(calls) == 1
    # causal inputs are another distribution: a second file
    assert run_cell(dataclasses.replace(cell, causal=True), job, MeasureContext())["status"] == "ok"
    assert len(calls) == 2 and len(list((tmp_path / DISTRIBUTIONS_DIR).glob("*.json"))) == 2
    assert [r["key"]["causal"] for r in read_distributions(tmp_path)] == [False, True]


def test_a_decode_cell_stores_none(tmp_path):
    assert store_distribution(_cell(phase="decode", causal=True), SETTINGS, MeasureContext(), tmp_path) is None
    assert not (tmp_path / DISTRIBUTIONS_DIR).exists()


def test_a_failing_distribution_warns_and_keeps_the_row(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no memory left\nsecond line")

    monkeypatch.setattr("harness.executors.distributions.inputs_distribution", broken)
    job = CellJob(settings=SETTINGS.to_dict(), run=dataclasses.asdict(RUN), run_dir=str(tmp_path))
    with pytest.warns(UserWarning, match=r"no attention distribution for llm \(RuntimeError: no memory left\)$"):
        row = run_cell(_cell(), job, MeasureContext())
    assert row["status"] == "ok"


def test_the_reader_skips_what_is_not_a_record_with_a_note(tmp_path):
    folder = tmp_path / DISTRIBUTIONS_DIR
    folder.mkdir()
    good = measure_distribution.inputs_distribution(_cell(), SETTINGS, MeasureContext(), torch.device("cpu"))
    (folder / "a.json").write_text(json.dumps(good))
    (folder / "b.json").write_text("{not json")
    bad_kind = {**good, "heads": [{**good["heads"][0], "kind": "sinky"}]}
    (folder / "c.json").write_text(json.dumps(bad_kind))
    no_field = {**good, "key": {k: v for k, v in good["key"].items() if k != "causal"}}
    (folder / "d.json").write_text(json.dumps(no_field))
    (folder / "e.json").symlink_to(folder / "a.json")
    notes: list[str] = []
    with pytest.warns(UserWarning):
        records = read_distributions(tmp_path, notes)
    assert records == [good]
    assert [n.split("/")[-1].split(":")[0] for n in notes] == ["b.json", "c.json", "d.json", "e.json"]
    assert "unreadable (JSONDecodeError)" in notes[0] and "not a regular file" in notes[3]


def test_records_are_read_by_inputs_then_setting_then_n_as_a_number(tmp_path):
    folder = tmp_path / DISTRIBUTIONS_DIR
    folder.mkdir()
    record = measure_distribution.inputs_distribution(_cell(), SETTINGS, MeasureContext(), torch.device("cpu"))
    keys = [
        ("llm", 1024, False),
        ("llm", 256, True),
        ("gaussian", 1024, False),
        ("llm", 256, False),
        ("gaussian", 256, False),
    ]
    for i, (inputs, n, causal) in enumerate(keys):
        key = {**record["key"], "inputs": inputs, "seq_len": n, "kv_len": n, "causal": causal}
        (folder / f"{i}.json").write_text(json.dumps({**record, "key": key}))
    got = [(r["key"]["inputs"], r["key"]["seq_len"], r["key"]["causal"]) for r in read_distributions(tmp_path)]
    assert got == [
        ("gaussian", 256, False),
        ("gaussian", 1024, False),
        ("llm", 256, False),
        ("llm", 1024, False),
        ("llm", 256, True),
    ]
