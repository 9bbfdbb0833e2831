"""`python -m harness sweep`: parse the flags (derived from SweepSpec and the executors' options), run, print.

The flags of what and how to measure are SweepSpec's knobs; those of where cells run are each
executor's options; adding a setting is one field there. Library: harness.runner.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.executors import option_knobs
from harness.inputs import get_inputs, list_inputs
from harness.knobs import Knob, knobs
from harness.runner import check_resume, plan_lines, resume_spec, run_sweep, sweep_spec, where_keys
from harness.spec import SweepSpec
from harness.spec.build import default_text
from harness.spec.presets import PRESETS
from harness.spec.toml_io import parse_toml

GROUPS = {
    "what": "what to measure (override --config, which overrides the embedded default)",
    "how": "how to measure",
    "where": "where cells run (docs/scaling.md); also allowed with --resume",
}


def _setting_knobs() -> list[Knob]:
    """Every setting with a flag: the spec's, then each executor option once."""
    return [k for k in knobs(SweepSpec) if k.flag] + [k for k, _ in option_knobs().values() if k.flag]


def _old_flag(old: str, new: str, kwargs: dict[str, Any]) -> type[argparse.Action]:
    """An argparse action for a renamed flag: stores like the new one, after one line on stderr."""
    append = kwargs.get("action") == "append"

    class OldFlag(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(f"note: {old} is now {new} (every list of a cell axis is plural); read as {new}", file=sys.stderr)
            setattr(namespace, self.dest, (getattr(namespace, self.dest) or []) + [values] if append else values)

    return OldFlag


class _TrustPlugins(argparse.Action):
    """The older name of --trust-config: trusting a file's plugins already trusts its author with running code."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(
            "note: --trust-plugins is now --trust-config (it also takes the file's executor settings)", file=sys.stderr
        )
        namespace.trust_config = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the epilog's list keeps its lines
    parser.epilog = inputs_help()
    groups = {name: parser.add_argument_group(title) for name, title in GROUPS.items()}
    groups["what"].add_argument("--config", metavar="TOML", help="a sweep spec file (see docs/sweep.md)")
    groups["what"].add_argument(
        "--preset",
        metavar="NAME",
        help="a small embedded spec in place of the default, under --config and the flags: "
        + "; ".join(f"{name}: {line}" for name, line in PRESETS.items()),
    )
    defaults = _embedded_defaults()
    for k in _setting_knobs():
        kwargs: dict[str, Any] = {"dest": k.key, "help": k.help + _default_help(k, defaults)}
        if k.metavar:
            kwargs["metavar"] = k.metavar
        if k.repeatable:
            kwargs["action"] = "append"
        groups[k.group].add_argument(k.flag, **kwargs)
        for old in k.old_flags:  # still accepted, unlisted, with a note naming the new flag
            groups[k.group].add_argument(
                old, **{**kwargs, "help": argparse.SUPPRESS, "action": _old_flag(old, k.flag, kwargs)}
            )
    groups["what"].add_argument(
        "--trust-config",
        action="store_true",
        help="take from a --config or --resume spec file what runs or connects to something: its plugins (else each "
        "must be given with --plugin), a remote executor, ray_address and the slurm_* keys (else given as flags)",
    )
    groups["what"].add_argument("--trust-plugins", action=_TrustPlugins, nargs=0, help=argparse.SUPPRESS)
    groups["where"].add_argument(
        "--isolate", action="store_true", help="= --executor subprocess: a segfault or OOM kill becomes a row"
    )
    out = parser.add_argument_group("where results go")
    out.add_argument("--out", default=None, metavar="DIR", help="folder for run folders (default: results)")
    out.add_argument("--run-id", metavar="NAME", help="run folder name (default: <date>-<time>-<device>)")
    out.add_argument("--resume", metavar="RUN_DIR", help="continue a killed run: its spec, only the cells it lacks")
    out.add_argument("--dry-run", action="store_true", help="print the planned cells and exit")
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    out.add_argument(
        "--remeasure-limits",
        action="store_true",
        help="measure the machine's peak FLOP/s and bandwidth again (else a cached measurement under a day old)",
    )


def inputs_help(width: int = 79) -> str:
    """The epilog of `sweep --help`: each registered input distribution with its one line and its params, from the
    inputs registry (a plugin's too, when imported first)."""
    lines = ["input distributions (--inputs NAME, or NAME:param=value,... for other param values):"]
    for name in list_inputs():
        spec = get_inputs(name)
        form = ",".join(f"{k}={'...' if v == '' else v}" for k, v in spec.params.items())
        text = f"{name}: {spec.doc}" + (f" Form: {name}:{form}" if form else "")
        lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(lines)


def _embedded_defaults() -> dict[str, dict[str, Any]]:
    """The embedded default spec per device type (harness/spec/cpu.toml, gpu.toml): what an unset flag means."""
    return {device: parse_toml(default_text(device)) for device in ("cpu", "cuda")}


def _default_help(k: Knob, defaults: dict[str, dict[str, Any]]) -> str:
    """' (default: cpu 256,...,8192; cuda 1024,...)' for a flag whose help names no default; '' for one without."""
    if "default" in k.help:
        return ""
    field = next((f for f in dataclasses.fields(SweepSpec) if f.name == k.key), None)
    fallback = field.default if field is not None else dataclasses.MISSING  # a key the device's file leaves out
    values = {device: spec.get(k.key, fallback) for device, spec in defaults.items()}
    values = {device: v for device, v in values.items() if v is not dataclasses.MISSING and v not in (None, [], ())}
    if not values:
        return ""
    text = {
        device: ",".join(map(_toml_text, v)) if isinstance(v, (list, tuple)) else _toml_text(v)
        for device, v in values.items()
    }
    if len(set(text.values())) == 1:
        return f" (default: {next(iter(text.values()))})"
    return " (default: " + "; ".join(f"{device} {value}" for device, value in text.items()) + ")"


def _toml_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)


def run(args: argparse.Namespace) -> int:
    settings = _setting_knobs()
    cli = {k.key: _flag_value(getattr(args, k.key)) for k in settings}
    if args.isolate:
        if cli["executor"] not in (None, "subprocess"):
            raise UsageError(f"--isolate is --executor subprocess; it cannot go with --executor {cli['executor']}")
        cli["executor"] = "subprocess"
    if args.resume is not None:
        given = [k.flag for k in settings if cli[k.key] is not None and k.key not in where_keys()]
        given += [flag for flag, value in (("--config", args.config), ("--preset", args.preset)) if value is not None]
        if given:
            raise UsageError(f"--resume replays the run's own spec.toml; drop {', '.join(given)}")
        # here too, so --dry-run says what the real run would
        check_resume(args.resume, run_id=args.run_id, out=args.out)
        spec = resume_spec(
            Path(args.resume),
            overrides={k: v for k, v in cli.items() if v is not None},
            plan_only=args.dry_run,
            trust_config=args.trust_config,
        )
    else:
        spec = sweep_spec(
            toml_path=args.config, cli=cli, plan_only=args.dry_run, trust_config=args.trust_config, preset=args.preset
        )
    if args.dry_run:
        print("\n".join(plan_lines(spec, Path(args.resume) if args.resume else None)))
        return 0
    run_sweep(
        spec,
        out=args.out or "results",
        run_id=args.run_id,
        resume=args.resume,
        quiet=args.quiet,
        remeasure_limits=args.remeasure_limits,
    )
    return 0


def _flag_value(value: Any) -> Any:
    if isinstance(value, list):  # repeatable flags
        return [v for v in value if v] or None
    return value
