"""Command-line entry point: sub-commands live in their own modules and are imported lazily.

Each command module defines ``add_arguments(parser)`` and ``run(args) -> int``. A usage error
(anything the user typed) is one line on stderr and exit code 2; a failure is exit code 1.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help). Add a line to add a sub-command.
COMMANDS: dict[str, tuple[str, str]] = {
    "list": ("harness.list_variants", "registered variants: backends (available here?), capabilities, config fields"),
    "env": ("harness.env", "the environment a run records: Python, torch, CUDA, GPU, CPU, threads, packages"),
    "sweep": ("harness.sweep", "measure every variant across sequence lengths: latency, memory, FLOP rate, error; rows in results/<run-id>/"),
    "report": ("harness.report", "report.md, report.html and PNG figures from a run folder"),
    "compare": ("harness.compare", "match the cells of two runs: latency and memory ratios, error change, regressions"),
    "model-eval": ("harness.model_eval", "swap each variant into every layer of a pretrained MiniLM: embedding cosine, retrieval agreement"),
    "tasks": ("harness.tasks", "train tiny transformers per variant on MQAR and ListOps: test accuracy and delta to dense"),
}


class UsageError(Exception):
    """Something the user typed is wrong; the message is one line saying what and how to fix it."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints the whole usage)
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m harness", description="attnsuite: measure attention variants side by side.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        return int(args._module.run(args) or 0)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
