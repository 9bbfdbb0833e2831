"""`python -m harness env`: the environment a run records, as aligned lines or JSON."""

from __future__ import annotations

import argparse
import json

from harness.env import collect_env


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of aligned lines")


def run(args: argparse.Namespace) -> int:
    env = collect_env()
    if args.json:
        print(json.dumps(env, indent=2))
        return 0
    flat = {**{k: v for k, v in env.items() if k != "packages"}, **{f"pkg {k}": v for k, v in env["packages"].items()}}
    width = max(map(len, flat))
    for key, value in flat.items():
        print(f"{key:<{width}}  {value if value is not None else '-'}")
    return 0
