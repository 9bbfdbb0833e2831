"""The errors library code raises. A leaf: it imports nothing of ours, so every layer may use it.

Only the command layer (harness.commands) turns a UsageError into one line on stderr and exit 2, and a RunFailed (or
an OSError: a read-only folder, a full disk) into one line and exit 1.
"""

from __future__ import annotations


class UsageError(Exception):
    """Something the user gave is wrong; the message is one line saying what, where, and how to fix it."""


class Terminated(KeyboardInterrupt):
    """SIGTERM reached a sweep's driver: it stops like Ctrl-C (rows kept, lock released, one line), exit 143.

    A KeyboardInterrupt so every place that lets the user's Ctrl-C through lets it through too.
    """


class RunFailed(Exception):
    """A run could not finish (a folder it cannot write, a full disk, a cell that took its process down); the message is
    one line saying what happened and how to continue (e.g. the --resume command)."""
