"""`--executor slurm`: submitit's local mode runs the same cells as local; the sbatch array it would submit on a cluster."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

submitit = pytest.importorskip("submitit")

from harness.plan import plan  # noqa: E402
from harness.runner import run_sweep  # noqa: E402
from harness.runner import sweep_spec as build_spec  # noqa: E402
from harness.store import read_rows  # noqa: E402

TINY = {
    "device": "cpu",
    "heads": "1",
    "head_dims": "8",
    "time_budget_s": "0.005",
    "repeats": "1",
    "error_rows": "8",
    "calibration_steps": "3",
    "inputs": "gaussian",
}


def _statuses(run_dir: Path) -> dict[str, str]:
    rows = read_rows(run_dir)
    assert len({r["cell_id"] for r in rows}) == len(rows), "a cell has two rows"
    return {r["cell_id"]: r["status"] for r in rows}


@pytest.mark.slow
def test_submitit_local_mode_yields_the_same_cells_and_statuses_as_local(tmp_path, test_variants, no_report):
    cli = {**TINY, "variants": "dense,t_raise,t_crash,linformer", "seq_lens": "32", "plugins": [test_variants]}
    local_cli = {**cli, "variants": "dense,t_raise,linformer"}  # t_crash would take the driver down with it
    local = run_sweep(build_spec(cli=local_cli), out=tmp_path, run_id="local")
    spec = build_spec(cli={**cli, "executor": "slurm", "slurm_cluster": "local", "max_parallel": "4"})
    remote = run_sweep(spec, out=tmp_path, run_id="slurm")
    rows = read_rows(remote)
    [crashed] = [r for r in rows if r["variant"] == "t_crash"]
    assert crashed["status"] == "error" and "without a row" in crashed["reason"]
    assert {r["cell_id"]: r["status"] for r in rows if r is not crashed} == _statuses(
        local
    )  # linformer: a row per budget
    assert {r["cell_id"] for r in read_rows(remote)} == {c.cell_id for c in plan(spec)}
    assert (remote / "slurm").is_dir() and any(
        (remote / "slurm").glob("*_log.out")
    )  # submitit's files in the run folder


def _fake_slurm(bin_dir: Path) -> Path:
    """srun/scancel that do nothing and an sbatch that keeps its script and answers with a job id."""
    bin_dir.mkdir()
    log = bin_dir / "sbatch_script.sh"
    scripts = {
        "sbatch": f'#!/bin/sh\nfor a in "$@"; do last="$a"; done\ncp "$last" {log}\necho "Submitted batch job 4242"\n',
        "srun": "#!/bin/sh\nexit 0\n",
        "scancel": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return log


def test_slurm_flags_become_one_sbatch_job_array(tmp_path, monkeypatch, test_variants):
    from harness.executors import make_executor
    from harness.executors.worker import CellJob

    log = _fake_slurm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    spec = build_spec(
        cli={
            **TINY,
            "variants": "dense",
            "seq_lens": "16,32,64",
            "executor": "slurm",
            "slurm_partition": "gpu",
            "slurm_time_min": "30",
            "cpus_per_cell": "4",
            "max_parallel": "2",
            "slurm_extra": "account=proj,qos=high",
            "cell_timeout_s": "60",
        }
    )
    job = CellJob(settings={}, run={"run_id": "r1"}, run_dir=str(tmp_path))
    with make_executor(spec, job) as executor:
        assert executor.slots is None  # the whole array at once; Slurm bounds the concurrency
        executor.submit(plan(spec))
        assert executor.in_flight == 3
    script = log.read_text()
    for line in (
        "#SBATCH --array=0-2%2",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=30",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --account=proj",
        "#SBATCH --qos=high",
        "#SBATCH --job-name=attnsuite-r1",
    ):
        assert line in script, (line, script)
    assert "--gpus-per-node" not in script  # a CPU sweep asks for no GPU
    cuda = build_spec(
        cli={**TINY, "device": "cuda", "dtypes": "float32", "variants": "dense", "seq_lens": "16", "executor": "slurm"}
    )
    cells = plan(cuda)
    assert len(cells) == 5  # causal x modes, plus the GPU default's one decode cell (forward, causal)
    with make_executor(cuda, job) as executor:
        executor.submit(cells)
    assert (
        "#SBATCH --gpus-per-node=1" in log.read_text() and "#SBATCH --array=0-4%5" in log.read_text()
    )  # no cap: all 5 at once


def test_default_time_limit_covers_the_cell_limit():
    from harness.executors.slurm_executor import DEFAULT_TIME_MIN, default_time_min

    assert default_time_min(None) == DEFAULT_TIME_MIN
    assert default_time_min(300.0) == 10  # ceil((300 * 1.5 + 60) / 60) + 1
    assert default_time_min(300.0, 600.0) == 25  # a calibration's own limit too: ceil((900 * 1.5 + 60) / 60) + 1
