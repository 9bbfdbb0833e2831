"""Command-line entry point: sub-commands live in their own modules and are imported lazily.

Each command module defines ``add_arguments(parser)`` and ``run(args) -> int``. A usage error
(anything the user typed) is one line on stderr and exit code 2; a failure is exit code 1.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Iterable

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


def load_plugins(targets: list[str] | tuple[str, ...]) -> None:
    """Import each --plugin target (module or .py file) so its variants register; UsageError names a failing one."""
    from variants import load_plugin

    for target in targets:
        try:
            load_plugin(str(target))
        except Exception as exc:
            raise UsageError(f"--plugin {target}: {type(exc).__name__}: {exc}") from None


def check_device(device: str, flag: str = "--device") -> str:
    """`device` normalised ('cpu', 'cuda', 'cuda:<index>') if it exists here; else UsageError saying what to pass."""
    from harness.spec import device_problem

    device = str(device).strip().lower()
    problem = device_problem(device)
    if problem:
        raise UsageError(f"{flag}: {problem}")
    return device


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints the whole usage)
        raise UsageError(f"{self.prog}: {message}")


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser; only the sub-commands in `commands` (default: all) import their module and get their flags."""
    wanted = set(COMMANDS if commands is None else commands)
    parser = _Parser(prog="python -m harness", description="attnsuite: measure attention variants side by side.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name in wanted:
            module = importlib.import_module(module_name)
            module.add_arguments(command_parser)
            command_parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        # Only the command being run is imported (`list` does not pay for the report's pandas and matplotlib).
        command = next((a for a in argv if not a.startswith("-")), None)
        parser = build_parser([command] if command else [])
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
