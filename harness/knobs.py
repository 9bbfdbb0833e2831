"""Spec and executor options declared once: a dataclass field's metadata names its TOML key, flag and help.

``knob(...)`` marks a field of SweepSpec or of an executor's options dataclass; ``knobs(cls)``
lists them, so the TOML keys, the flags and their help are derived from the dataclass, never retyped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Knob:
    """How one option is given: TOML key (the field name), flag, help, and how the flag's text is parsed."""

    key: str  # the field name = the TOML key
    flag: str | None  # "--seq-lens"; None: TOML only
    help: str
    metavar: str | None = None
    group: str = "what"  # "what" (what is measured), "how" (how it is measured), "where" (where cells run)
    repeatable: bool = False  # the flag may be given several times (values are concatenated)
    parse: Callable[[Any, str], Any] | None = None  # (raw value, where) -> typed value; raises SpecError
    old_flags: tuple[str, ...] = ()  # earlier names of the flag, still accepted with a one-line note


def knob(
    default: Any = MISSING,
    *,
    flag: str | None = None,
    help: str,
    metavar: str | None = None,
    group: str = "what",
    repeatable: bool = False,
    parse: Callable[[Any, str], Any] | None = None,
    default_factory: Any = MISSING,
    old_flags: tuple[str, ...] = (),
) -> Any:
    """A dataclass field that is also an option (see Knob); `flag=None` keeps it TOML-only."""
    meta = {
        "knob": dict(
            flag=flag, help=help, metavar=metavar, group=group, repeatable=repeatable, parse=parse, old_flags=old_flags
        )
    }
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def knobs(cls: type) -> tuple[Knob, ...]:
    """The options a dataclass declares, in field order."""
    return tuple(Knob(key=f.name, **f.metadata["knob"]) for f in dataclasses.fields(cls) if "knob" in f.metadata)
