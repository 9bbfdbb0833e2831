#!/usr/bin/env python3
"""Mutation check: plant known bugs in a scratch copy of the repo and confirm the tests catch each one.

Reads scripts/mutations.toml (a list of [[mutation]] tables, see its header), copies the repository
once (tracked and untracked-but-not-ignored files, minus results/ and .venv/) to a temporary folder,
then for each mutation: replaces its `find` text (which must occur exactly once) by `replace`, runs
`python -m pytest -x -q -p no:cacheprovider -m '' TARGETS` there with PYTHONPATH set to the copy, records
killed (tests failed), survived (tests passed), error (pytest could not run them: exit 2-5) or
timeout, and restores the file. The targets are first run once without any mutation: a target that
already fails would make every mutation look killed.

Not run by CI (it takes minutes). Standard library only.

    python scripts/mutation_check.py                  # every mutation
    python scripts/mutation_check.py --list           # ids, files and why, nothing run
    python scripts/mutation_check.py --only chunked-bf16-running-sums,dense-sdpa-causal-dropped

Exit status: 0 when every mutation run was killed; 1 when one survived, errored or timed out;
2 for a usage error or a mutation file that is invalid (a `find` text missing or ambiguous, a
duplicate id, a missing field), with every problem listed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib  # Python >= 3.11
except ModuleNotFoundError:  # Python 3.10: the same parser, as the project's tomli dependency
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "scripts" / "mutations.toml"
EXCLUDED_TOP_LEVEL = {"results", ".venv"}  # never copied: results are data, the venv is not ours to copy
DEFAULT_TIMEOUT_S = 300.0
REQUIRED = {"id": str, "file": str, "find": str, "replace": str, "why": str, "targets": list}


@dataclass(frozen=True)
class Mutation:
    id: str  # unique name, used by --only
    file: str  # path relative to the repo root
    find: str  # exact text; must occur exactly once in file
    replace: str  # what it becomes
    why: str  # one line: the product bug this stands for
    targets: tuple[str, ...]  # pytest paths or node ids that must fail under it
    timeout_s: float = DEFAULT_TIMEOUT_S  # per-mutation limit for the pytest run


@dataclass
class Outcome:
    mutation: Mutation
    status: str  # killed | survived | error | timeout
    seconds: float
    tail: str = field(default="", repr=False)  # last lines of pytest's output (shown for non-kills)


class ConfigError(Exception):
    """The mutation file is unusable; the message lists every problem."""


def load_mutations(path: Path, repo: Path) -> list[Mutation]:
    """Parse and validate the mutation file against the files in `repo`; raise ConfigError listing all problems."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    default_timeout = float(data.get("timeout_s", DEFAULT_TIMEOUT_S))
    entries = data.get("mutation", [])
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path} has no [[mutation]] tables")
    problems, mutations, seen = [], [], set()
    for i, entry in enumerate(entries):
        label = f"mutation #{i + 1} ({entry.get('id', 'no id')!s})"
        bad = [f"{key} (a {kind.__name__})" for key, kind in REQUIRED.items() if not isinstance(entry.get(key), kind)]
        unknown = sorted(set(entry) - set(REQUIRED) - {"timeout_s"})
        if bad:
            problems.append(f"{label}: missing or mistyped field(s): {', '.join(bad)}")
            continue
        if unknown:
            problems.append(f"{label}: unknown field(s) {', '.join(unknown)}; known: {', '.join(REQUIRED)}, timeout_s")
        if entry["id"] in seen:
            problems.append(f"{label}: duplicate id {entry['id']!r}")
        seen.add(entry["id"])
        if not entry["targets"] or not all(isinstance(t, str) and t for t in entry["targets"]):
            problems.append(f"{label}: targets must be a non-empty list of pytest paths or node ids")
        if entry["find"] == entry["replace"]:
            problems.append(f"{label}: replace equals find, so nothing would change")
        target = repo / entry["file"]
        if not target.is_file():
            problems.append(f"{label}: file {entry['file']!r} does not exist under {repo}")
        else:
            count = target.read_text().count(entry["find"])
            if count != 1:
                what = "does not occur" if count == 0 else f"occurs {count} times (ambiguous)"
                problems.append(
                    f"{label}: its find text {what} in {entry['file']}; it must occur exactly once: "
                    f"{_one_line(entry['find'])!r}"
                )
        mutations.append(
            Mutation(
                entry["id"],
                entry["file"],
                entry["find"],
                entry["replace"],
                entry["why"],
                tuple(entry["targets"]),
                float(entry.get("timeout_s", default_timeout)),
            )
        )
    if problems:
        raise ConfigError(f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return mutations


def copy_repo(repo: Path, dest: Path) -> int:
    """Copy tracked and untracked-not-ignored files of `repo` (minus EXCLUDED_TOP_LEVEL) to dest; return the count."""
    listed = (
        subprocess.run(
            ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    copied = 0
    for rel in dict.fromkeys(filter(None, listed)):
        if rel.split("/", 1)[0] in EXCLUDED_TOP_LEVEL:
            continue
        src = repo / rel
        if not src.is_file():  # deleted in the work tree but still in the index
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
        copied += 1
    return copied


def pytest_command(python: str, targets: tuple[str, ...], *, stop_first: bool = True) -> list[str]:
    """The pytest command line for `targets`: every target runs, `slow`-marked ones too (`-m ""` lifts the
    default `-m "not slow"` of pyproject's addopts)."""
    return [python, "-m", "pytest", *(["-x"] if stop_first else []), "-q", "-p", "no:cacheprovider", "-m", "", *targets]


def run_pytest(
    python: str, scratch: Path, targets: tuple[str, ...], timeout_s: float, *, stop_first: bool = True
) -> tuple[str, float, str]:
    """Run pytest on targets in the scratch copy: (status, seconds, output tail); status as in Outcome."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(scratch), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        PYTHONDONTWRITEBYTECODE="1",
    )
    cmd = pytest_command(python, targets, stop_first=stop_first)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return "timeout", time.perf_counter() - start, _tail(out)
    seconds = time.perf_counter() - start
    status = {0: "survived", 1: "killed"}.get(proc.returncode, "error")
    return (
        status,
        seconds,
        _tail(proc.stdout + proc.stderr) + ("" if status != "error" else f"\n(pytest exit {proc.returncode})"),
    )


def check(mutations: list[Mutation], python: str, *, baseline: bool = True, verbose: bool = False) -> list[Outcome]:
    """Apply each mutation in one scratch copy, run its targets, restore; return the outcomes."""
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="attnsuite-mutants-") as tmp:
        scratch = Path(tmp)
        n = copy_repo(REPO, scratch)
        print(f"scratch copy: {n} files in {scratch}", flush=True)
        if baseline:
            targets = tuple(dict.fromkeys(t for m in mutations for t in m.targets))
            status, seconds, tail = run_pytest(
                python, scratch, targets, max(m.timeout_s for m in mutations) * 2, stop_first=False
            )
            if status != "survived":  # unmutated, the targets must pass
                print(f"baseline: the targets do not pass without any mutation ({status}, {seconds:.0f}s):\n{tail}")
                raise SystemExit(1)
            print(f"baseline: targets pass unmutated ({seconds:.0f}s)", flush=True)
        for i, m in enumerate(mutations, 1):
            path = scratch / m.file
            original = path.read_text()
            try:
                path.write_text(original.replace(m.find, m.replace, 1))
                status, seconds, tail = run_pytest(python, scratch, m.targets, m.timeout_s)
            finally:
                path.write_text(original)
            outcomes.append(Outcome(m, status, seconds, tail))
            print(f"[{i:>2}/{len(mutations)}] {status:<8} {seconds:6.1f}s  {m.id}", flush=True)
            if status != "killed" and (verbose or status in ("survived", "error")):
                print("    " + tail.replace("\n", "\n    "), flush=True)
    return outcomes


def report(outcomes: list[Outcome], wall_s: float) -> str:
    """The killed/survived table and the kill rate."""
    width = max(len(o.mutation.id) for o in outcomes)
    lines = [f"{'mutation':<{width}}  {'status':<8}  {'seconds':>7}  file", "-" * (width + 40)]
    for o in outcomes:
        lines.append(f"{o.mutation.id:<{width}}  {o.status:<8}  {o.seconds:7.1f}  {o.mutation.file}")
    killed = sum(o.status == "killed" for o in outcomes)
    lines.append("-" * (width + 40))
    lines.append(f"killed {killed}/{len(outcomes)} ({100 * killed / len(outcomes):.0f}%) in {wall_s:.0f}s")
    for status in ("survived", "error", "timeout"):
        ids = [o.mutation.id for o in outcomes if o.status == status]
        if ids:
            lines.append(f"{status}: {', '.join(ids)}")
    return "\n".join(lines)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _one_line(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="mutation file (default: %(default)s)")
    parser.add_argument("--only", default="", help="comma-separated mutation ids to run")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs pytest (default: this one)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the targets")
    parser.add_argument("--verbose", action="store_true", help="show pytest's output tail for every non-kill")
    args = parser.parse_args(argv)
    try:
        mutations = load_mutations(args.config, REPO)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        known = {m.id for m in mutations}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            print(f"error: unknown mutation id(s) {', '.join(unknown)}; see --list", file=sys.stderr)
            return 2
        mutations = [m for m in mutations if m.id in wanted]
    if args.list:
        width = max(len(m.id) for m in mutations)
        for m in mutations:
            print(f"{m.id:<{width}}  {m.file}: {m.why}")
        print(f"{len(mutations)} mutation(s)")
        return 0
    start = time.perf_counter()
    outcomes = check(mutations, args.python, baseline=not args.no_baseline, verbose=args.verbose)
    print()
    print(report(outcomes, time.perf_counter() - start))
    return 0 if all(o.status == "killed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
