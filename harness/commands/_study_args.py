"""Flags the study commands (model-eval, tasks, deploy) share: variants, overrides, plugins, device, seed, where to write."""

from __future__ import annotations

import argparse
import json
from typing import Any, Iterable

from harness.devices import default_device
from harness.errors import UsageError
from harness.spec.convert import MAX_SEQ_LEN, SpecError, at_most


def add_study_arguments(parser: argparse.ArgumentParser, stem: str, *, set_example: str) -> None:
    """--variants, --seed, --device, --set, --plugin and --out DIR / --run RUN_DIR."""
    parser.add_argument("--variants", default="*", help="comma-separated globs over registered variants (default: all)")
    parser.add_argument(
        "--seed", type=_seed, default=0, help="seed of the variants' initial weights (tasks: also of the data)"
    )
    parser.add_argument("--device", default=default_device())
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="VARIANT.FIELD=VALUE",
        help=f"override a variant config field, e.g. {set_example}",
    )
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="MODULE_OR_FILE", help="import a user's variants first"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out", metavar="DIR", help=f"folder for {stem}.csv/.json/.md/.png (default: a new results/<id>/)"
    )
    where.add_argument(
        "--run", metavar="RUN_DIR", help=f"an existing run folder (e.g. from `sweep`) to add {stem}.* to"
    )


def _seed(text: str) -> int:
    """A seed: an integer in [0, 2**63) (torch.manual_seed's range); argparse turns the error into one line."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63), got {value}")
    return value


def parse_overrides(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`--set variant.field=value` items -> {variant: {field: value}}; values parsed as JSON when they can be.

    Raises UsageError for an item without the variant.field=value form.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        variant, dot, field = key.partition(".")
        if not (sep and dot and variant and field):
            raise UsageError(f"--set {item!r}: expected VARIANT.FIELD=VALUE, e.g. --set sliding_window.window=32")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out.setdefault(variant, {})[field] = value
    return out


def parse_ints(text: str, flag: str, example: str) -> list[int]:
    """'128,512' -> [128, 512]; UsageError naming the flag otherwise."""
    try:
        return [int(n) for n in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected comma-separated integers like {example}") from None


def bounded(values: Iterable[int], flag: str, maximum: int = MAX_SEQ_LEN) -> list[int]:
    """`values` when each is at most `maximum` (by default the sweep's MAX_SEQ_LEN, the one bound on a length), checked
    before any work; else UsageError naming the flag, the value and the limit."""
    try:
        return [at_most(n, maximum, flag) for n in values]
    except SpecError as exc:
        raise UsageError(str(exc)) from None
