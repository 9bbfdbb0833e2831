"""A user's text file read safely: a regular file only, bounded in size, UTF-8, or one line saying why not.

`--text FILE` (model-eval, lm-eval) and `--inputs model:text=FILE` read through `read_user_text`, so a FIFO, a device
(/dev/zero), a directory or a file larger than TEXT_LIMIT_BYTES is refused before anything blocks or fills memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from harness.errors import UsageError

TEXT_LIMIT_BYTES = 64 << 20  # 64 MiB: far more text than any evaluation reads (model-eval takes a few hundred windows)


def read_user_text(path: str | Path, *, what: str, limit_bytes: int = TEXT_LIMIT_BYTES) -> str:
    """The UTF-8 text of the regular file at `path` (at most `limit_bytes`); UsageError naming `what` otherwise."""
    try:
        info = os.stat(path)  # before opening: opening a FIFO for reading blocks until a writer comes
    except OSError as exc:
        raise UsageError(
            f"{what} {str(path)!r} cannot be read ({exc.strerror or type(exc).__name__}); pass a text file"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{what} {str(path)!r} is not a regular file (a pipe, a device or a folder); pass a text file")
    if info.st_size > limit_bytes:
        raise UsageError(
            f"{what} {str(path)!r} is {info.st_size / 2**20:.0f} MiB, above the {limit_bytes / 2**20:.0f} MiB a text "
            "may have; pass a shorter text"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit_bytes + 1)  # a file that grew since the stat is still bounded
        if len(data) > limit_bytes:
            raise UsageError(
                f"{what} {str(path)!r} grew beyond {limit_bytes / 2**20:.0f} MiB while read; pass a fixed text"
            )
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"{what} {str(path)!r} cannot be read as UTF-8 text ({type(exc).__name__}); pass a text file"
        ) from None
