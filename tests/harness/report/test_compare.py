"""harness.report.compare and `python -m harness compare`: cells matched across runs, regressions flagged beyond the runs' own spread."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from harness.commands import main
from harness.commands.compare import run as compare_command
from harness.errors import UsageError
from harness.report.analysed import analyse as load_run  # compare takes runs analysed once
from harness.report.compare import compare_runs
from tests.helpers.synthetic_run import make_rows, write_run


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    """Run A of most tests, the default synthetic run, written and analysed once (compare writes only into B)."""
    return load_run(write_run(tmp_path_factory.mktemp("shared") / "a"))


def _runs(run_a, tmp_path, rows_b=None, **kwargs_b):
    """run_a and a run B written from rows_b (else make_rows(**kwargs_b)) into tmp_path / "b", analysed."""
    return run_a, load_run(write_run(tmp_path / "b", rows_b, **kwargs_b))


def test_identical_runs_pass(run_a, tmp_path, capsys):
    a, b = _runs(run_a, tmp_path)
    result = compare_runs(a, b)
    assert len(result.cells) == len(a.frame) and set(result.cells["verdict"]) == {"same"}
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 0
    assert "0 regressions, 0 improvements" in capsys.readouterr().out


@pytest.mark.slow
def test_planted_2x_regression_is_flagged_and_nothing_else(run_a, tmp_path, capsys):
    a, b = _runs(run_a, tmp_path, slow={"chunked": 2.0})
    result = compare_runs(a, b)
    flagged = result.cells[result.cells["verdict"] != "same"]
    assert set(flagged["variant"]) == {"chunked"}
    assert set(flagged["verdict"]) == {"regression"} and set(flagged["why"]) == {"latency 2.00x"}
    assert len(flagged) == len(a.frame[(a.frame["variant"] == "chunked") & (a.frame["status"] == "ok")])
    assert main(["compare", str(a.path), str(b.path)]) == 0  # reported, not failed, unless asked
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "chunked" in out
    assert (b.path / "compare_vs_a" / "compare.csv").is_file() and (b.path / "compare_vs_a" / "compare.md").is_file()


def test_a_faster_run_is_an_improvement(run_a, tmp_path):
    a, b = _runs(run_a, tmp_path, slow={"dense": 0.5})
    result = compare_runs(a, b)
    assert set(result.improvements["variant"]) == {"dense"} and len(result.regressions) == 0


@pytest.mark.slow
def test_changes_within_the_threshold_or_the_spread_are_not_flagged(run_a, tmp_path):
    # 3% slower: below the 5% threshold (the 2% spreads do not overlap, so only the threshold saves it).
    a, b = _runs(run_a, tmp_path, slow={"chunked": 1.03})
    assert len(compare_runs(a, b).regressions) == 0
    # 10% slower but both runs spread +/- 20%: inside the noise.
    a = load_run(write_run(tmp_path / "wa", _spread(make_rows(), 0.2)))
    b = load_run(write_run(tmp_path / "wb", _spread(make_rows(slow={"chunked": 1.10}), 0.2)))
    assert len(compare_runs(a, b).regressions) == 0
    # The same 10% with tight spreads is flagged.
    a, b = _runs(run_a, tmp_path / "tight", slow={"chunked": 1.10})
    assert len(compare_runs(a, b).regressions) > 0


def _spread(rows, frac):
    return [
        dict(r, latency_p20_s=r["latency_s"] * (1 - frac), latency_p80_s=r["latency_s"] * (1 + frac))
        if r["latency_s"]
        else r
        for r in rows
    ]


def test_status_memory_and_error_changes(run_a, tmp_path):
    rows = make_rows()
    for r in rows:
        if r["variant"] == "sliding_window" and r["seq_len"] == 4096:
            r.update(status="oom", reason="out of memory", latency_s=None)
        if r["variant"] == "linformer" and r["seq_len"] == 1024 and r["status"] == "ok":
            r["peak_memory_bytes"] *= 3
        if r["variant"] == "chunked" and r["seq_len"] == 512:
            r["rel_l2_error"] = 0.01  # from 2e-7
    a, b = _runs(run_a, tmp_path, rows)
    cells = compare_runs(a, b).cells
    why = {(r["variant"], r["seq_len"]): r["why"] for _, r in cells[cells["verdict"] == "regression"].iterrows()}
    assert why[("sliding_window", 4096)] == "status ok -> oom"
    assert why[("linformer", 1024)] == "memory 3.00x"
    assert why[("chunked", 512)] == "error 2e-07 -> 0.01"
    assert len(why) == 3


def test_cells_match_across_machines_not_on_device_host_run_or_seed(run_a, tmp_path):
    other = [
        dict(
            r,
            run_id="other",
            host="gpu-box",
            device="cuda",
            device_name="NVIDIA H200",
            seed=7,
            threads=16,
            cell_id="x" + r["cell_id"],
        )
        for r in make_rows()
    ]
    a, b = _runs(run_a, tmp_path, other)
    result = compare_runs(a, b)
    assert len(result.cells) == len(a.frame) and len(result.only_a) == 0
    assert any("different seeds" in n for n in result.notes)
    assert any("CPU and CUDA generators draw other inputs" in n for n in result.notes)


def test_equal_seeds_are_not_called_different_when_only_one_run_has_some_cells(run_a, tmp_path):
    # the outer merge turns B's seed column to floats where A has cells B lacks: 0 and 0.0 are one seed
    a, b = _runs(run_a, tmp_path, lengths=(256, 512))
    result = compare_runs(a, b)
    assert len(result.only_a) and len(result.cells)
    assert not any("different seeds" in n for n in result.notes), result.notes


def test_unmatched_cells_are_counted_and_no_overlap_is_a_usage_error(run_a, tmp_path, capsys):
    a, b = _runs(run_a, tmp_path, lengths=(256, 512, 16384))
    result = compare_runs(a, b)
    assert set(result.only_b["seq_len"]) == {16384} and set(result.only_a["seq_len"]) == {1024, 2048, 4096, 8192}
    c = write_run(tmp_path / "c", [dict(r, dtype="bfloat16") for r in make_rows()])
    with pytest.raises(UsageError, match="no cell of .* matches one of"):
        compare_command(
            argparse.Namespace(run_a=str(a.path), run_b=str(c), threshold=0.05, out=None, fail_on_regression=False)
        )
    assert main(["compare", str(a.path), str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_compare_reads_a_killed_run(tmp_path):
    a = write_run(tmp_path / "a")
    b = write_run(tmp_path / "b", truncate_last=True)
    with pytest.warns(UserWarning, match="skipped last line"):
        result = compare_runs(load_run(a), load_run(b))
    assert set(result.cells["verdict"]) == {"same"}
    assert json.loads((b / "rows.jsonl").read_text().splitlines()[0])["variant"] == "dense"


@pytest.mark.parametrize("content", ["", 'not json\n{"cell_id": "half\n'])
@pytest.mark.slow
def test_compare_against_a_run_without_readable_rows_is_one_line_exit_2(content, tmp_path, capsys):
    a = write_run(tmp_path / "a")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "rows.jsonl").write_text(content)
    for argv in ([str(a), str(empty)], [str(empty), str(a)]):
        with pytest.warns(UserWarning) if content else _no_warning():
            assert main(["compare", *argv]) == 2
        err = capsys.readouterr().err
        assert f"{empty}: no readable row in rows.jsonl" in err and len(err.strip().splitlines()) == 1, err


def _no_warning():
    import contextlib

    return contextlib.nullcontext()


def test_compare_out_under_a_file_is_one_line_exit_2(tmp_path, capsys):
    a = write_run(tmp_path / "a")
    (tmp_path / "file").write_text("")
    assert main(["compare", str(a), str(a), "--out", str(tmp_path / "file" / "x")]) == 2
    err = capsys.readouterr().err
    assert "cannot create that folder" in err and len(err.strip().splitlines()) == 1, err


def test_a_row_with_a_non_integer_seq_len_is_skipped_with_a_note(tmp_path, capsys):
    a = write_run(tmp_path / "a")
    rows = (a / "rows.jsonl").read_text().splitlines()
    bad = json.loads(rows[0])
    bad["seq_len"] = "abc"
    b = tmp_path / "b"
    b.mkdir()
    (b / "rows.jsonl").write_text("\n".join([json.dumps(bad)] + rows) + "\n")
    with pytest.warns(UserWarning, match="row 1: field seq_len is 'abc', expected an integer; row skipped"):
        run = load_run(b)
    assert len(run.frame) == len(rows)
    with pytest.warns(UserWarning, match="expected an integer"):
        assert main(["compare", str(a), str(b)]) == 0


@pytest.mark.parametrize(
    "ratio, verdict",
    [
        (1.0, "same"),
        (1.03, "same"),
        (0.97, "same"),  # within the 5% threshold either way
        (1.06, "regression"),
        (1 / 1.06, "improvement"),
        (2.0, "regression"),
        (0.5, "improvement"),
    ],
)
def test_latency_verdict_without_quantiles_is_the_threshold_alone_in_the_right_direction(ratio, verdict):
    """Rows without p20/p80 (older runs): B/A above 1 + threshold is a regression, below 1/(1 + threshold) an improvement."""
    import pandas as pd

    from harness.report.verdicts import judge

    nan = float("nan")
    row = pd.Series(
        {
            "status_a": "ok",
            "status_b": "ok",
            "latency_s_a": 1e-3,
            "latency_s_b": 1e-3 * ratio,
            "latency_p20_s_a": nan,
            "latency_p80_s_a": nan,
            "latency_p20_s_b": nan,
            "latency_p80_s_b": nan,
            "peak_memory_bytes_a": 1e6,
            "peak_memory_bytes_b": 1e6,
            "rel_l2_error_a": 1e-6,
            "rel_l2_error_b": 1e-6,
        }
    )
    got, why = judge(row, threshold=0.05)
    assert got == verdict, why
    assert (why == "") == (verdict == "same") and (verdict == "same" or f"latency {ratio:.2f}x" in why)


def _paired(rows, variant, interval, *, load=0.1, noisy=False, slow=1.0):
    """Give every ok row paired speed-up fields and load; `variant`'s rows get `interval` and `slow` x latency."""
    for r in rows:
        if r["status"] != "ok":
            continue
        r.update(load_per_cpu=load, noisy=noisy, noise_reason=f"load {load:.2f} per CPU >= 0.6" if noisy else None)
        if r["variant"] == variant:
            r["speedup"], r["speedup_low"], r["speedup_high"] = interval
            for key in ("latency_s", "latency_p20_s", "latency_p80_s"):
                r[key] *= slow
    return rows


def test_latency_change_within_the_paired_intervals_is_no_regression(tmp_path):
    # chunked 20% slower with tight p20-p80 spreads, but its paired speed-up intervals overlap: the machine drifted.
    a = load_run(write_run(tmp_path / "pa", _paired(make_rows(), "chunked", (0.7, 0.6, 0.8))))
    b = load_run(write_run(tmp_path / "pb", _paired(make_rows(), "chunked", (0.65, 0.55, 0.75), slow=1.2)))
    result = compare_runs(a, b)
    assert len(result.regressions) == 0 and len(result.noisy) == 0
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 0
    # Beyond both intervals: a regression.
    b = load_run(write_run(tmp_path / "pc", _paired(make_rows(), "chunked", (0.5, 0.45, 0.55), slow=1.4)))
    result = compare_runs(a, b)
    assert set(result.regressions["variant"]) == {"chunked"} and set(result.regressions["why"]) == {
        "latency 1.40x against dense in the cell"
    }


def test_a_run_under_load_is_said_not_blamed(tmp_path, capsys):
    a = load_run(write_run(tmp_path / "qa", _paired(make_rows(), "chunked", (0.7, 0.6, 0.8))))
    b = load_run(
        write_run(
            tmp_path / "qb",
            _paired(make_rows(slow={"dense": 2.0, "chunked": 2.0}), "chunked", (0.7, 0.6, 0.8), load=1.5, noisy=True),
        )
    )
    result = compare_runs(a, b)
    # dense is 2x slower under load: said, not counted; chunked's paired speed-up did not move, so it is the same.
    assert len(result.regressions) == 0 and set(result.noisy["variant"]) == {"dense"}
    assert set(result.cells[result.cells["variant"] == "chunked"]["verdict"]) == {"same"}
    assert (
        "measured under load" in result.noisy["why"].iloc[0] and "B: load 1.50 per CPU" in result.noisy["why"].iloc[0]
    )
    assert any("qb was measured under load" in n for n in result.notes)
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 0
    out = capsys.readouterr().out
    assert "latency changes under load or noise (not counted)" in out and "NOISY" in out


def _scattered(rows, *, spread: float, drift: float = 1.0, seed: int = 0, slow: dict | None = None):
    """Every ok row's latencies times drift x a seeded log-normal factor (a noisy machine); `slow` multiplies series."""
    import random

    rng = random.Random(seed)
    for r in rows:
        if r["status"] != "ok":
            continue
        factor = drift * math.exp(rng.gauss(0.0, spread)) * (slow or {}).get(r["variant"], 1.0)
        for key in ("latency_s", "latency_p20_s", "latency_p80_s"):
            r[key] *= factor
        r["latency_p20_s"], r["latency_p80_s"] = r["latency_s"] * 0.999, r["latency_s"] * 1.001  # tight in-run spreads
    return rows


def test_scatter_between_two_runs_of_one_commit_is_not_a_regression(tmp_path):
    # Two runs whose cells move +-20% at random and 20% as a whole: the noise floor, not the 5% threshold, decides.
    a = load_run(write_run(tmp_path / "a", _scattered(make_rows(), spread=0.2, seed=1)))
    b = load_run(write_run(tmp_path / "b", _scattered(make_rows(), spread=0.2, drift=0.8, seed=2)))
    result = compare_runs(a, b)
    assert len(result.regressions) == 0 and len(result.improvements) == 0
    assert any(" runs 0.7" in n or " runs 0.8" in n for n in result.notes) and any(
        "only changes beyond" in n for n in result.notes
    )
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 0


def test_a_real_slowdown_stands_out_of_the_noise_floor(tmp_path):
    a = load_run(write_run(tmp_path / "a", _scattered(make_rows(), spread=0.05, seed=1)))
    b = load_run(write_run(tmp_path / "b", _scattered(make_rows(), spread=0.05, seed=2, slow={"chunked": 3.0})))
    result = compare_runs(a, b)
    assert set(result.regressions["variant"]) == {"chunked"} and len(result.regressions) == len(
        result.cells[(result.cells["variant"] == "chunked") & (result.cells["status_a"] == "ok")]
    )
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 1


def test_cells_matched_to_a_budget_match_across_runs_whatever_knob_value_each_found(tmp_path):
    from tests.helpers.synthetic_run import BUDGET_SPEC, make_budget_rows

    rows_a = make_budget_rows()
    rows_b = [
        dict(r, config={**r["config"], "window": r["config"]["window"] * 2}) if r["variant"] == "sliding_window" else r
        for r in rows_a
    ]
    a = load_run(write_run(tmp_path / "a", rows_a, spec_text=BUDGET_SPEC))
    b = load_run(write_run(tmp_path / "b", rows_b, spec_text=BUDGET_SPEC))
    result = compare_runs(a, b)
    assert len(result.cells) == len(rows_a) and not len(result.only_a) and not len(result.only_b)
    assert not any("measured twice" in n for n in result.notes)  # window 512 at 0.05 and 256 at 0.1: two cells, not one


def test_configs_as_given_beside_matched_ones_stay_apart(tmp_path):
    """A run mixing budget rows and rows as given: two windows as given are two cells (the budget column's NaN is no
    budget), and a budget row still matches without its searched window."""
    from tests.helpers.synthetic_run import BUDGET_SPEC, make_budget_rows

    given = [
        dict(r, config={"backend": "auto", "window": w}, cell_id=f"{r['cell_id']}-w{w}")
        for w in (16, 64)
        for r in make_rows(variants=("sliding_window",), inputs=("local",), with_failures=False)
    ]
    rows = make_budget_rows() + given
    a = load_run(write_run(tmp_path / "a", rows, spec_text=BUDGET_SPEC))
    b = load_run(write_run(tmp_path / "b", rows, spec_text=BUDGET_SPEC))
    result = compare_runs(a, b)
    assert len(result.cells) == len(rows) and len(result.only_a) == len(result.only_b) == 0
    assert not any("measured twice" in n for n in result.notes)


def test_errors_against_different_references_are_not_compared(tmp_path):
    rows = make_rows(inputs=("gaussian",), with_failures=False)
    a = load_run(write_run(tmp_path / "a", rows))
    b = load_run(
        write_run(
            tmp_path / "b", [dict(r, rel_l2_error=r["rel_l2_error"] * 10, accuracy_reference="pattern") for r in rows]
        )
    )
    result = compare_runs(a, b)
    assert any("errors are not compared" in n for n in result.notes)
    assert not any("error" in why for why in result.cells["why"])


@pytest.mark.parametrize("how", ["load", "contended"])
@pytest.mark.slow
def test_a_timeout_in_a_run_measured_under_load_is_inconclusive_not_a_regression(run_a, tmp_path, capsys, how):
    def loaded_rows(loaded: bool):
        rows = make_rows()
        for r in rows:
            if r["variant"] == "chunked" and r["seq_len"] >= 4096:  # ok in A; past the limit in B
                r.update(status="timeout", reason="exceeded 60 s", latency_s=None)
            if loaded and how == "load":
                r["load_per_cpu"] = 14.0
            if loaded and how == "contended" and r["status"] == "ok":
                r.update(load_per_cpu=None, contended=True, cpu_share=0.07)
        return rows

    rows = loaded_rows(True)
    timeouts = sum(r["status"] == "timeout" for r in rows)  # chunked at 4K and 8K on each inputs
    a, b = _runs(run_a, tmp_path / how, rows)
    result = compare_runs(a, b)
    assert timeouts == 4 and len(result.regressions) == 0 and len(result.inconclusive) == timeouts
    assert all(
        w.startswith("status ok -> timeout; inconclusive: B was measured under load (")
        for w in result.inconclusive["why"]
    )
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 0
    assert f"{timeouts} timeouts under load inconclusive (not counted)" in capsys.readouterr().out
    # the same timeouts on a quiet machine are regressions, and fail CI when asked
    a, b = _runs(run_a, tmp_path / f"quiet-{how}", loaded_rows(False))
    assert len(compare_runs(a, b).regressions) == timeouts
    assert main(["compare", str(a.path), str(b.path), "--fail-on-regression"]) == 1
