"""Do a run's intervals hold the next run? K back-to-back pairs of the same sweep, each pair judged (issue 44).

For each pair (run A, then run B, the same command) it prints, as soon as the pair is done:
- the share of paired cells whose run-B speed-up (a variant's over dense, or dense's over the reference kernel) lies
  inside run A's 95% interval: about 95% when the intervals mean what they say;
- `python -m harness compare A B --fail-on-regression`'s exit code and its regressions (none is right: same code);
- compare's noise floor: the smallest change it counts (harness.report.verdicts.NoiseFloor.limit).
Then a summary line over the K pairs. Run it on a quiet machine (stop other jobs; `uptime`).

    python scripts/repro_check.py                 # 5 pairs of the issue's sweep (about 30 s a run on 2 cores)
    python scripts/repro_check.py 1 -- --variants dense,chunked --seq-lens 512 --inputs gaussian --error-budgets ''
    python scripts/repro_check.py 3 --out /tmp/rc  # keep the run folders there (default: a new temporary folder)

Sweep arguments after `--` replace the default ones (`--out`, `--run-id` and `--quiet` are added here).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.report.analysed import analyse  # noqa: E402 - after the repo is on the path
from harness.report.compare import compare_runs  # noqa: E402
from harness.report.verdicts import DEFAULT_THRESHOLD  # noqa: E402

SWEEP = [
    "--variants",
    "dense,sliding_window,chunked",
    "--seq-lens",
    "1024,2048,4096",
    "--inputs",
    "gaussian",
    "--error-budgets",
    "",
]
PAIRED = ("speedup", "reference_speedup")  # the in-cell ratios whose intervals are checked


def main(argv: list[str]) -> int:
    own, sweep = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, SWEEP)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="?", type=int, default=5, help="back-to-back pairs of runs (default 5)")
    parser.add_argument("--out", default=None, help="folder for the runs (default: a new temporary folder)")
    args = parser.parse_args(own)
    if args.pairs < 1:
        parser.error(f"pairs {args.pairs}: give at least 1")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="repro_check_"))
    say(f"{args.pairs} pair(s) of: python -m harness sweep {' '.join(repr(a) if not a else a for a in sweep)}")
    say(f"run folders under {out}")
    results = [check_pair(k, sweep, out) for k in range(1, args.pairs + 1)]
    inside = sum(r[0] for r in results)
    cells = sum(r[1] for r in results)
    flagged = sum(r[2] != 0 for r in results)
    floors = [r[3] for r in results]
    say(
        f"summary: B inside A's interval in {inside} of {cells} cells ({inside / max(cells, 1):.0%}); compare flagged "
        f"{flagged} of {len(results)} pairs; noise floor median {statistics.median(floors):.0%}, max {max(floors):.0%}"
    )
    return 0


def check_pair(k: int, sweep: list[str], out: Path) -> tuple[int, int, int, float]:
    """Run pair k and print its line: (cells inside, cells checked, compare's exit code, noise floor)."""
    a, b = (run_sweep(sweep, out, f"pair{k}{side}") for side in ("a", "b"))
    comparison = compare_runs(analyse(a), analyse(b))
    inside, checked, missed = coverage(comparison.cells)
    code = subprocess.run(
        [sys.executable, "-m", "harness", "compare", str(a), str(b), "--fail-on-regression", "--out", str(b / "cmp")],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).returncode
    floor = math.expm1(comparison.floor.limit(DEFAULT_THRESHOLD))
    regressions = ", ".join(f"{r['variant']} N={r['seq_len']}" for _, r in comparison.regressions.iterrows())
    say(
        f"pair {k}: B inside A's interval {inside}/{checked}"
        + (f" (outside: {'; '.join(missed)})" if missed else "")
        + f"; compare exit {code}, {len(comparison.regressions)} regression(s)"
        + (f" ({regressions})" if regressions else "")
        + f"; noise floor {floor:.0%} (drift {comparison.floor.drift:.2f}, {comparison.floor.cells} cells)"
    )
    return inside, checked, code, floor


def run_sweep(sweep: list[str], out: Path, run_id: str) -> Path:
    """One sweep into out/run_id; its folder. A failed sweep stops the check with its output."""
    command = [sys.executable, "-m", "harness", "sweep", *sweep, "--out", str(out), "--run-id", run_id, "--quiet"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"sweep {run_id} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return out / run_id


def coverage(cells) -> tuple[int, int, list[str]]:
    """(cells whose B ratio is inside A's interval, cells with both, and 'variant N: B x.xx vs [lo-hi]' for each one
    outside)."""
    inside, checked, missed = 0, 0, []
    for _, r in cells.iterrows():
        for name in PAIRED:
            value, low, high = r.get(f"{name}_b"), r.get(f"{name}_low_a"), r.get(f"{name}_high_a")
            if not all(isinstance(x, float) and math.isfinite(x) for x in (value, low, high)):
                continue
            checked += 1
            if low <= value <= high:
                inside += 1
            else:
                missed.append(f"{r['variant']} N={r['seq_len']}: {value:.2f} vs [{low:.2f}-{high:.2f}]")
    return inside, checked, missed


def say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
