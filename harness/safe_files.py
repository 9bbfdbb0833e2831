"""A run folder's files written without following symbolic links, regular files only: a planted link is one line.

Someone who can write into ``results/`` could leave ``RUN_DIR/rows.jsonl`` as a link to a file of
theirs (or yours), ``RUN_DIR`` itself as a link to another folder, or a FIFO that blocks a reader
forever. Every file the sweep and the report write goes through here: appended and updated files
are opened with ``O_NOFOLLOW`` and checked to be plain files (``fstat``); whole files are written to
a temporary file beside them and renamed over the name, so a hard link's other name is never
touched. What is not a plain file is refused with a UsageError naming it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

from harness.errors import UsageError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # missing on Windows (no symlinks planted by other users there)
_FLAGS = {
    "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
    "r+": os.O_RDWR,
    "rw": os.O_RDWR | os.O_CREAT,  # a lock file: created when missing, never truncated
    "r": os.O_RDONLY,
}


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    return "not a regular file"


def _refuse(path: Path, mode: int) -> UsageError:
    return UsageError(
        f"{path} is {_kind(mode)}: a run folder's files are only ever plain files; "
        "remove it (or pick another run folder) and run again"
    )


def check_plain(path: str | Path) -> None:
    """UsageError when `path` exists and is anything but a regular file (a link, a folder, a FIFO)."""
    path = Path(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise _refuse(path, mode)


def check_run_folder(run_dir: str | Path, files: tuple[str, ...] = (), folders: tuple[str, ...] = ()) -> Path:
    """`run_dir` when it is a real folder (not a symbolic link) whose `files` are plain files and whose `folders` are
    real folders where they exist; else UsageError naming what is in their place."""
    run_dir = Path(run_dir)
    try:
        mode = os.lstat(run_dir).st_mode
    except FileNotFoundError:
        raise UsageError(f"{run_dir}: no such run folder; pass a folder made by `python -m harness sweep`") from None
    if stat.S_ISLNK(mode):
        raise UsageError(
            f"run folder {run_dir} is a symbolic link (to {os.readlink(run_dir)}): a run is written only into a real "
            "folder; pass the folder itself or pick another --run-id"
        )
    if not stat.S_ISDIR(mode):
        raise UsageError(
            f"{run_dir} is {_kind(mode)}, not a run folder; pass a folder made by `python -m harness sweep`"
        )
    for name in files:
        check_plain(run_dir / name)
    for name in folders:
        with contextlib.suppress(FileNotFoundError):
            mode = os.lstat(run_dir / name).st_mode
            if not stat.S_ISDIR(mode):
                raise UsageError(
                    f"{run_dir / name} is {_kind(mode)}: the run writes into it only as a real folder; "
                    "remove it (or pick another run folder) and run again"
                )
    return run_dir


def open_plain(path: str | Path, mode: str = "a", *, binary: bool = False) -> IO[Any]:
    """Open a run folder file ('a' append, 'r+' update, 'rw' create-or-update, 'r' read) without following a link;
    UsageError when it is not a plain file. Text files are UTF-8."""
    path = Path(path)
    try:
        fd = os.open(path, _FLAGS[mode] | _NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            check_plain(path)  # names what it is
            raise _refuse(path, 0) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(path, info.st_mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    file_mode = {"a": "a", "r+": "r+", "rw": "r+", "r": "r"}[mode] + ("b" if binary else "")
    return os.fdopen(fd, file_mode, **({} if binary else {"encoding": "utf-8"}))


def write_plain(path: str | Path, data: str | bytes, *, durable: bool = False) -> None:
    """Write a whole file (a new temporary file renamed over `path`); UsageError when `path` is not a plain file.
    `durable`: the new file and the folder's entry are on disk when this returns (fsync), for a file that replaces
    measurements (rows.jsonl) rather than one made from them."""
    path = Path(path)
    check_plain(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # as an ordinary new file (mkstemp makes it private)
            f.write(raw)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)  # a rename replaces a link or a name, it never writes through one
        if durable:
            folder = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_saved(path: str | Path, save: Callable[[Path], Any]) -> None:
    """A whole file that a library writes only by name (torch.save, torch.export.save, an ONNX program): `save` writes
    it into a private temporary folder beside `path`, which is then renamed over `path` (as write_plain does)."""
    path = Path(path)
    check_plain(path)
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=path.parent) as scratch:  # 0700: nothing planted
        made = Path(scratch) / path.name
        save(made)
        os.replace(made, path)


def write_figure(fig: Any, path: str | Path, **savefig: Any) -> None:
    """A matplotlib figure saved as PNG through write_plain."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", **savefig)
    write_plain(path, buffer.getvalue())
