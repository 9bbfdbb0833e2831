"""The command layer: ``python -m harness <command>``. Thin adapters over the library, nothing imports them.

Each command module here defines ``add_arguments(parser)`` and ``run(args) -> int``: it parses,
calls the library, prints. Only this layer turns a library ``UsageError`` (anything the user
gave) into one line on stderr and exit code 2; a failure is exit code 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from typing import Iterable

from harness.errors import RunFailed, Terminated, UsageError

# name -> (module, one-line help). Add a line to add a sub-command.
COMMANDS: dict[str, tuple[str, str]] = {
    "list": (
        "harness.commands.listing",
        "registered variants: backends (available here?), capabilities, config fields",
    ),
    "env": ("harness.commands.env", "the environment a run records: Python, torch, CUDA, GPU, CPU, threads, packages"),
    "sweep": (
        "harness.commands.sweep",
        "measure every variant across sequence lengths: latency, memory, FLOP rate, error; rows in results/<run-id>/",
    ),
    "report": ("harness.commands.report", "report.md, report.html and PNG figures from a run folder"),
    "compare": (
        "harness.commands.compare",
        "match the cells of two runs: latency and memory ratios, error change, regressions",
    ),
    "model-eval": (
        "harness.commands.model_eval",
        "swap each variant into every attention layer of a pretrained model: any transformers causal LM "
        "(--model PATH: perplexity, top-1 agreement, KL) or the built-in MiniLM encoder (embedding cosine, retrieval)",
    ),
    "tasks": (
        "harness.commands.tasks",
        "train tiny transformers per variant on MQAR and ListOps: test accuracy and delta to dense",
    ),
    "deploy": (
        "harness.commands.deploy",
        "export each variant (torch.export, ONNX) and run it in onnxruntime on CPU and WebAssembly: Deployable?",
    ),
}


# Flags whose empty value means something ('--error-budgets ""': no budget search) or is checked with its own message.
EMPTY_MEANS_NONE = ("--error-budgets", "--kv-heads", "--run-id")


def _refuse_empty_values(argv: list[str]) -> None:
    """UsageError for an empty value (`--out ''`, `--plugin=`, `report ''`): no flag or argument means 'nothing'
    (except the flags of EMPTY_MEANS_NONE)."""
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if arg.startswith("--") and eq and not value.strip() and flag not in EMPTY_MEANS_NONE:
            raise UsageError(f"{flag} '': expected a value; give one or drop {flag} for its default")
        if not arg.strip():
            before = argv[i - 1] if i and argv[i - 1].startswith("-") else None
            if before in EMPTY_MEANS_NONE:
                continue
            if before:
                raise UsageError(f"{before} '': expected a value; give one or drop {before} for its default")
            raise UsageError("an empty argument ''; give a value (e.g. a run folder) or leave it out")


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


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as the CLI prints it: 'warning: <message>' (no source file, line or code of ours)."""
    return f"warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    format_before, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    try:
        if not argv:  # a short usage, not the whole help
            print(
                f"usage: python -m harness COMMAND [options], COMMAND one of {', '.join(COMMANDS)} "
                "(python -m harness COMMAND --help: its options)",
                file=sys.stderr,
            )
            return 2
        _refuse_empty_values(argv)
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
    except Terminated as exc:
        if not getattr(exc, "reported", False):  # else the sweep said where its rows are and how to resume
            print("terminated (SIGTERM)", file=sys.stderr)
        return 143
    except RunFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a folder that cannot be written or read (read-only, full, a directory where a file goes)
        print(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        if not getattr(exc, "reported", False):  # else the sweep said where its rows are and how to resume
            print("interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = format_before
