"""`python -m harness sweep`: parse the flags (derived from SweepSpec and the executors' options), run, print.

The flags of what and how to measure are SweepSpec's knobs; those of where cells run are each
executor's options; adding a setting is one field there. Library: harness.runner.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Iterable

from harness.errors import UsageError
from harness.knobs import Knob, knobs

GROUPS = {
    "what": "what to measure (override --config, which overrides the embedded default)",
    "how": "how to measure",
    "where": "where cells run (docs/scaling.md); also allowed with --resume",
}


def _setting_knobs() -> list[Knob]:
    """Every setting with a flag: the spec's, then each executor option once."""
    from harness.executors import option_knobs
    from harness.spec import SweepSpec

    return [k for k in knobs(SweepSpec) if k.flag] + [k for k, _ in option_knobs().values() if k.flag]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    groups = {name: parser.add_argument_group(title) for name, title in GROUPS.items()}
    groups["what"].add_argument("--config", metavar="TOML", help="a sweep spec file (see docs/sweep.md)")
    for k in _setting_knobs():
        kwargs: dict[str, Any] = {"dest": k.key, "help": k.help}
        if k.metavar:
            kwargs["metavar"] = k.metavar
        if k.repeatable:
            kwargs["action"] = "append"
        groups[k.group].add_argument(k.flag, **kwargs)
    groups["what"].add_argument("--trust-plugins", action="store_true",
                                help="import the plugins a --config or --resume spec file names (else each must be given with --plugin)")
    groups["where"].add_argument("--isolate", action="store_true", help="= --executor subprocess: a segfault or OOM kill becomes a row")
    out = parser.add_argument_group("where results go")
    out.add_argument("--out", default=None, metavar="DIR", help="folder for run folders (default: results)")
    out.add_argument("--run-id", metavar="NAME", help="run folder name (default: <date>-<time>-<device>)")
    out.add_argument("--resume", metavar="RUN_DIR", help="continue a killed run: its spec, only the cells it lacks")
    out.add_argument("--dry-run", action="store_true", help="print the planned cells and exit")
    out.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from harness.executors import option_knobs
    from harness.runner import plan_lines, run_sweep, sweep_spec
    from harness.spec import RESUMED_SPEC_DEFAULTS, load_toml

    settings = _setting_knobs()
    cli = {k.key: _flag_value(getattr(args, k.key)) for k in settings}
    if args.isolate:
        if cli["executor"] not in (None, "subprocess"):
            raise UsageError(f"--isolate is --executor subprocess; it cannot go with --executor {cli['executor']}")
        cli["executor"] = "subprocess"
    if args.resume:
        where_keys = {"executor", "plugins", *option_knobs()}  # they say where cells run, not what they measure
        given = [k.flag for k in settings if cli[k.key] is not None and k.key not in where_keys]
        if given or args.config:
            raise UsageError(f"--resume replays the run's own spec.toml; drop {', '.join(_flags(given, args.config))}")
        if args.out is not None:
            raise UsageError(f"--resume {args.resume} continues that folder where it is; drop --out {args.out}")
        if args.run_id is not None:  # refused here too, so --dry-run says what the real run would
            raise UsageError(f"--resume {args.resume} continues that folder under its own name; drop --run-id {args.run_id}")
        run_dir = Path(args.resume)
        if not (run_dir / "spec.toml").is_file():
            raise UsageError(f"--resume {run_dir}: not a run folder (no spec.toml); pass a folder made by `python -m harness sweep`")
        overrides = {k: v for k, v in cli.items() if v is not None}
        stored = load_toml(run_dir / "spec.toml")
        older = {k: v for k, v in RESUMED_SPEC_DEFAULTS.items() if k not in stored}  # keys the run predates
        if cli["executor"] is None:
            spec = sweep_spec(toml_path=run_dir / "spec.toml", toml=older, cli=overrides, plan_only=args.dry_run,
                              trust_plugins=args.trust_plugins)
        else:  # another executor: the stored executor settings do not carry over
            stored = {k: v for k, v in stored.items() if k not in where_keys - {"plugins"}}
            spec = sweep_spec(toml={**stored, **older}, cli=overrides, plan_only=args.dry_run,
                              trust_plugins=args.trust_plugins)
    else:
        spec = sweep_spec(toml_path=args.config, cli=cli, plan_only=args.dry_run, trust_plugins=args.trust_plugins)
    if args.dry_run:
        print("\n".join(plan_lines(spec, Path(args.resume) if args.resume else None)))
        return 0
    run_sweep(spec, out=args.out or "results", run_id=args.run_id, resume=args.resume, quiet=args.quiet)
    return 0


def _flag_value(value: Any) -> Any:
    if isinstance(value, list):  # repeatable flags
        return [v for v in value if v] or None
    return value


def _flags(given: Iterable[str], config: str | None) -> list[str]:
    return list(given) + (["--config"] if config else [])
