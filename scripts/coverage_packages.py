#!/usr/bin/env python3
"""Per-package coverage from `coverage json` output: variants, harness (top-level modules), harness/<subpackage>.

    python scripts/coverage_packages.py .coverage-data/coverage.json [--lowest 10]

Prints statements, missed, branches, partial branches and percent per package (coverage.py's own
percent: lines and branches together), then the lowest-covered modules. Standard library only.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import PurePosixPath


def package_of(path: str) -> str:
    """'harness/measure/cell.py' -> 'harness/measure'; 'harness/plan.py' -> 'harness (top level)'; 'variants/x.py' -> 'variants'."""
    parts = PurePosixPath(path).parts
    for i, part in enumerate(parts):
        if part in ("harness", "variants"):
            rest = parts[i + 1 :]
            if part == "variants":
                return "variants"
            return f"harness/{rest[0]}" if len(rest) > 1 else "harness (top level)"
    return "other"


def percent(covered: int, total: int) -> float:
    return 100.0 * covered / total if total else 100.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json_file")
    parser.add_argument("--lowest", type=int, default=10, help="how many of the lowest-covered modules to list")
    args = parser.parse_args(argv)
    files = json.loads(open(args.json_file, encoding="utf-8").read())["files"]
    totals: dict[str, list[int]] = defaultdict(
        lambda: [0, 0, 0, 0]
    )  # statements, missed, branches, partial+missed branches
    modules = []
    for path, data in files.items():
        s = data["summary"]
        covered = s["covered_lines"] + s.get("covered_branches", 0)
        total = s["num_statements"] + s.get("num_branches", 0)
        t = totals[package_of(path)]
        t[0] += s["num_statements"]
        t[1] += s["missing_lines"]
        t[2] += s.get("num_branches", 0)
        t[3] += s.get("num_branches", 0) - s.get("covered_branches", 0)
        modules.append((percent(covered, total), s["num_statements"], path))
    print(f"\n{'package':<24} {'stmts':>6} {'miss':>5} {'branch':>6} {'brmiss':>6} {'cover':>6}")
    for name in sorted(totals):
        stmts, miss, branches, brmiss = totals[name]
        print(
            f"{name:<24} {stmts:>6} {miss:>5} {branches:>6} {brmiss:>6} "
            f"{percent(stmts - miss + branches - brmiss, stmts + branches):>5.1f}%"
        )
    print(f"\nlowest-covered modules (of {len(modules)}):")
    for pct, stmts, path in sorted(modules)[: args.lowest]:
        print(f"  {pct:5.1f}%  {stmts:>4} stmts  {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
