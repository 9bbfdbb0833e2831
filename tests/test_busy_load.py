"""scripts/busy_load.py, the controlled load the suite and the sweep are checked under: it loads the machine while the
command runs, returns the command's status, and leaves no busy process behind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.serial  # its spinners load every CPU: under xdist nothing else runs beside them
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "busy_load.py"


def _spinners_probe(wait_s: float) -> str:
    """Code for a probe command: after wait_s, exit with the number of live spinners busy_load has started."""
    return (
        f"import os, sys, time; time.sleep({wait_s}); "
        "rows = [r.split(None, 3) for r in os.popen('ps -ww -e -o pid=,ppid=,stat=,args=').read().splitlines()]; "
        "sys.exit(sum(1 for r in rows if len(r) == 4 and r[0] != str(os.getpid()) and r[1] == str(os.getppid()) "
        "and not r[2].startswith('Z') and 'spawn_main' in r[3]))"
    )


def _run(seconds: float, probe: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--per-cpu", "1", "--seconds", str(seconds), "--", sys.executable, "-c", probe],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_runs_beside_busy_processes_and_its_status_is_returned():
    result = _run(60, _spinners_probe(wait_s=1.0))
    assert result.returncode >= 1, result.stdout + result.stderr  # at least one spinner (one per CPU)
    assert f"command exited {result.returncode}" in result.stdout


@pytest.mark.slow
def test_spinners_stop_by_themselves_when_their_time_is_up():
    result = _run(0.5, _spinners_probe(wait_s=4.0))
    assert result.returncode == 0, result.stdout + result.stderr  # none left


def test_bad_arguments_are_refused_with_the_values_given():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--per-cpu", "0"], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "got 0" in result.stderr


def _live_children(pid: int) -> list[int]:
    rows = [
        r.split()
        for r in subprocess.run(
            ["ps", "-e", "-o", "pid=,ppid=,stat="], capture_output=True, text=True, check=False
        ).stdout.splitlines()
    ]
    return [int(r[0]) for r in rows if len(r) == 3 and r[1] == str(pid) and not r[2].startswith("Z")]


def test_a_terminated_load_takes_its_spinners_with_it():
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--per-cpu", "1", "--seconds", "120"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert "starting" in proc.stdout.readline() + proc.stdout.readline()
        deadline = time.monotonic() + 60
        while not (spinners := _live_children(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert spinners, "no spinner started"
        proc.terminate()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    time.sleep(1.0)
    alive = [
        p
        for p in spinners
        if subprocess.run(
            ["ps", "-p", str(p), "-o", "stat="], capture_output=True, text=True, check=False
        ).stdout.strip()[:1]
        not in ("", "Z")
    ]
    assert not alive, f"spinners {alive} outlived a terminated busy_load"
