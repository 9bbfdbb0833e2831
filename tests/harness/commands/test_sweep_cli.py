"""`python -m harness sweep` end to end on CPU: a tiny sweep of every built-in, usage errors, OOM skipping, --isolate."""

from __future__ import annotations

import json

import pytest

from harness.commands import main
from harness.runner import run_sweep
from harness.runner import sweep_spec as build_spec
from harness.store import read_rows
from variants import get_variant, list_variants

TINY = [
    "--device",
    "cpu",
    "--seq-lens",
    "64,128",
    "--batch",
    "1",
    "--heads",
    "2",
    "--head-dims",
    "16",
    "--time-budget",
    "0.005",
    "--repeats",
    "1",
    "--error-rows",
    "16",
    "--calibration-steps",
    "3",
    "--quiet",
    "--inputs",
    "gaussian",
    "--error-budgets",
    "",
    "--causals",
    "false",
]  # every variant at its config as given (budget searches: tests/harness/measure/test_tuning.py)
# The same, as a spec's cli values, for the tests that build the spec themselves.
TINY_CLI = {
    "device": "cpu",
    "heads": "1",
    "head_dims": "8",
    "time_budget_s": "0.005",
    "repeats": "1",
    "error_rows": "8",
    "inputs": "gaussian",
    "causals": "false",
}
BUILTINS = [n for n in ("dense", "sliding_window", "chunked", "linformer", "distilled") if n in list_variants()]


@pytest.mark.slow
def test_tiny_sweep_of_every_builtin_both_modes(tmp_path, capsys, no_report):
    code = main(
        [
            "sweep",
            *TINY,
            "--seq-lens",
            "32,64",
            "--variants",
            ",".join(BUILTINS),
            "--modes",
            "forward,train",
            "--out",
            str(tmp_path),
            "--run-id",
            "tiny",
        ]
    )
    assert code == 0
    run_dir = tmp_path / "tiny"
    rows = read_rows(run_dir)
    assert len(rows) == len(BUILTINS) * 2 * 2
    assert len({r["cell_id"] for r in rows}) == len(rows)
    for row in rows:
        assert row["status"] == "ok", (row["variant"], row["mode"], row["reason"])
        assert row["latency_s"] > 0 and row["peak_memory_bytes"] > 0 and row["flops"] > 0
        assert 0 <= row["rel_l2_error"] and -1 <= row["cosine"] <= 1
        if get_variant(row["variant"]).capabilities.exact and row["variant"] != "sliding_window":
            assert row["rel_l2_error"] < 1e-5, row["variant"]
        if row["mode"] == "train":
            assert row["grad_check_seq_len"] == row["seq_len"] and row["grad_rel_l2_v"] is not None
        if get_variant(row["variant"]).capabilities.learnable:
            assert row["calibration"]["steps"] == 3 and row["calibration_s"] > 0
    dense = {(r["mode"], r["seq_len"]): r["flops"] for r in rows if r["variant"] == "dense"}
    assert dense[("forward", 64)] == 4 * dense[("forward", 32)]  # N^2
    for name in ("rows.jsonl", "rows.csv", "env.json", "spec.toml"):
        assert (run_dir / name).is_file(), name
    env = json.loads((run_dir / "env.json").read_text())
    assert env["seeds"]["evaluation"] == 0 and 0 not in env["seeds"]["calibration"]
    out = capsys.readouterr().out
    assert "forward float32" in out and "speed-up" in out and f"run folder: {run_dir}" in out


def test_dry_run_prints_cells_and_writes_nothing(tmp_path, capsys):
    assert main(["sweep", *TINY, "--variants", "dense", "--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "2 cells planned"
    assert out[-1].startswith("wall time: at most 4 min (2 cells x the 120 s --timeout); at least 0.01 s of timing")
    assert "dense N=64 forward float32 D=16 gaussian" in out[1]
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--variants", "slidng_window"], r"Unknown variant 'slidng_window'.*Did you mean 'sliding_window'"),
        (["--variants", "dense:backnd=sdpa"], r"no config field 'backnd'"),
        (["--seq-lens", "0"], r"--seq-lens: sequence lengths must be positive integers, got 0"),
        (["--seq-lens", "-256"], r"--seq-lens: sequence lengths must be positive integers, got -256"),
        (["--dtypes", "float64"], r"--dtypes: unknown value 'float64'"),
        (["--dtypes", "fp16"], r"--dtypes: float16 on cpu"),
        (["--modes", "inference"], r"--modes: unknown value 'inference'"),
        (["--resume", "nowhere"], r"--resume replays the run's own spec.toml; drop --device, --seq-lens"),
        (["--bogus"], r"unrecognized arguments: --bogus"),
        (
            ["--kv-heads", "2,3"],
            r"--kv-heads: 3 key/value heads do not divide --heads = 2 query heads; use a divisor of 2: 1, 2",
        ),
        (["--paddings", "0.25"], r"--paddings = 0.25 needs --batch >= 2"),
        (["--paddings", "1", "--batch", "2"], r"--paddings: must be in \[0, 1\)"),
        (["--phases", "generate"], r"--phases: unknown value 'generate'; expected one of prefill, decode"),
        (["--scopes", "block"], r"--scopes: unknown value 'block'; expected one of attention, layer"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, match, capsys, tmp_path):
    assert main(["sweep", *TINY, "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    import re

    assert re.search(match, err), err


def test_malformed_toml_exits_2_with_its_line(tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text("seq_lens = [256,\nbatch = = 2\n")
    assert main(["sweep", "--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "sweep.toml: malformed TOML" in err and "line 2" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_oom_marks_longer_lengths_oom_without_trying(tmp_path, test_variants, no_report):
    spec = build_spec(
        cli={
            "device": "cpu",
            "variants": "t_oom:oom_from=128,dense",
            "seq_lens": "64,128,256,512",
            "heads": "2",
            "head_dims": "16",
            "time_budget_s": "0.005",
            "repeats": "1",
            "error_rows": "8",
        }
    )
    run_dir = run_sweep(spec, out=tmp_path, run_id="oom")
    rows = {(r["variant"], r["seq_len"]): r for r in read_rows(run_dir)}
    assert rows[("t_oom", 64)]["status"] == "ok"
    assert rows[("t_oom", 128)]["status"] == "oom" and "CUDA out of memory" in rows[("t_oom", 128)]["reason"]
    for n in (256, 512):
        assert rows[("t_oom", n)]["status"] == "oom"
        assert rows[("t_oom", n)]["reason"] == "not run: oom at N=128 for the same variant, config and setting"
    assert all(rows[("dense", n)]["status"] == "ok" for n in (64, 128, 256, 512))  # the sweep went on


def test_resume_remembers_an_oom_recorded_before_the_interruption(tmp_path, test_variants, no_report):
    """Rows cut back to N <= 128 (as if killed after the OOM): the resumed run skips 256 and 512, never tries them."""
    spec = build_spec(cli={**TINY_CLI, "variants": "t_oom:oom_from=128", "seq_lens": "64,128,256,512"})
    run_dir = run_sweep(spec, out=tmp_path, run_id="oom", quiet=True)
    path = run_dir / "rows.jsonl"
    lines = path.read_text().splitlines()
    kept = [line for line in lines if json.loads(line)["seq_len"] <= 128]
    assert len(lines) == 4 and len(kept) == 2
    path.write_text("\n".join(kept) + "\n")
    run_sweep(spec, resume=run_dir, quiet=True)
    rows = {r["seq_len"]: r for r in read_rows(run_dir)}
    assert sorted(rows) == [64, 128, 256, 512] and len(read_rows(run_dir)) == 4
    for n in (256, 512):
        assert rows[n]["reason"] == "not run: oom at N=128 for the same variant, config and setting"


def test_plan_of_a_resumed_run_marks_the_done_cells_and_counts_the_rest(tmp_path, test_variants, no_report):
    from harness.runner import plan_lines

    spec = build_spec(cli={**TINY_CLI, "variants": "dense", "seq_lens": "32,64,128"})
    run_dir = run_sweep(spec, out=tmp_path, run_id="p", quiet=True)
    path = run_dir / "rows.jsonl"
    path.write_text(path.read_text().splitlines()[0] + "\n")  # one of three cells done
    lines = plan_lines(spec, run_dir)
    assert lines[-2] == "3 cells planned, 2 still to run"
    assert sum(" done " in line for line in lines[1:-2]) == 1
    assert plan_lines(spec)[-2] == "3 cells planned"


@pytest.mark.slow
def test_isolate_turns_a_segfault_into_a_row(tmp_path, test_variants, no_report):
    from tests.helpers.sweep_fixtures import PLUGIN

    code = main(
        [
            "sweep",
            *TINY,
            "--seq-lens",
            "32",
            "--variants",
            "t_crash,dense",
            "--plugin",
            str(PLUGIN),
            "--isolate",
            "--out",
            str(tmp_path),
            "--run-id",
            "iso",
        ]
    )
    assert code == 0
    rows = {r["variant"]: r for r in read_rows(tmp_path / "iso")}
    assert rows["t_crash"]["status"] == "error" and "signal SIGSEGV" in rows["t_crash"]["reason"]
    assert rows["dense"]["status"] == "ok" and rows["dense"]["rel_l2_error"] < 1e-5


def test_report_failure_is_a_warning_and_rows_survive(tmp_path, capsys, monkeypatch):
    report = pytest.importorskip("harness.report")

    def write_report(run_dir, **options):
        raise RuntimeError("plotting broke")

    monkeypatch.setattr(report, "write_report", write_report)
    assert (
        main(["sweep", *TINY, "--seq-lens", "32", "--variants", "dense", "--out", str(tmp_path), "--run-id", "r"]) == 0
    )
    assert "warning: the report failed (RuntimeError: plotting broke)" in capsys.readouterr().err
    assert len(read_rows(tmp_path / "r")) == 1


def test_old_singular_flags_are_read_as_the_plural_ones_with_a_note(capsys):
    assert (
        main(["sweep", *TINY, "--causal", "both", "--scope", "layer", "--padding", "0", "--head-dim", "8", "--dry-run"])
        == 0
    )
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if line.startswith("note: --")]
    assert len(notes) == 4 and "note: --scope is now --scopes" in captured.err
    assert " causal layer " in captured.out and " layer " in captured.out  # both causal settings, the layer scope


def test_the_dry_run_header_multiplies_to_the_cells_planned():
    import math

    from harness.runner import plan_lines

    spec = build_spec(
        cli={
            "variants": "dense,sliding_window",
            "seq_lens": "256,512",
            "error_budgets": "0.05,0.1",
            "phases": "prefill,decode",
            "causals": "both",
            "inputs": "gaussian",
            "device": "cpu",
        },
        plan_only=True,
    )
    lines = plan_lines(spec)
    header, count = lines[0], int(lines[-2].split()[0])
    assert count == 18  # (dense + sliding_window at 2 budgets) x 2 lengths x (prefill x 2 causals + decode)
    assert header.endswith(f"= {count} cells") and "3 series (2 variants; 1 of them once per error budget" in header
    assert "3 of the 4 combinations of settings planned" in header
    factors = [int(f.split()[0]) for f in header.split(" on ")[0].split(" x ")]
    assert math.prod(factors) * 3 // 4 == count  # the factors, with the skipped combinations, are the count


def test_the_dry_run_bounds_the_wall_time_by_the_per_cell_limits():
    from harness.runner import plan_lines

    cli = {"variants": "dense,linformer", "seq_lens": "256", "inputs": "gaussian", "device": "cpu"}
    spec = build_spec(cli={**cli, "error_budgets": "", "cell_timeout_s": "10", "fit_timeout_s": "100"}, plan_only=True)
    assert plan_lines(spec)[-1].startswith(
        "wall time: at most 2 min (2 cells x the 10 s --timeout, 1 of them + the 100 s --fit-timeout); "
        "at least 0.5 s of timing (--time-budget per cell and process)"
    )  # linformer calibrates: under its fit limit too
    three = build_spec(cli={**cli, "error_budgets": "", "cell_timeout_s": "10", "processes": "3"}, plan_only=True)
    assert plan_lines(three)[-1].startswith(
        "wall time: at most 11 min (2 cells x the 10 s --timeout, 2 of them in 3 processes, 1 of them + the 600 s "
        "--fit-timeout); at least 1.5 s of timing (--time-budget per cell and process); plus the machine's limits "
        "(cached a day), 2 process starts (--processes)"
    )  # each paired cell timed again in 2 later processes: 6 x 10 s + 600 s
    unbounded = build_spec(cli={**cli, "cell_timeout_s": "0"}, plan_only=True)
    assert "wall time: no upper bound" in plan_lines(unbounded)[-1]


def test_help_names_the_defaults_of_the_lists(capsys):
    for command in (["sweep", "--help"], ["model-eval", "--help"]):
        with pytest.raises(SystemExit):
            main(command)
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: cpu 256,512,1024,2048,4096,8192; cuda 1024," in text
    assert (
        "(default: cpu gaussian,llm; cuda gaussian)" in text and "(default: cpu prefill; cuda prefill,decode)" in text
    )
    assert "(default: 128,512)" in text and "(default: 256,1024)" in text


def test_sweep_help_lists_every_input_distribution_from_the_registry_and_the_model_form(capsys):
    from harness.inputs import get_inputs, list_inputs

    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # wrapped lines joined
    epilog = text.split("input distributions (--inputs NAME")[1]
    for name in list_inputs():
        assert f" {name}: {' '.join(get_inputs(name).doc.split())}" in epilog
    assert "Form: model:path=...,layer=0,text=..." in epilog


def test_the_help_describes_model_eval_as_taking_any_causal_lm_not_minilm_only(capsys):
    for command in ([], ["model-eval"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "any transformers causal LM" in text or "any causal LM transformers loads" in text
        assert "MiniLM encoder" in text
