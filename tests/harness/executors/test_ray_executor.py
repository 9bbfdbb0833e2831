"""`--executor ray` on a local Ray instance with two CPU workers: same rows as local, a killed worker, a hung task, a killed driver.

One Ray instance for the module (the executor joins it instead of starting its own); after the
module no Ray process it started may remain.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.xdist_group("ray")  # under xdist one worker runs them all: one Ray instance for the module

from harness.commands import main  # noqa: E402
from harness.executors.ray_executor import LOCAL_RAY_SYSTEM_CONFIG  # noqa: E402
from harness.plan import plan  # noqa: E402
from harness.runner import run_sweep  # noqa: E402
from harness.runner import sweep_spec as build_spec  # noqa: E402
from harness.store import read_rows  # noqa: E402
from tests.helpers import REPO as ROOT  # noqa: E402
from tests.helpers.load import load_scaled  # noqa: E402

TINY = {
    "device": "cpu",
    "heads": "1",
    "head_dims": "8",
    "time_budget_s": "0.005",
    "repeats": "1",
    "error_rows": "8",
    "calibration_steps": "3",
    "inputs": "gaussian",
    "causals": "false",  # linformer refuses causal cells: non-causal, it is matched to the budgets (unreachable)
}
# Test-only variants the Ray workers must import from the plugin file, as the driver does.
KILLERS = textwrap.dedent('''
    import os, signal, time
    from dataclasses import dataclass
    from variants import AttentionVariant, VariantConfig, register_variant
    from variants.reference import reference_attention

    NAMES = ("t_kill", "t_hang")

    @dataclass(frozen=True, kw_only=True)
    class KillConfig(VariantConfig):
        kill_at: int = 32  # N at which the call SIGKILLs its own process

    @register_variant("t_kill", config=KillConfig)
    class KillAttention(AttentionVariant):
        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            if q.shape[2] == self.config.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return reference_attention(q, k, v, causal=causal, dtype=None)

    @register_variant("t_hang")
    class HangAttention(AttentionVariant):
        """Blocks SIGALRM (the worker's own deadline) and sleeps: only the driver's hard limit ends it."""
        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(3600)  # past any hard limit, however the load stretched it
            return q
''')


def _ray_pids() -> set[int]:
    """Processes of Ray's own (raylet, gcs_server, ray:: workers) that descend from this test process: another Ray on
    the machine (a neighbour's tests, a user's cluster) is not this fixture's to account for."""
    parents, names = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                names[int(entry)] = Path(f"/proc/{entry}/comm").read_text().strip()
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])  # the field after the state: ppid
    mine = os.getpid()

    def descends(pid: int) -> bool:
        seen = set()
        while pid > 1 and pid not in seen:
            seen.add(pid)
            pid = parents.get(pid, 0)
            if pid == mine:
                return True
        return False

    return {pid for pid, comm in names.items() if _is_ray(comm) and descends(pid)}


def _is_ray(comm: str) -> bool:
    return comm in ("raylet", "gcs_server") or comm.startswith("ray::")


START_ATTEMPTS = 3  # Ray gives its local node a fixed 30 s to start; at load 15 per CPU it took 66-68 s


def _start_ray() -> None:
    """ray.init, tried again when Ray's own start-up clock runs out; on a loaded machine that is a skip with the
    reason (Ray's fixed limit, not the executor's behaviour), on a quiet one the failure it is."""
    from harness.measure.noise import HIGH_LOAD_PER_CPU, load_per_cpu

    for _ in range(START_ATTEMPTS):
        try:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                logging_level="WARNING",
                _system_config=LOCAL_RAY_SYSTEM_CONFIG,  # as the executor starts its own
            )
            return
        except Exception as exc:  # Ray raises a bare Exception when its node misses its start-up time
            ray.shutdown()
            if "timed out during startup" not in str(exc):
                raise
            failure = exc
    load = load_per_cpu() or 0.0
    if load < HIGH_LOAD_PER_CPU:
        raise failure
    pytest.skip(f"Ray's local node did not start in its fixed 30 s, {START_ATTEMPTS} times, at load {load:.1f} per CPU")


@pytest.fixture(scope="module")
def ray_cluster():
    _start_ray()
    yield ray.get_runtime_context().gcs_address
    ours = _ray_pids()  # while the cluster runs, every process of it descends from this one (later orphans too)
    ray.shutdown()
    deadline = time.monotonic() + load_scaled(15)
    while _alive(ours) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(ours), f"Ray processes left behind: {_alive(ours)}"


def _alive(pids: set[int]) -> set[int]:
    """Those of `pids` still running as a Ray process (a reused pid of another program does not count)."""
    alive = set()
    for pid in pids:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if _is_ray(comm):
            alive.add(pid)
    return alive


@pytest.fixture
def plugins(tmp_path):
    """The sweep's test variants and the killers, registered here and loadable by path in the workers."""
    from tests.helpers.sweep_fixtures import PLUGIN, load_test_variants
    from variants import _registry, load_plugin

    killers = tmp_path / "ray_killers.py"
    killers.write_text(KILLERS)
    unload = load_test_variants()
    name = load_plugin(str(killers))
    yield [str(PLUGIN), str(killers)]
    unload()
    for variant in sys.modules[name].NAMES:
        _registry._REGISTRY.pop(variant, None)
    sys.modules.pop(name, None)


def _statuses(run_dir: Path) -> dict[str, str]:
    rows = read_rows(run_dir)
    assert len({r["cell_id"] for r in rows}) == len(rows), "a cell has two rows"
    return {r["cell_id"]: r["status"] for r in rows}


@pytest.mark.slow
def test_ray_yields_the_same_cells_and_statuses_as_local(tmp_path, ray_cluster, plugins, no_report):
    cli = {
        **TINY,
        "variants": "dense,t_raise,t_nan,t_oom:oom_from=64,linformer",
        "seq_lens": "32,64,128",
        "plugins": plugins,
    }
    local = run_sweep(build_spec(cli=cli), out=tmp_path, run_id="local")
    spec = build_spec(cli={**cli, "executor": "ray", "max_parallel": "2"})
    remote = run_sweep(spec, out=tmp_path, run_id="ray")
    assert _statuses(remote) == _statuses(local)
    assert set(_statuses(local)) == {c.cell_id for c in plan(spec)}
    assert sorted(set(_statuses(local).values())) == [
        "error",
        "nonfinite",
        "ok",
        "oom",
        "unreachable",
    ]  # linformer matched to the budgets
    rows = read_rows(remote)
    assert {r["threads"] for r in rows if r["reason"] is None or not r["reason"].startswith("not run")} == {
        1
    }  # cpus_per_cell
    assert any((remote / "fitted").glob("*.pt"))  # linformer's fits, stored for other workers


@pytest.mark.slow
def test_a_killed_worker_is_an_error_row_for_its_cell_only(tmp_path, ray_cluster, plugins, no_report):
    cli = {**TINY, "variants": "t_kill:kill_at=32,dense", "seq_lens": "16,32,64", "plugins": plugins, "executor": "ray"}
    run_dir = run_sweep(build_spec(cli=cli), out=tmp_path, run_id="kill")
    rows = {(r["variant"], r["seq_len"]): r for r in read_rows(run_dir)}
    assert len(rows) == 6
    killed = rows[("t_kill", 32)]
    assert killed["status"] == "error" and "the Ray worker running this cell died" in killed["reason"]
    others = [r["status"] for key, r in rows.items() if key != ("t_kill", 32)]
    assert others == ["ok"] * 5


@pytest.mark.slow
def test_a_hung_task_is_cancelled_and_becomes_a_timeout_row(tmp_path, ray_cluster, plugins, no_report, monkeypatch):
    executors = __import__("harness.executors.base", fromlist=["STARTUP_SLACK_S"])
    monkeypatch.setattr(executors, "STARTUP_SLACK_S", 2.0)  # hard limit = (limit + 1 s) * 1.5 + 2 s (26 s when quiet)
    # 15 s per cell, stretched by the load at the start: the dense cell (build, check, profile, time) took over 21 s
    # at a load of 5 per CPU that rose after the limit was set
    cli = {
        **TINY,
        "variants": "t_hang,dense",
        "seq_lens": "16",
        "plugins": plugins,
        "executor": "ray",
        "cell_timeout_s": f"{load_scaled(15):.0f}",
        "fit_timeout_s": "1",  # neither variant calibrates; the hard limit adds the fit limit (600 s by default)
    }
    start, bound = time.monotonic(), load_scaled(90)  # the hard limit, the dense cell and Ray's start, stretched
    run_dir = run_sweep(build_spec(cli=cli), out=tmp_path, run_id="hang")
    bound = max(bound, load_scaled(90))  # the load before or after the sweep, whichever is higher (another worker's)
    assert time.monotonic() - start < bound  # the hour-long hang was cancelled at its hard limit, not slept out
    rows = {r["variant"]: r for r in read_rows(run_dir)}
    assert rows["t_hang"]["status"] == "timeout" and "ray.cancel(force=True)" in rows["t_hang"]["reason"]
    assert rows["dense"]["status"] == "ok"


@pytest.mark.slow
def test_killed_driver_resumes_with_only_the_missing_cells(tmp_path, ray_cluster, plugins, no_report):
    from tests.helpers.sweep_fixtures import PLUGIN

    argv = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        "--executor",
        "ray",
        "--ray-address",
        ray_cluster,
        "--device",
        "cpu",
        "--plugin",
        str(PLUGIN),
        "--variants",
        "t_sleep:seconds=0.1,dense",
        "--seq-lens",
        "16,32,64,128,256,512",
        "--heads",
        "1",
        "--head-dims",
        "8",
        "--time-budget",
        "0.01",
        "--repeats",
        "1",
        "--error-rows",
        "8",
        "--inputs",
        "gaussian",  # one distribution: 12 cells, enough to kill the sweep after 3 and resume the rest
        "--quiet",
        "--out",
        str(tmp_path),
        "--run-id",
        "killed",
    ]
    run_dir = tmp_path / "killed"
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + load_scaled(60)
        while time.monotonic() < deadline and child.poll() is None and len(read_rows(run_dir)) < 3:
            time.sleep(0.05)
        assert child.poll() is None, f"the sweep finished or died before it could be killed: {child.stderr.read()}"
        child.kill()
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    before = read_rows(run_dir)
    planned = {c.cell_id for c in plan(build_spec(toml_path=run_dir / "spec.toml", trust_config=True))}
    assert 3 <= len(before) < len(planned)
    assert main(["sweep", "--resume", str(run_dir), "--ray-address", ray_cluster, "--trust-config", "--quiet"]) == 0
    after = read_rows(run_dir)
    assert sorted(r["cell_id"] for r in after) == sorted(planned)  # none lost, none twice
    assert [r["cell_id"] for r in after[: len(before)]] == [r["cell_id"] for r in before]  # nothing rewritten
    assert all(r["status"] == "ok" for r in after), [(r["variant"], r["status"], r["reason"]) for r in after]
