"""rows.jsonl: the schema of docs/DESIGN.md, one complete line per row, repaired after a kill; CSV at the end."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from harness.row import ROW_FIELDS
from harness.store import RowWriter, read_rows, repair_tail, write_tables

from tests.helpers import REPO
from tests.helpers.synthetic_run import blank_row

DESIGN = REPO / "docs" / "DESIGN.md"


def _row(cell_id: str, **fields):
    row = blank_row()
    row.update(cell_id=cell_id, variant="dense", seq_len=64, status="ok", config={"backend": "auto"}, **fields)
    return row


def test_row_fields_are_the_design_schema():
    text = DESIGN.read_text()
    section = text[text.index("## Row schema") :]
    documented = re.findall(r"`([a-z_0-9]+)`", section)
    documented = [
        f
        for f in documented
        if f
        not in (
            "ok",
            "oom",
            "unsupported",
            "error",
            "nonfinite",
            "timeout",
            "unreachable",
            "fit_timeout",
            "cpu",
            "cuda",
            "forward",
            "train",
            "float32",
            "bfloat16",
            "float16",
        )
    ]
    assert list(dict.fromkeys(documented)) == list(ROW_FIELDS)


def test_field_lists_are_derived_from_the_schema_dataclasses():
    from harness.row import NUMERIC_FIELDS, Row
    from harness.schema import CELL_FIELDS, Cell

    assert CELL_FIELDS == tuple(f.name for f in dataclasses.fields(Cell))
    own = tuple(f.name for f in dataclasses.fields(Row) if f.name != "cell")  # a Row composes its Cell
    assert ROW_FIELDS == ("run_id", "cell_id") + CELL_FIELDS + tuple(f for f in own if f not in ("run_id", "cell_id"))
    assert [f for f in ROW_FIELDS if f in CELL_FIELDS] == list(CELL_FIELDS)  # a cell's fields are columns, in its order
    assert set(NUMERIC_FIELDS) <= set(ROW_FIELDS) and "latency_s" in NUMERIC_FIELDS and "seq_len" not in NUMERIC_FIELDS


def test_append_writes_one_flushed_line_per_row(tmp_path):
    with RowWriter(tmp_path) as writer:
        writer.append(_row("a", latency_s=1e-3))
        assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 1  # on disk before close
        writer.append(_row("b", latency_s=float("nan")))
    rows = read_rows(tmp_path)
    assert [r["cell_id"] for r in rows] == ["a", "b"]
    assert rows[0]["latency_s"] == 1e-3 and rows[1]["latency_s"] is None  # NaN is not JSON: stored as null
    assert list(rows[0]) == list(ROW_FIELDS)


def test_every_append_is_fsynced_before_it_returns(tmp_path, monkeypatch):
    import os

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    with RowWriter(tmp_path) as writer:
        writer.append(_row("a"))
        assert len(synced) == 1  # durable before the next cell starts: a power cut loses no finished row
        writer.append(_row("b"))
        assert len(synced) == 2


def test_a_partial_last_line_is_cut_before_appending(tmp_path):
    with RowWriter(tmp_path) as writer:
        writer.append(_row("a"))
    with open(tmp_path / "rows.jsonl", "a") as f:
        f.write('{"cell_id": "half-writ')  # a run killed mid-write
    with pytest.warns(UserWarning, match="skipped last line, not valid JSON"):  # the report's reader, the same words
        assert [r["cell_id"] for r in read_rows(tmp_path)] == ["a"]
    with pytest.warns(UserWarning, match="cut a partial last line"), RowWriter(tmp_path) as writer:
        writer.append(_row("b"))
    lines = (tmp_path / "rows.jsonl").read_text().splitlines()
    assert [json.loads(line)["cell_id"] for line in lines] == ["a", "b"]


def test_a_complete_last_row_without_its_newline_is_kept(tmp_path):
    with RowWriter(tmp_path) as writer:
        writer.append(_row("a"))
        writer.append(_row("b"))
    path = tmp_path / "rows.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # killed between the row and its newline
    repair_tail(path)
    assert path.read_text().endswith("}\n")
    with RowWriter(tmp_path) as writer:
        writer.append(_row("c"))
    assert [r["cell_id"] for r in read_rows(tmp_path)] == ["a", "b", "c"]


def test_fields_outside_the_schema_are_refused(tmp_path):
    with RowWriter(tmp_path) as writer, pytest.raises(ValueError, match=r"outside schema 1: \['speed'\]"):
        writer.append({**_row("a"), "speed": 1})


def test_csv_has_every_field_with_dicts_as_json(tmp_path):
    import pandas as pd

    with RowWriter(tmp_path) as writer:
        writer.append(_row("a", latency_s=1.2345678901234e-05))
    written = write_tables(tmp_path)
    frame = pd.read_csv(written[0])
    assert list(frame.columns) == list(ROW_FIELDS)
    assert json.loads(frame["config"][0]) == {"backend": "auto"}
    assert frame["latency_s"][0] == 1.2345678901234e-05  # raw, full precision


def test_rows_frame_holds_numeric_columns_as_floats_with_nan_for_missing_values_and_skips_bad_ones():
    """Rows from JSON mix ints, floats and None: readers get floats; a string where a number belongs (an older or
    hand-edited file) is not coerced: its row is skipped with a note naming the field."""
    import math

    from harness.row import NUMERIC_FIELDS
    from harness.store import rows_frame

    rows = []
    for i, latency in enumerate([0.002, None, "n/a", 3]):
        row = blank_row()
        row.update(cell_id=f"c{i}", variant="dense", seq_len=256 * (i + 1), status="ok", latency_s=latency)
        rows.append(row)
    notes: list[str] = []
    with pytest.warns(UserWarning, match="row 3: field latency_s is 'n/a', expected a finite number; row skipped"):
        frame = rows_frame(rows, notes)
    assert len(frame) == 3 and len(notes) == 1
    for column in NUMERIC_FIELDS:
        assert frame[column].dtype == float, column
    assert frame["latency_s"].iloc[0] == 0.002 and frame["latency_s"].iloc[2] == 3.0
    assert math.isnan(frame["latency_s"].iloc[1])
    assert frame["latency_s"].median() == pytest.approx(1.501)  # a median over the column works, NaN left out


def test_series_of_matched_rows_split_on_fields_other_than_the_searched_ones():
    import pandas as pd

    from harness.store.reader import series_labels

    def row(window, sinks, budget, backend="auto"):
        return {
            "variant": "sliding_window",
            "config": {"window": window, "sinks": sinks, "backend": backend},
            "matched_budget": budget,
            "error_metric": "rel_l2",
        }

    # the search chooses window and sinks (QualityKnob.searched_with): a matched series holds every value they take
    frame = pd.DataFrame(
        [row(16, 0, 0.05), row(512, 4, 0.05), row(16, 4, 0.05, "masked"), row(32, 4, 0.1), row(256, 0, None)]
    )
    assert series_labels(frame) == [
        "sliding_window(backend=auto)@0.05",
        "sliding_window(backend=auto)@0.05",
        "sliding_window(backend=masked)@0.05",
        "sliding_window(backend=auto)@0.1",
        "sliding_window",
    ]
