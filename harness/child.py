"""The one child-process runner: start a child, send it jobs one at a time, each under a time limit, and get back its
result or a `ChildFailed` that names what failed (the start, a job's exception, a timeout, a signal, an exit code).

The child is ``python -m harness.child MODULE:FACTORY FOLDER FD`` (a fresh interpreter: a fork of a process
that has used CUDA or OpenMP threads is not safe, and unlike multiprocessing's spawn it never re-imports the caller's
script). It reads a setup line on stdin, calls ``FACTORY(setup)`` for its job handler (plugins are imported there) and
says it is ready; then each job line on stdin gets one reply line on the pipe FD (a job's prints on stdout cannot
garble them). It ends when its stdin closes. Its stderr goes to FOLDER/stderr.txt, whose tail a failure quotes.

Each message carries a fresh random token that its reply must echo: code the child runs (a plugin) can name the pipe
FD and write to it, but a line it writes does not answer the job in flight, so the parent refuses it (ChildFailed,
the child killed) rather than taking it, or the real reply after it, as the job's result.

A child dies with its parent: on Linux it asks for SIGTERM when the parent dies (PR_SET_PDEATHSIG) and then removes
FOLDER, so a SIGKILLed sweep leaves no orphan measuring on and no temp folder behind. Users: the subprocess executor
(harness.executors.isolated), the local executor's plugin child (harness.executors.plugin_worker) and the report's maps
(harness.report.maps_isolated); it imports nothing of ours, so a child starts without the harness's imports.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

KILL_WAIT_S = 5.0  # how long a child gets to exit after its stdin closed before it is killed
START_TIMEOUT_S = 600.0  # a child's start (imports, plugins): seconds when quiet, minutes under heavy load
PARENT_ENV = "ATTNSUITE_ISOLATED_PARENT"  # the parent's pid, so the child can tell it died before it asked to be told
STDERR_FILE = "stderr.txt"  # in the child's folder: what it printed on stderr, tailed in a failure's reason


class ChildFailed(Exception):
    """A job got no result: `status` is the row status it means (oom, error, timeout), `reason` says what failed and
    `started` is False when the child never became ready (no job of it ran)."""

    def __init__(self, status: str, reason: str, *, started: bool = True):
        super().__init__(reason)
        self.status, self.reason, self.started = status, reason, started


class ChildProcess:
    """A child that runs `entry`'s jobs (``"module:factory"``, the factory called with `setup` in the child), restarted
    by the next job after it died or was killed. `name` starts every failure's reason ("isolated cell"); `result`
    names what a job gives ("row"), for the reason of a child that died without one."""

    def __init__(
        self,
        entry: str,
        setup: Any,
        *,
        name: str,
        result: str = "row",
        temp_root: str | None = None,
        start_timeout_s: float | None = START_TIMEOUT_S,
    ):
        self.entry, self.setup, self.name, self.result = entry, setup, name, result
        self.temp_root, self.start_timeout_s = temp_root, start_timeout_s
        self.process: subprocess.Popen | None = None
        self.replies: Any = None  # the read end of the child's reply pipe
        self.folder: Path | None = None  # the child's temp folder (its stderr), removed when it stops

    @property
    def running(self) -> bool:
        """True while the child is alive (it may have died since its last job)."""
        return self.process is not None and self.process.poll() is None

    def run(self, job: Any, timeout_s: float | None) -> Any:
        """The child's result for `job` (JSON-safe), started first if it is not running; raises ChildFailed."""
        if not self.running:
            self.start()
        token = secrets.token_hex(16)
        try:
            self._send(job, token)
        except (BrokenPipeError, OSError):
            pass  # the child died: its exit status below says how
        return self._reply(timeout_s, token, started=True)

    def start(self) -> None:
        """Start a fresh child and wait until it is ready; raises ChildFailed(started=False) when it cannot start."""
        self.close()
        self.folder = Path(tempfile.mkdtemp(prefix="attnsuite-child-", dir=self.temp_root))
        read_end, write_end = os.pipe()
        with open(self.folder / STDERR_FILE, "w", encoding="utf-8") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "harness.child", self.entry, str(self.folder), str(write_end)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=err,
                pass_fds=(write_end,),
                env=child_env(),
                text=True,
                start_new_session=True,  # the user's Ctrl-C reaches the parent, which stops the child
            )
        os.close(write_end)
        self.replies = os.fdopen(read_end, "r", encoding="utf-8")
        token = secrets.token_hex(16)
        try:
            self._send(self.setup, token)
        except (BrokenPipeError, OSError):
            pass
        self._reply(self.start_timeout_s, token, started=False)

    def _send(self, message: Any, token: str) -> None:
        line = json.dumps({"token": token, "job": message}, default=str)
        self.process.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]

    def _reply(self, timeout_s: float | None, token: str, *, started: bool) -> Any:
        """The child's next reply line within `timeout_s` seconds, answering the message sent with `token`; a timeout,
        a death, a job's error or a line that does not carry the token (forged, or left from an earlier job): ChildFailed."""
        ready, _, _ = select.select([self.replies], [], [], timeout_s)
        if not ready:
            self.close(kill=True)
            what = "did not finish within" if started else "did not start (imports, plugins) within"
            raise ChildFailed("timeout", f"{self.name} {what} {timeout_s:g} s; its process was killed", started=started)
        line = self.replies.readline()
        if not line.endswith("\n"):  # the child died, maybe halfway through a reply
            code = self.process.wait(KILL_WAIT_S)  # type: ignore[union-attr]
            tail = self._stderr()
            self.close()
            raise ChildFailed(*death_status(code, tail, who=self.name, result=self.result), started=started)
        reply = _parsed(line)
        if reply.get("token") != token:
            self.close(kill=True)
            raise ChildFailed(
                "error",
                f"{self.name} sent a reply that does not answer this job (not its token: written by code in the child, "
                f"such as a plugin, or left from an earlier job); refused, and its process was killed",
                started=started,
            )
        if "error" in reply:
            doing = "raised" if started else "could not start:"
            raise ChildFailed("error", f"{self.name} {doing} {reply['error']}", started=started)
        return reply["result"]

    def _stderr(self) -> str:
        try:
            return (self.folder / STDERR_FILE).read_text(encoding="utf-8", errors="replace")  # type: ignore[operator]
        except OSError:
            return ""

    def close(self, *, kill: bool = False) -> None:
        """Stop the child: its stdin closed, then killed if it is still running (a job in flight has no result to
        give); `kill`: at once (it overran its limit). Its folder is removed."""
        if self.process is not None:
            if kill:
                self.process.kill()
            try:
                self.process.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
            try:
                self.process.wait(KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.replies.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.process = self.replies = self.folder = None

    def __enter__(self) -> "ChildProcess":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def death_status(returncode: int, stderr: str, *, who: str = "isolated cell", result: str = "row") -> tuple[str, str]:
    """(status, reason) for a child `who` that exited without a result: SIGKILL (the kernel's OOM killer, typically)
    -> "oom", another signal or an exit code -> "error"; the reason ends with the last lines of its stderr."""
    tail = " ".join(stderr.strip().splitlines()[-3:])[-500:]
    if returncode < 0:
        sig = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        if -returncode == signal.SIGKILL:
            return "oom", f"{who} was killed by SIGKILL (most likely the kernel's out-of-memory killer) {tail}".strip()
        return "error", f"{who} crashed with signal {sig} {tail}".strip()
    return "error", f"{who} exited with code {returncode} and no {result}: {tail}".strip()


def child_env() -> dict[str, str]:
    """The environment of a child: this checkout first on PYTHONPATH, and the parent's pid."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[PARENT_ENV] = str(os.getpid())
    return env


def die_with_parent(folder: Path) -> None:
    """In the child: on the parent's death (Linux PR_SET_PDEATHSIG -> SIGTERM) remove `folder` and exit at once."""

    def on_parent_death(signum: int, frame: Any) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_parent_death)
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    parent = os.environ.get(PARENT_ENV)
    if parent and os.getppid() != int(parent):  # the parent died before the prctl above
        on_parent_death(signal.SIGTERM, None)


def _parsed(line: str) -> dict[str, Any]:
    """A reply line as a dict ({} for a line that is not a JSON object: it carries no token)."""
    try:
        reply = json.loads(line)
    except ValueError:
        return {}
    return reply if isinstance(reply, dict) else {}


def _handler(entry: str, setup: Any) -> Callable[[Any], Any]:
    module, _, factory = entry.partition(":")
    return getattr(importlib.import_module(module), factory)(setup)


def _failure(exc: BaseException) -> str:
    message = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def main(argv: list[str]) -> int:
    """The child: the setup, then each job from stdin answered with one reply line on the pipe argv[2]."""
    entry, folder, replies = argv[0], Path(argv[1]), os.fdopen(int(argv[2]), "w", encoding="utf-8")
    die_with_parent(folder)

    def reply(token: str, message: dict[str, Any]) -> None:
        replies.write(json.dumps({"token": token, **message}, default=str) + "\n")
        replies.flush()

    setup = json.loads(sys.stdin.readline())
    try:
        handle = _handler(entry, setup["job"])
    except Exception as exc:  # noqa: BLE001 - a plugin that fails on import: the parent says so for every job left
        traceback.print_exc()
        reply(setup["token"], {"error": _failure(exc)})
        return 1
    reply(setup["token"], {"result": "ready"})
    for line in sys.stdin:
        message = json.loads(line)
        try:
            reply(message["token"], {"result": handle(message["job"])})
        except Exception as exc:  # noqa: BLE001 - a job's error is its reply; the child serves the next job
            traceback.print_exc()
            reply(message["token"], {"error": _failure(exc)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
