"""The hostile replay of issue 24, part B: corrupted run folders and misbehaving plugins, built here from code.

Every case must end in one line with exit 2 (usage) or 1 (failure), or in the right row status: no traceback, no wrong
exit 0, no hang. Corrupted folders go through report, compare and resume (in this process); plugins through
measure_cell (in this process) and the sweep (a child process where the plugin would end its process).
docs/reliability.md lists what each case proves.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from harness.commands import main
from tests.helpers.hostile_plugins import write_plugin
from tests.helpers.synthetic_run import make_rows, write_run

ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 300  # generous: a hang fails the test instead of the suite


def _good_rows() -> list[dict]:
    return make_rows(variants=("dense", "chunked"), lengths=(256, 512), inputs=("gaussian",))


def _first(**fields):
    return lambda rows: rows[0].update(fields)


def _every(**fields):
    return lambda rows: [row.update(fields) for row in rows]


def _old_schema(rows):
    for row in rows:
        for name in ("kv_heads", "phase", "scope", "padding", "recompute", "precision", "matched_budget"):
            row.pop(name, None)
        row.pop("error_metric", None), row.pop("schema_version", None)


def _old_unreachable(rows):
    rows.append({**rows[0], "status": "unreachable", "cell_id": "0" * 16, "reason": "no window", "latency_s": None})


# name -> (edit of the rows, text of rows.jsonl, text of env.json, a change to the folder); None: as written
FOLDERS = {
    "cell_id int": (_first(cell_id=5), None, None, None),
    "variant list": (_first(variant=[1]), None, None, None),
    "mode int": (_first(mode=3), None, None, None),
    "device table": (_first(device={}), None, None, None),
    "kv_heads abc": (_first(kv_heads="abc"), None, None, None),
    "seq_len 1e30": (_first(seq_len=1e30), None, None, None),
    "batch 20 digits": (_first(batch=10**20), None, None, None),
    "causal 'false'": (_first(causal="false"), None, None, None),
    "config text": (_first(config="x"), None, None, None),
    "status unknown": (_first(status="great"), None, None, None),
    "tflops text": (_first(tflops="fast"), None, None, None),
    "latencies Infinity": (_every(latency_s=float("inf"), latency_p20_s=float("inf")), None, None, None),
    "one latency NaN": (_first(latency_s=float("nan")), None, None, None),
    "100,000 brackets": (None, "[" * 100_000 + "\n", None, None),
    "deep row": (None, json.dumps({"variant": "dense", "x": json.loads("[" * 500 + "]" * 500)}) + "\n", None, None),
    "long line": (None, '{"variant": "' + "x" * 5_000_000 + '"}\n', None, None),
    "not JSON": (None, "hello\n{\n", None, None),
    "env table as text": (None, None, json.dumps({"packages": "x", "cpu": {"a": 1}, "gpu": [1]}), None),
    "env text": (None, None, json.dumps("hello"), None),
    "env deep": (None, None, "[" * 100_000, None),
    "rows.jsonl a directory": (None, None, None, lambda d: ((d / "rows.jsonl").unlink(), (d / "rows.jsonl").mkdir())),
    "rows.jsonl a FIFO": (None, None, None, lambda d: ((d / "rows.jsonl").unlink(), os.mkfifo(d / "rows.jsonl"))),
    "report.html a directory": (None, None, None, lambda d: (d / "report.html").mkdir()),
    "old schema": (_old_schema, None, None, None),
    "old unreachable": (_old_unreachable, None, None, None),
}


def _folder(base: Path, name: str) -> Path:
    edit, rows_text, env_text, change = FOLDERS[name]
    rows = json.loads(json.dumps(_good_rows()))
    if edit:
        edit(rows)
    folder = write_run(base / name.replace(" ", "_").replace("'", "").replace(",", ""), rows)
    if rows_text is not None:
        (folder / "rows.jsonl").write_text(rows_text)
    if env_text is not None:
        (folder / "env.json").write_text(env_text)
    if change:
        change(folder)
    return folder


def _run(argv: list[str]) -> tuple[int, str]:
    """main(argv) in this process: (exit code, stderr); a traceback fails the test by propagating."""
    err = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        warnings.simplefilter("ignore")
        code = main(argv)
    return code, err.getvalue()


def _one_line_or_none(code: int, err: str) -> None:
    """Exit 0 with no error, or exit 1/2 with exactly one error line."""
    errors = [line for line in err.splitlines() if line.startswith("error")]
    assert "Traceback" not in err, err
    assert code in (0, 1, 2), (code, err)
    assert (code == 0) == (not errors), (code, err)
    assert len(errors) <= 1, err


@pytest.fixture
def fast_report(monkeypatch):
    """The report without its figures (drawn from typed rows only; the figures' own tests cover them)."""
    import harness.report.document as document

    monkeypatch.setattr(document, "figure_section", lambda *args, **kwargs: ([], []))


@pytest.mark.parametrize("name", list(FOLDERS))
@pytest.mark.parametrize("command", ["report", "compare", "resume"])
@pytest.mark.slow
def test_a_corrupted_run_folder_is_one_line_never_a_traceback(tmp_path, fast_report, name, command):
    folder = _folder(tmp_path, name)
    good = write_run(tmp_path / "good", _good_rows())
    argv = {
        "report": ["report", str(folder), "--no-maps"],
        "compare": ["compare", str(good), str(folder)],
        "resume": ["sweep", "--resume", str(folder), "--dry-run"],
    }[command]
    _one_line_or_none(*_run(argv))


@pytest.mark.parametrize(
    "name, note",
    [
        ("kv_heads abc", "row 1: field kv_heads is 'abc', expected an integer; row skipped"),
        ("causal 'false'", "row 1: field causal is 'false', expected true or false; row skipped"),
        ("seq_len 1e30", "row 1: field seq_len is 1e+30, expected a positive integer of at most 2**40"),
        ("device table", "row 1: field device is a table, expected text; row skipped"),
        ("status unknown", "row 1: field status is 'great', expected one of ok, oom"),
        ("latencies Infinity", "row 1: field latency_s is inf, expected a finite number; row skipped"),
    ],
)
def test_a_bad_field_skips_its_row_with_a_note_in_report_compare_and_resume_alike(tmp_path, name, note):
    from harness.store import load_run, read_rows

    folder = _folder(tmp_path, name)
    with pytest.warns(UserWarning, match="field"):
        run = load_run(folder)
    assert any(note in n for n in run.notes), run.notes
    assert len(run.rows) == len(_good_rows()) - (len(_good_rows()) if name == "latencies Infinity" else 1)
    with pytest.warns(UserWarning, match=re.escape(note.split(",")[0])):
        resumed = read_rows(folder)  # what a resume counts as done
    assert len(resumed) == len(run.rows)


def test_compare_of_an_old_schema_run_matches_its_cells(tmp_path, fast_report):
    good = write_run(tmp_path / "good", _good_rows())
    old = _folder(tmp_path, "old schema")
    for a, b in ((good, old), (old, good)):
        code, err = _run(["compare", str(a), str(b)])
        assert code == 0 and "error" not in err, err


# ---- plugins: in this process ---------------------------------------------------------------------------
@pytest.fixture
def plugin(tmp_path):
    """Load a hostile plugin by name into the registry for one test; returns its file's path."""
    from variants import _registry, list_variants, load_plugin

    list_variants()
    loaded = []

    def load(name: str) -> Path:
        path = write_plugin(tmp_path, name)
        loaded.append((name, load_plugin(str(path))))
        return path

    yield load
    for name, module in loaded:
        _registry._REGISTRY.pop(name, None)
        sys.modules.pop(module, None)


def _measure(variant: str, context=None, *, N: int = 64, mode: str = "forward", config=None, **fields) -> dict:
    from harness.measure import MeasureContext, MeasureSettings, RunInfo, measure_cell
    from harness.schema import Cell
    from variants import build_config

    settings = MeasureSettings(time_budget_s=0.01, repeats=2, error_rows=16, cell_timeout_s=60.0)
    cell = Cell(
        variant=variant,
        config=build_config(variant, **(config or {})).to_dict(),
        seq_len=N,
        kv_len=N,
        batch=1,
        heads=2,
        head_dim=16,
        inputs="gaussian",
        dtype="float32",
        device="cpu",
        mode=mode,
        seed=0,
        **{"causal": False, **fields},
    )
    run = RunInfo(run_id="t", device_name="cpu", host="h", threads=torch.get_num_threads())
    return measure_cell(cell, settings, run, context or MeasureContext()).to_dict()


@pytest.mark.parametrize("mode", ["forward", "train"])
@pytest.mark.slow
def test_a_variant_that_writes_into_its_inputs_is_an_error_row_and_falsifies_no_other(plugin, mode):
    from harness.measure import MeasureContext

    plugin("h_writes")
    honest = _measure("sliding_window", mode=mode, config={"window": 8})
    context = MeasureContext()
    row = _measure("h_writes", context, mode=mode)
    assert row["status"] == "error" and "changed its inputs k, v in place" in row["reason"], row["reason"]
    after = _measure("sliding_window", context, mode=mode, config={"window": 8})
    assert after["status"] == "ok" and after["rel_l2_error"] == pytest.approx(honest["rel_l2_error"], rel=1e-6)


def test_a_variant_that_overwrites_its_inputs_and_answers_for_them_is_caught(plugin):
    plugin("h_cheats")
    row = _measure("h_cheats")
    assert row["status"] == "error" and "changed its input q in place" in row["reason"], row["reason"]
    assert row["rel_l2_error"] > 0.1  # the reference came from the inputs before the call


@pytest.mark.parametrize("mode", ["forward", "train"])
def test_a_variant_right_only_on_its_first_call_is_an_error_row(plugin, mode):
    plugin("h_first")
    row = _measure("h_first", mode=mode)
    assert row["status"] == "error" and "a timed call's output has rel L2 error 1" in row["reason"], row["reason"]
    assert row["rel_l2_error"] == pytest.approx(1.0)  # the row shows the timed call's error


def test_a_variant_that_decodes_right_only_from_its_first_state_is_an_error_row(plugin):
    plugin("h_decode_first")
    row = _measure("h_decode_first", phase="decode", causal=True)
    assert row["status"] == "error" and "a timed call's output has rel L2 error 1" in row["reason"], row["reason"]
    assert row["rel_l2_error"] == pytest.approx(1.0) and row["state_bytes"] > 0  # the earlier stages' fields stay


def test_an_exact_variant_passes_the_timed_call_check():
    row = _measure("dense")
    assert row["status"] == "ok" and row["rel_l2_error"] < 1e-5


def test_a_keyboard_interrupt_raised_by_a_variant_is_an_error_row(plugin):
    plugin("h_interrupt")
    row = _measure("h_interrupt")
    assert row["status"] == "error" and "KeyboardInterrupt" in row["reason"]


def test_the_users_ctrl_c_still_stops_the_cell(monkeypatch):
    import signal

    from harness.measure import reference

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # a real SIGINT, as Ctrl-C sends
        raise AssertionError("SIGINT did not interrupt")

    monkeypatch.setattr(reference, "reference_attention", interrupted)
    monkeypatch.setattr("variants.reference_attention", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _measure("dense")


@pytest.mark.parametrize(
    "name, words",
    [
        ("h_import_exit", "the plugin called sys.exit(3) while being imported"),
        ("h_import_base", "Boom: at import"),
        ("h_dense", "variant name 'dense' is already registered by variants.dense.DenseAttention"),
    ],
)
@pytest.mark.slow
def test_a_plugin_that_fails_at_import_is_one_line_naming_its_file(tmp_path, name, words):
    path = write_plugin(tmp_path, name)
    done = subprocess.run(
        [sys.executable, "-m", "harness", "list", "--plugin", str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and str(path) in done.stderr and words in done.stderr, done.stderr


# ---- plugins: the sweep ---------------------------------------------------------------------------------
TINY = ["--device", "cpu", "--seq-lens", "32", "--batch", "1", "--heads", "1", "--head-dims", "8"]
TINY += ["--time-budget", "0.005", "--repeats", "1", "--error-rows", "8", "--inputs", "gaussian", "--quiet"]


@pytest.mark.slow
def test_a_plugin_that_calls_os_exit_0_costs_its_row_not_the_sweep(tmp_path, no_report):
    from harness.store import read_rows

    path = write_plugin(tmp_path, "h_exit0")
    argv = ["sweep", *TINY, "--variants", "h_exit0,dense", "--plugin", str(path), "--out", str(tmp_path)]
    code, err = _run([*argv, "--run-id", "r"])  # this process is the driver: it must survive to say so
    assert code == 0 and "Traceback" not in err, err
    by_variant = {row["variant"]: row for row in read_rows(tmp_path / "r")}
    assert by_variant["h_exit0"]["status"] == "error"
    assert "exited with code 0 and no row" in by_variant["h_exit0"]["reason"]
    assert by_variant["dense"]["status"] == "ok"


@pytest.mark.slow
def test_plugin_cells_share_one_child_process_and_measure_as_built_ins_do(tmp_path, monkeypatch, no_report):
    from harness.executors.plugin_worker import PluginWorker
    from harness.store import read_rows

    starts = []
    real_start = PluginWorker._start
    monkeypatch.setattr(PluginWorker, "_start", lambda self: (starts.append(1), real_start(self)))
    path = write_plugin(tmp_path, "h_exact")
    argv = ["sweep", *TINY, "--seq-lens", "16,32", "--variants", "h_exact", "--plugin", str(path)]
    code, err = _run([*argv, "--out", str(tmp_path), "--run-id", "r"])
    assert code == 0, err
    rows = read_rows(tmp_path / "r")
    assert len(rows) == 2 and all(r["status"] == "ok" and r["rel_l2_error"] < 1e-5 for r in rows), rows
    assert len(starts) == 1  # one process start for the run's plugin cells, not one per cell


@pytest.mark.slow
def test_a_plugin_that_swallows_the_timeout_is_killed_at_the_hard_limit(tmp_path, monkeypatch, no_report):
    import harness.executors.base as base
    from harness.store import read_rows

    monkeypatch.setattr(base, "STARTUP_SLACK_S", 10.0)  # the child's own start; the default is a minute
    path = write_plugin(tmp_path, "h_swallow")
    argv = ["sweep", *TINY, "--variants", "h_swallow", "--plugin", str(path), "--timeout", "1", "--out", str(tmp_path)]
    code, err = _run([*argv, "--run-id", "r"])
    assert code == 0 and "Traceback" not in err, err
    (row,) = read_rows(tmp_path / "r")
    assert row["status"] == "timeout" and "its process was killed" in row["reason"]


def test_a_run_missing_rows_is_not_exit_0_and_says_how_to_continue(tmp_path, monkeypatch, no_report):
    import harness.executors as executors

    real = executors.run_cells

    def loses_the_last(executor, cells, **kwargs):
        real(executor, list(cells)[:-1], **kwargs)

    monkeypatch.setattr(executors, "run_cells", loses_the_last)
    code, err = _run(["sweep", *TINY, "--variants", "dense,chunked", "--out", str(tmp_path), "--run-id", "r"])
    assert code == 1 and "1 of 2 planned cells have no row" in err and f"--resume {tmp_path / 'r'}" in err, err
    _one_line_or_none(code, err)


@pytest.mark.parametrize("error", [errno.EROFS, errno.ENOSPC])
def test_a_read_only_or_full_run_folder_is_one_line_with_a_resume_hint(tmp_path, monkeypatch, error, no_report):
    from harness.store import RowWriter

    def append(self, row):
        raise OSError(error, os.strerror(error), str(tmp_path / "r" / "rows.jsonl"))

    monkeypatch.setattr(RowWriter, "append", append)
    code, err = _run(["sweep", *TINY, "--variants", "dense", "--out", str(tmp_path), "--run-id", "r"])
    assert code == 1 and os.strerror(error) in err and f"--resume {tmp_path / 'r'}" in err, err
    _one_line_or_none(code, err)


def test_resume_of_a_fifo_rows_file_does_not_block(tmp_path):
    folder = _folder(tmp_path, "rows.jsonl a FIFO")
    code, err = _run(["sweep", "--resume", str(folder), "--quiet"])
    assert code == 2 and "rows.jsonl is a FIFO" in err, err
