"""Rows are typed end to end: the reader gives back Rows (and a frame whose columns are Row's fields), a misspelt
field is an error where it is read, and rows an older writer made read back with the cell ids they were written with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from harness.row import ROW_FIELDS, Row
from harness.store import COL, SERIES, completed_cell_ids, load_rows, load_run, typed_row

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "results" / "cpu-reference"  # the committed reference run
# the first five rows (one per variant) of the first committed reference (git show 9a7b070:results/cpu-reference/
# rows.jsonl): 43 fields, before kv_heads, phase, scope, padding, the paired speed-up and the roofline were recorded
FIRST_REFERENCE_ROWS = Path(__file__).with_name("first_reference_rows.jsonl")


def test_a_misspelt_row_field_is_an_attribute_error_that_names_the_nearest_field(tmp_path):
    (row,) = load_rows(_folder_with(tmp_path, _first_reference_lines()[:1]))
    assert row.status == "ok" and row.seq_len == row.cell.seq_len  # the row's own fields and its cell's
    with pytest.raises(AttributeError, match=r"Row has no field 'statsu'; did you mean 'status'\?"):
        row.statsu
    with pytest.raises(AttributeError, match=r"Row has no field 'seqlen'; did you mean 'seq_len'\?"):
        row.seqlen


def test_a_misspelt_frame_column_is_an_attribute_error_at_the_access():
    assert COL.status == "status" and COL.series == SERIES and list(COL) == [*ROW_FIELDS, SERIES]
    with pytest.raises(AttributeError, match=r"no column 'latency'; did you mean 'latency_s'\?"):
        COL.latency
    with pytest.raises(AttributeError, match="declared by Row's fields"):
        COL.status = "state"


@pytest.mark.parametrize("source", ["committed reference", "first committed reference"])
def test_rows_an_older_writer_made_round_trip_with_the_cell_ids_they_were_written_with(tmp_path, source):
    folder = REFERENCE if source == "committed reference" else _folder_with(tmp_path, _first_reference_lines())
    written = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines()]
    rows = load_rows(folder)
    assert len(rows) == len(written) and all(isinstance(row, Row) for row in rows)
    assert [row.cell_id for row in rows] == [record["cell_id"] for record in written]
    assert all(row.cell_id == row.cell.cell_id for row in rows)  # a resume plans the ids these rows have
    assert completed_cell_ids(rows) == {record["cell_id"] for record in written}
    for row, record in zip(rows, written):
        assert typed_row(row.to_dict()) == row  # typed, written, typed again: the same row
        assert {name: row.to_dict()[name] for name in record} == record  # every field written reads back as written
    frame = load_run(folder).rows
    assert list(frame.columns[: len(ROW_FIELDS)]) == list(ROW_FIELDS) and SERIES in frame
    assert list(frame[COL.cell_id]) == [row.cell_id for row in rows]


def test_an_older_row_fills_the_cell_fields_it_lacks_as_the_frame_does(tmp_path):
    record = json.loads(_first_reference_lines()[0])
    assert "kv_heads" not in record and "phase" not in record
    row = typed_row({**record, "field_a_newer_writer_added": 1})  # left out, as the frame leaves it out of ROW_FIELDS
    frame = load_run(_folder_with(tmp_path, [json.dumps(record)])).rows
    assert row.kv_heads == record["heads"] == frame[COL.kv_heads].iloc[0]
    assert row.phase == "prefill" == frame[COL.phase].iloc[0] and row.padding == 0.0
    assert "kv_dtype" not in record and row.kv_dtype == "none" == frame[COL.kv_dtype].iloc[0]  # K/V held unquantized
    assert (
        "scores_dtype" not in record and row.scores_dtype == "none" == frame[COL.scores_dtype].iloc[0]
    )  # float scores


def _first_reference_lines() -> list[str]:
    return FIRST_REFERENCE_ROWS.read_text().splitlines()


def _folder_with(tmp_path: Path, lines: list[str]) -> Path:
    """A run folder holding the given rows.jsonl lines and the reference's spec."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(REFERENCE / "spec.toml", folder / "spec.toml")
    (folder / "rows.jsonl").write_text("\n".join(lines) + "\n")
    return folder
