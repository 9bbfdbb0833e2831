#!/usr/bin/env python3
"""Run a command beside a controlled CPU load: K busy processes per usable CPU, bounded in time.

How this project checks that its tests and its sweep behave on a shared machine (issues 27 and 29: the suite must
pass, and a sweep must answer as on a quiet machine or refuse with the reason). The busy processes spin in pure
Python at normal priority, like a neighbour's job; they stop when the command ends, when --seconds pass, on
Ctrl-C or on SIGTERM, whichever comes first, so the load never outlives the check.

    python scripts/busy_load.py --per-cpu 8 --seconds 3600 -- .venv/bin/python -m pytest -q
    python scripts/busy_load.py --per-cpu 8 --seconds 600          # the load alone, for 10 minutes

Prints the load average before and after and the command's wall time; exits with the command's status (0 with no
command). Standard library only.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import time


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _spin(until: float) -> None:
    """Burn one CPU until the monotonic clock passes `until` (monotonic is system-wide on Linux and macOS)."""
    x = 0
    while time.monotonic() < until:
        for _ in range(10_000):
            x = (x * 31 + 7) % 1_000_003


def start_load(processes: int, seconds: float) -> list[multiprocessing.Process]:
    """Start `processes` spinners that stop by themselves after `seconds`."""
    until = time.monotonic() + seconds
    spawn = multiprocessing.get_context("spawn")  # direct children on every platform (no forkserver in between)
    spinners = [spawn.Process(target=_spin, args=(until,), daemon=True) for _ in range(processes)]
    for p in spinners:
        p.start()
    return spinners


def stop_load(spinners: list[multiprocessing.Process]) -> None:
    for p in spinners:
        p.terminate()
    for p in spinners:
        p.join(timeout=5)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-cpu", type=int, default=8, help="busy processes per usable CPU (default: %(default)s)")
    parser.add_argument(
        "--seconds", type=float, default=3600.0, help="the load stops after this long (default: %(default)s)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run under the load")
    args = parser.parse_args(argv)
    if args.per_cpu < 1 or args.seconds <= 0:
        parser.error(f"--per-cpu must be >= 1 and --seconds > 0 (got {args.per_cpu} and {args.seconds})")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    cpus = usable_cpus()
    n = args.per_cpu * cpus
    print(f"[busy_load] load average before: {os.getloadavg()[0]:.1f} on {cpus} CPUs", flush=True)
    print(
        f"[busy_load] starting {n} busy processes ({args.per_cpu} per CPU) for at most {args.seconds:.0f}s", flush=True
    )
    signal.signal(signal.SIGTERM, _terminated)  # `kill` stops the spinners too (the finally below)
    spinners = start_load(n, args.seconds)
    start, status = time.monotonic(), 0
    try:
        if command:
            status = subprocess.run(command, check=False).returncode
        else:
            time.sleep(args.seconds)
    except KeyboardInterrupt:
        status = 130
    finally:
        load = os.getloadavg()
        stop_load(spinners)
    wall = time.monotonic() - start
    print(
        f"[busy_load] load average at the end (1, 5, 15 min): {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}", flush=True
    )
    if command:
        print(f"[busy_load] command exited {status} after {wall:.0f}s: {' '.join(command)}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
