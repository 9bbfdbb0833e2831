"""The Python entry: `from harness import sweep, open_run`, for a notebook or a script.

    run = sweep(variants="dense,sliding_window:window=256", seq_lens=[1024, 2048], inputs="gaussian")
    run.frame                      # every row as a pandas DataFrame, with the dense ratios and each row's error
    run.figures["latency_vs_n"]    # the report's figures, by name (PNG paths in the run folder)
    open_run("results/<run-id>")   # a finished run folder, analysed the same way

`sweep` takes the settings `python -m harness sweep` takes as flags, by their spec keys (`--seq-lens` is `seq_lens`;
`python -m harness sweep --help` lists them, docs/sweep.md the values), as the flag's text or as a list; it writes the
same run folder, report and terminal summary as the command and returns the run analysed (harness.report.analysed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from harness.errors import UsageError
from harness.executors import option_knobs
from harness.knobs import knobs
from harness.report.analysed import AnalysedRun, analyse
from harness.runner import run_sweep, sweep_spec
from harness.spec import SweepSpec
from variants._checks import did_you_mean


def sweep(
    *,
    config: str | Path | None = None,
    preset: str | None = None,
    out: str | Path = "results",
    run_id: str | None = None,
    quiet: bool = True,
    trust_config: bool = False,
    **settings: Any,
) -> AnalysedRun:
    """Measure a sweep into a run folder under `out` and return it analysed.

    Args:
        config: a sweep spec file (TOML), as `--config`; `settings` override it, as flags do.
        preset: an embedded spec by name, as `--preset` (harness.spec.presets: "quick"), under `config` and `settings`.
        out, run_id: where the run folder goes and its name (default: date, time and device).
        quiet: no progress bar.
        trust_config: as `--trust-config` (a spec file's plugins and executor settings are taken only with it).
        settings: spec keys (`variants`, `seq_lens`, `dtypes`, `inputs`, `error_budgets`, ...), each the text its flag
            takes ("256,512", "1k..4k") or a list of values ([256, 512], ["dense", "chunked"]).
    Raises harness.errors.UsageError for an unknown key or a bad value, with the flag and the fix.
    """
    spec = sweep_spec(toml_path=config, cli=cli_values(settings), trust_config=trust_config, preset=preset)
    return analyse(run_sweep(spec, out=out, run_id=run_id, quiet=quiet))


def open_run(run_dir: str | Path, *, budgets: Sequence[float] | None = None, clock: str | None = None) -> AnalysedRun:
    """A finished (or stopped) run folder analysed: its rows read once, the answer for `budgets` on `clock` (default: the
    run's own); as `python -m harness report` sees it."""
    return analyse(run_dir, budgets=budgets, clock=clock)


def cli_values(settings: dict[str, Any]) -> dict[str, Any]:
    """Python values as the flags' raw text that the spec parses: lists joined by commas, booleans as true/false;
    UsageError for a key no flag has."""
    flagged = {k.key: k for k in knobs(SweepSpec) if k.flag} | {
        key: k for key, (k, _) in option_knobs().items() if k.flag
    }
    unknown = sorted(set(settings) - set(flagged))
    if unknown:
        hints = "".join(did_you_mean(key, flagged) for key in unknown)
        raise UsageError(
            f"sweep(): unknown setting {', '.join(map(repr, unknown))}; expected spec keys, as `python -m harness "
            f"sweep --help` lists their flags ({', '.join(sorted(flagged))}){hints}"
        )
    cli: dict[str, Any] = {}
    for key, value in settings.items():
        if (
            flagged[key].repeatable and value is not None
        ):  # each entry as one use of the flag (an entry may hold commas)
            cli[key] = [_text(v) for v in value] if isinstance(value, (list, tuple)) else [_text(value)]
        else:
            cli[key] = _text(value)
    return cli


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
