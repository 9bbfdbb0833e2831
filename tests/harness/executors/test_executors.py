"""Executors without Ray or Slurm: the driver loop, usage errors, cross-executor resume, fitted state shared via the run folder."""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import subprocess
import sys

import pytest
import torch

from harness.commands import main
from harness.errors import UsageError
from harness.executors import Executor, executor_class, run_cells
from harness.executors.worker import CellJob, fitted_path, run_cell
from harness.measure import MeasureContext, MeasureSettings, RunInfo, outcome_row
from harness.plan import plan
from harness.runner import sweep_spec as build_spec
from harness.schema import Cell
from harness.store import read_rows
from tests.helpers.load import load_scaled

TINY = [
    "--device",
    "cpu",
    "--heads",
    "1",
    "--head-dims",
    "8",
    "--time-budget",
    "0.005",
    "--repeats",
    "1",
    "--error-rows",
    "8",
    "--calibration-steps",
    "3",
    "--quiet",
    "--inputs",
    "gaussian",
]
RUN = RunInfo(run_id="t", device_name="cpu", host="h", threads=1)


def _cell(variant: str, n: int) -> Cell:
    from variants import build_config

    return Cell(
        variant=variant,
        config=build_config(variant).to_dict(),
        seq_len=n,
        kv_len=n,
        batch=1,
        heads=1,
        head_dim=8,
        dtype="float32",
        device="cpu",
        causal=False,
        mode="forward",
        inputs="gaussian",
        seed=0,
    )


# ---- the driver loop, with a scripted executor ------------------------------------------------------
class ScriptedExecutor(Executor):
    """Finishes cells in submission order, `per_poll` at a time; the status per variant comes from `statuses`."""

    def __init__(self, slots: int | None, statuses: dict[str, str], per_poll: int = 1, pending: bool = False):
        self._slots, self.statuses, self.per_poll, self.pending = slots, statuses, per_poll, pending
        self.flight: list[Cell] = []
        self.max_flight = 0
        self.submissions: list[list[str]] = []
        self.cancelled: list[Cell] = []
        self.job = CellJob(settings={}, run=dataclasses.asdict(RUN))  # the run fields of a row the driver makes

    @property
    def slots(self):
        return self._slots

    @property
    def in_flight(self):
        return len(self.flight)

    def submit(self, cells):
        self.flight.extend(cells)
        self.submissions.append([f"{c.variant}@{c.seq_len}" for c in cells])
        self.max_flight = max(self.max_flight, len(self.flight))

    def poll(self, timeout):
        done, self.flight = self.flight[: self.per_poll], self.flight[self.per_poll :]
        return [(c, outcome_row(c, RUN, self.statuses.get(c.variant, "ok"), None)) for c in done]

    def queued(self):
        return self.flight[self.per_poll :] if self.pending else []

    def cancel_queued(self, cells):
        self.flight = [c for c in self.flight if c not in cells]
        self.cancelled += cells
        return cells


def _drive(executor: ScriptedExecutor, cells: list[Cell]) -> dict[str, tuple[str, bool]]:
    """Run the driver with the sweep's blocking rule; returns label -> (status, measured)."""
    blocked: dict[str, int] = {}
    rows: dict[str, tuple[str, bool]] = {}

    def skip(cell):
        at = blocked.get(cell.series_key)
        return None if at is None or cell.seq_len <= at else outcome_row(cell, RUN, "oom", f"not run: oom at N={at}")

    def on_row(cell, row, measured):
        key = f"{cell.variant}@{cell.seq_len}"
        assert key not in rows, f"{key} got two rows"
        rows[key] = (row["status"], measured)
        if measured and row["status"] == "oom":
            blocked[cell.series_key] = min(cell.seq_len, blocked.get(cell.series_key, cell.seq_len))

    run_cells(executor, cells, skip=skip, on_row=on_row)
    return rows


def test_driver_keeps_at_most_slots_cells_in_flight_and_gives_each_cell_one_row():
    cells = [_cell(v, n) for n in (16, 32, 64) for v in ("dense", "chunked")]
    executor = ScriptedExecutor(slots=2, statuses={})
    rows = _drive(executor, cells)
    assert executor.max_flight == 2
    assert sorted(rows) == sorted(f"{c.variant}@{c.seq_len}" for c in cells)
    assert all(status == "ok" and measured for status, measured in rows.values())


def test_oom_skips_longer_cells_pulled_later_and_cancels_queued_ones():
    cells = [_cell(v, n) for n in (16, 32, 64, 128) for v in ("dense", "chunked")]
    # slots=None: everything handed over at once (the Slurm array); the queued chunked cells past the OOM are cancelled.
    executor = ScriptedExecutor(slots=None, statuses={"chunked": "oom"}, pending=True)
    rows = _drive(executor, cells)
    assert executor.submissions == [[f"{c.variant}@{c.seq_len}" for c in cells]]  # one array
    assert rows["chunked@16"] == ("oom", True)
    for n in (32, 64, 128):
        assert rows[f"chunked@{n}"] == ("oom", False)  # "not run", never measured
        assert rows[f"dense@{n}"] == ("ok", True)
    assert sorted(f"{c.variant}@{c.seq_len}" for c in executor.cancelled) == ["chunked@128", "chunked@32", "chunked@64"]
    # One slot: the cells after the OOM are never submitted at all.
    executor = ScriptedExecutor(slots=1, statuses={"chunked": "oom"})
    rows = _drive(executor, cells)
    assert [s for s in executor.submissions if s[0].startswith("chunked")] == [["chunked@16"]]
    assert rows["chunked@64"] == ("oom", False)


# ---- usage errors: one line, exit 2, before any cell runs ------------------------------------------------
@pytest.mark.parametrize(
    "argv,match",
    [
        (
            ["--executor", "rya"],
            r"--executor: unknown executor 'rya'; expected one of local, subprocess, ray, slurm.*Did you mean 'ray'",
        ),
        (["--ray-address", "auto"], r"--ray-address: only applies to --executor ray, not --executor local"),
        (
            ["--executor", "ray", "--slurm-partition", "gpu"],
            r"--slurm-partition: only applies to --executor slurm, not --executor ray",
        ),
        (
            ["--executor", "subprocess", "--max-parallel", "4"],
            r"--max-parallel: only applies to --executor ray or --executor slurm",
        ),
        (["--executor", "ray", "--max-parallel", "0"], r"--max-parallel: must be >= 1, got 0"),
        (["--executor", "ray", "--cpus-per-cell", "two"], r"--cpus-per-cell: expected an integer, got 'two'"),
        (["--isolate", "--executor", "ray"], r"--isolate is --executor subprocess; it cannot go with --executor ray"),
        (
            ["--executor", "ray", "--device", "cuda:1"],
            r"--device: 'cuda:1' with --executor ray: ray gives each cell its own GPU; use --device cuda",
        ),
        (
            ["--executor", "slurm", "--slurm-cluster", "local", "--slurm-extra", "account"],
            r"--slurm-extra: 'account' is not key=value",
        ),
        (
            ["--executor", "slurm", "--slurm-cluster", "moon"],
            r"--slurm-cluster: unknown value 'moon'; expected one of slurm, local",
        ),
    ],
)
def test_bad_executor_input_exits_2_with_one_line(argv, match, capsys, tmp_path, monkeypatch):
    for name in ("ray", "slurm"):  # the same errors with or without the engines installed
        monkeypatch.setattr(executor_class(name), "package", None)
    assert main(["sweep", *TINY, "--variants", "dense", "--seq-lens", "16", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert re.search(match, err), err
    assert not any(tmp_path.iterdir())  # nothing ran, no run folder


def test_slurm_needs_an_explicit_device_and_sbatch(capsys, tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    assert main(["sweep", "--variants", "dense", "--executor", "slurm", "--out", str(tmp_path)]) == 2
    assert "--executor slurm: say which device the tasks use, --device cuda or --device cpu" in capsys.readouterr().err
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    assert main(["sweep", *TINY, "--variants", "dense", "--executor", "slurm", "--out", str(tmp_path)]) == 2
    assert "--executor slurm: no sbatch on PATH" in capsys.readouterr().err


@pytest.mark.parametrize(
    "executor,install", [("ray", "pip install 'attnsuite[ray]'"), ("slurm", "pip install 'attnsuite[slurm]'")]
)
def test_missing_engine_package_names_the_install_command(executor, install, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(executor_class(executor), "package", ("attnsuite_no_such_package", install))
    with pytest.raises(
        UsageError,
        match=re.escape(
            f"--executor {executor} needs the 'attnsuite_no_such_package' package, "
            f"which is not installed here; {install}"
        ),
    ):
        build_spec(cli={"device": "cpu", "variants": "dense", "executor": executor})
    assert main(["sweep", *TINY, "--variants", "dense", "--executor", executor, "--out", str(tmp_path)]) == 2
    assert install in capsys.readouterr().err
    # Planning needs no engine: --dry-run works without the package.
    assert (
        build_spec(cli={"device": "cpu", "variants": "dense", "executor": executor}, plan_only=True).executor
        == executor
    )


def test_executor_settings_round_trip_through_spec_toml(tmp_path):
    from harness.spec import spec_to_toml

    spec = build_spec(
        cli={
            "device": "cpu",
            "variants": "dense",
            "executor": "ray",
            "ray_address": "auto",
            "cpus_per_cell": "2",
            "max_parallel": "3",
        },
        plan_only=True,
    )
    path = tmp_path / "spec.toml"
    path.write_text(spec_to_toml(spec))
    again = build_spec(toml_path=path, plan_only=True, trust_config=True)
    options = again.executor_options
    assert (again.executor, options["ray_address"], options["cpus_per_cell"], options["max_parallel"]) == (
        "ray",
        "auto",
        2,
        3,
    )
    slurm = build_spec(
        cli={
            "device": "cpu",
            "variants": "dense",
            "executor": "slurm",
            "slurm_cluster": "local",
            "slurm_extra": ["account=proj,qos=high", "constraint=a100"],
        },
        plan_only=True,
    )  # as the repeated flag gives it
    assert slurm.executor_options["slurm_extra"] == ("account=proj", "qos=high", "constraint=a100")
    assert [c.cell_id for c in plan(again)] == [
        c.cell_id for c in plan(dataclasses.replace(spec, executor="local", executor_options={}))
    ]


# ---- resume across executors ------------------------------------------------------------------------------
@pytest.mark.slow
def test_resume_with_another_executor_runs_only_the_missing_cells(tmp_path, test_variants, no_report):
    from tests.helpers.sweep_fixtures import PLUGIN

    argv = [
        "sweep",
        *TINY,
        "--variants",
        "dense,t_raise",
        "--seq-lens",
        "16,32",
        "--plugin",
        str(PLUGIN),
        "--out",
        str(tmp_path),
        "--run-id",
        "r",
    ]
    assert main(argv) == 0
    run_dir = tmp_path / "r"
    lines = (run_dir / "rows.jsonl").read_text().splitlines()
    assert len(lines) == 4
    (run_dir / "rows.jsonl").write_text("\n".join(lines[:3]) + "\n")  # the first part: three cells
    assert main(["sweep", "--resume", str(run_dir), "--executor", "subprocess", "--trust-config", "--quiet"]) == 0
    after = read_rows(run_dir)
    assert [json.dumps(r, sort_keys=True) for r in after[:3]] == [
        json.dumps(json.loads(x), sort_keys=True) for x in lines[:3]
    ]
    assert len(after) == 4 and after[3]["cell_id"] == json.loads(lines[3])["cell_id"]  # only the missing cell ran
    assert sorted(r["cell_id"] for r in after) == sorted(json.loads(x)["cell_id"] for x in lines)
    statuses = {(r["variant"], r["seq_len"]): r["status"] for r in after}
    assert statuses == {("dense", 16): "ok", ("dense", 32): "ok", ("t_raise", 16): "error", ("t_raise", 32): "error"}
    # --resume still refuses flags that change what is measured, but not where it runs.
    assert main(["sweep", "--resume", str(run_dir), "--executor", "subprocess", "--seq-lens", "64"]) == 2


# ---- fitted state shared through the run folder ------------------------------------------------------------
def test_a_fit_is_stored_once_and_reused_by_a_fresh_process_context(tmp_path, test_variants, monkeypatch):
    calibrate_module = importlib.import_module("variants.calibrate")
    real, calls = calibrate_module.calibrate, []

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(calibrate_module, "calibrate", spy)
    settings = MeasureSettings(time_budget_s=0.005, repeats=1, error_rows=8, calibration_steps=5, calibration_batches=2)
    job = CellJob(settings=settings.to_dict(), run=dataclasses.asdict(RUN), run_dir=str(tmp_path))
    cell = _cell("t_learn", 32)
    first = run_cell(cell, job, MeasureContext())
    assert first["status"] == "ok" and len(calls) == 1
    from harness.measure import calibration_key

    stored = fitted_path(tmp_path, calibration_key(cell, settings))
    assert stored.is_file() and stored.with_suffix(".json").is_file()
    # Another process (a fresh context), the train-mode cell of the same series: loads the fit, does not calibrate.
    second = run_cell(dataclasses.replace(cell, mode="train"), job, MeasureContext())
    assert second["status"] == "ok" and len(calls) == 1
    assert second["calibration_s"] == first["calibration_s"] and second["calibration"] == first["calibration"]
    assert second["rel_l2_error"] == pytest.approx(first["rel_l2_error"], rel=1e-4)  # the same fitted gain
    assert first["rel_l2_error"] < 0.4  # fitted towards gain 1 (unfitted: 0.5)


def test_an_unreadable_stored_fit_is_fitted_again_with_a_warning(tmp_path, test_variants):
    from harness.measure import calibration_key

    settings = MeasureSettings(time_budget_s=0.005, repeats=1, error_rows=8, calibration_steps=5, calibration_batches=2)
    job = CellJob(settings=settings.to_dict(), run=dataclasses.asdict(RUN), run_dir=str(tmp_path))
    cell = _cell("t_learn", 32)
    assert run_cell(cell, job, MeasureContext())["status"] == "ok"
    fitted_path(tmp_path, calibration_key(cell, settings)).write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match="could not load the stored fit for t_learn .* fitting again"):
        row = run_cell(dataclasses.replace(cell, mode="train"), job, MeasureContext())
    assert row["status"] == "ok" and row["calibration"] is not None


def test_remote_job_rows_describe_the_worker_and_set_its_threads(tmp_path):
    settings = MeasureSettings(time_budget_s=0.005, repeats=1, error_rows=8)
    before = torch.get_num_threads()
    try:
        job = CellJob(settings=settings.to_dict(), run=dataclasses.asdict(RUN), remote=True, threads=1)
        row = run_cell(_cell("dense", 16), job, MeasureContext())
    finally:
        torch.set_num_threads(before)
    import socket

    assert row["status"] == "ok" and row["run_id"] == "t"
    assert row["host"] == socket.gethostname() and row["threads"] == 1 and row["device_name"] != "cpu"


@pytest.mark.slow
def test_torch_lazy_imports_happen_before_the_first_cells_clock_starts():
    # a deadline firing inside torch._dynamo's first import left sympy half-loaded for every later cell; a fresh
    # process, since this one imported torch._dynamo long ago
    settings = MeasureSettings(time_budget_s=0.005, repeats=1, error_rows=8).to_dict()
    script = f"""
import sys
import harness.executors.worker as worker
from harness.executors.worker import CellJob, run_cell

seen, measure_cell = [], worker.measure_cell
worker.measure_cell = lambda *a, **kw: seen.append("torch._dynamo" in sys.modules) or measure_cell(*a, **kw)
job = CellJob(settings={settings!r}, run={dataclasses.asdict(RUN)!r})
print(run_cell({dataclasses.asdict(_cell("dense", 16))!r}, job)["status"], seen)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=load_scaled(120))
    assert done.stdout.split() == ["ok", "[True]"], done.stderr[-2000:]


# ---- a run that spans several devices: the report names them ---------------------------------------------
@pytest.mark.slow
def test_report_of_a_run_over_two_gpus_has_a_devices_section_and_column(tmp_path):
    report = pytest.importorskip("harness.report")
    from tests.helpers.synthetic_run import make_rows, write_run

    rows = make_rows(variants=("dense", "chunked"), inputs=("gaussian",), with_failures=False)
    for i, row in enumerate(rows):
        row["device_name"], row["host"] = ("NVIDIA A100", "node1") if i % 2 else ("NVIDIA H100", "node2")
    run_dir = write_run(tmp_path / "mixed", rows)
    report.write_report(run_dir, maps=False)
    text = (run_dir / "report.md").read_text()
    assert "## Devices" in text and "| NVIDIA A100 | node1 |" in text and "| NVIDIA H100 | node2 |" in text
    assert (
        "| 1 - cosine | top-8 recall | uniform / zero error | fit error train / held-out | weights' grad error | reason | device |"
        in text
    )
    single = write_run(tmp_path / "single", make_rows(variants=("dense",), inputs=("gaussian",), with_failures=False))
    report.write_report(single, maps=False)
    assert "## Devices" not in (single / "report.md").read_text()


def test_an_unreachable_ray_address_is_one_line_not_a_hang(tmp_path, capsys):
    pytest.importorskip("ray")
    assert (
        main(
            [
                "sweep",
                *TINY,
                "--variants",
                "dense",
                "--seq-lens",
                "16",
                "--executor",
                "ray",
                "--ray-address",
                "127.0.0.1:1",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--ray-address 127.0.0.1:1: nothing answers there" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*/rows.jsonl"))  # the same --run-id can be used again


def test_a_local_ray_starts_its_workers_at_normal_priority_and_a_slow_start_is_one_line(tmp_path, capsys, monkeypatch):
    ray = pytest.importorskip("ray")

    started_with = {}

    def slow_start(**kwargs):  # what Ray raises when its node misses its fixed 30 s (seen at load 15 per CPU)
        started_with.update(kwargs)
        raise Exception("The current node timed out during startup. This could happen because some of the raylet ...")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", slow_start)
    argv = ["sweep", *TINY, "--variants", "dense", "--seq-lens", "16", "--executor", "ray", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        len(err.strip().splitlines()) == 1
        and "--executor ray: cannot start or reach Ray (Exception: The current" in err
    )
    assert "retry, or start it yourself (`ray start --head`) and pass --ray-address" in err
    assert started_with["_system_config"] == {"worker_niceness": 0}  # Ray's default 15 starves its workers under load


@pytest.mark.slow
def test_an_isolated_child_dies_with_its_killed_parent_and_leaves_no_temp_folder(tmp_path, test_variants):
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import REPO

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    argv = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        "--device",
        "cpu",
        "--plugin",
        test_variants,
        "--isolate",
        "--variants",
        "t_sleep:seconds=3600",  # it never ends by itself within the test: only the parent's death ends it
        "--seq-lens",
        "16",
        "--heads",
        "1",
        "--head-dims",
        "8",
        "--inputs",
        "gaussian",
        "--repeats",
        "1",
        "--error-rows",
        "8",
        "--quiet",
        "--out",
        str(tmp_path / "runs"),
        "--run-id",
        "orphan",
    ]
    parent = subprocess.Popen(
        argv, cwd=REPO, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def children() -> list[int]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
            except OSError:
                continue
            # the cell's temp folder, in its command line, is under the run folder (RUN_DIR/.cells)
            if str(tmp_path / "runs").encode() in cmdline and b"harness.child" in cmdline:
                found.append(int(pid))
        return found

    try:
        deadline = time.monotonic() + load_scaled(60)  # a fresh interpreter importing torch, on a busy machine too
        while time.monotonic() < deadline and not children():
            time.sleep(0.1)
        child = children()
        assert child and parent.poll() is None, "no isolated child appeared"
        time.sleep(2)  # the child is past its start-up and measuring (sleeping)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + load_scaled(20)
        cells = tmp_path / "runs" / "orphan" / ".cells"
        while time.monotonic() < deadline and (children() or list(tmp.iterdir()) or list(cells.iterdir())):
            time.sleep(0.1)
        assert children() == [] and list(tmp.iterdir()) == [] and list(cells.iterdir()) == []
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in children():
            os.kill(pid, signal.SIGKILL)


# ---- the subprocess executor: a child that dies is a row ----------------------------------------------------
@pytest.mark.parametrize(
    "returncode, status, words",
    [
        (-9, "oom", "killed by SIGKILL (most likely the kernel's out-of-memory killer)"),
        (-11, "error", "crashed with signal SIGSEGV"),
        (3, "error", "exited with code 3 and no row"),
    ],
)
def test_death_status_names_the_signal_and_calls_sigkill_oom(returncode, status, words):
    from harness.child import death_status

    got_status, reason = death_status(returncode, "line 1\nline 2\nFatal Python error: last words\n")
    assert got_status == status
    assert words in reason and reason.endswith("Fatal Python error: last words")


@pytest.mark.slow
def test_subprocess_children_that_die_give_oom_and_error_rows_and_the_series_stops(tmp_path, test_variants, no_report):
    """End to end through the subprocess executor's child: SIGKILL -> oom (longer N not run), SIGSEGV -> error."""
    from tests.helpers.sweep_fixtures import PLUGIN

    argv = [
        "sweep",
        *TINY,
        "--variants",
        "dense,t_sigkill,t_crash",
        "--seq-lens",
        "16,32",
        "--plugin",
        str(PLUGIN),
        "--executor",
        "subprocess",
        "--out",
        str(tmp_path),
        "--run-id",
        "iso",
    ]
    assert main(argv) == 0
    rows = {(r["variant"], r["seq_len"]): r for r in read_rows(tmp_path / "iso")}
    assert len(rows) == 6
    assert rows[("dense", 16)]["status"] == rows[("dense", 32)]["status"] == "ok"  # a row the child measured and wrote
    assert rows[("dense", 16)]["latency_s"] > 0 and rows[("dense", 16)]["rel_l2_error"] < 1e-5
    killed = rows[("t_sigkill", 16)]
    assert killed["status"] == "oom" and "killed by SIGKILL" in killed["reason"]
    assert rows[("t_sigkill", 32)]["status"] == "oom"
    assert rows[("t_sigkill", 32)]["reason"] == "not run: oom at N=16 for the same variant, config and setting"
    for n in (16, 32):  # an error does not stop the series: each length crashed by itself
        assert (
            rows[("t_crash", n)]["status"] == "error"
            and "crashed with signal SIGSEGV" in rows[("t_crash", n)]["reason"]
        )
