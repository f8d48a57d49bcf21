"""Run a grading worker as a child the grader controls, and leave nothing of it behind.

- a fresh temporary working directory (relative paths in learner code land there) and a scrubbed
  environment (PATH, locale and what Python needs to import the package; no tokens, no PWD);
- its own process group, killed on a deadline; on Linux the grader is also a *child subreaper* while the
  worker runs, so a grandchild that left the group (setsid, double fork) is reparented to the grader and
  killed too, before any report is written;
- results over a pipe opened before the worker starts; stdout and stderr go to a log, never parsed.

Not a security boundary against code that sets out to attack the grader; course/GRADING.md says what is
(a container for the instructor mode).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import selectors
import signal
import site
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT")
_MAX_LINE = 1 << 20  # a result line is small; a longer one is not ours


def scrubbed_env(home: str) -> dict[str, str]:
    """The worker's whole environment: enough to import tunix_lite and jax on the CPU, nothing else."""
    package_root = str(Path(__file__).resolve().parents[2])  # works from a checkout without pip install
    paths = [package_root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    return env | {"HOME": home, "TMPDIR": home, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
                  "PYTHONUSERBASE": site.getuserbase(),  # HOME moved: keep a --user install importable
                  "PYTHONDONTWRITEBYTECODE": "1", "JAX_PLATFORMS": "cpu"}


def _libc_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def _children() -> set[int]:
    """pids whose parent is this process (Linux /proc; empty elsewhere)."""
    me, out = os.getpid(), set()
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:  # field 4, after the parenthesised command name
            out.add(int(entry.name))
    return out


@contextlib.contextmanager
def reaping() -> Iterator[callable]:
    """Within the block this process adopts orphaned descendants; the yielded sweep() kills and reaps every
    child that appeared since the block began. Restores the previous subreaper setting on exit."""
    prctl = _libc_prctl()
    previous = ctypes.c_int(0)
    if prctl:
        prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0)
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    known = _children()

    def sweep() -> int:
        killed = 0
        for _ in range(100):  # a process may fork while its siblings are being killed: repeat until none
            strays = _children() - known
            if not strays:
                break
            for pid in strays:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            for pid in strays:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
        return killed

    try:
        yield sweep
    finally:
        sweep()
        if prctl:
            prctl(_PR_SET_CHILD_SUBREAPER, previous.value, 0, 0, 0)


class Worker:
    """One worker process: `messages()` yields its result lines until it ends or a deadline passes."""

    def __init__(self, argv: list[str], payload: dict, *, workdir: str, log: str):
        read_fd, write_fd = os.pipe()
        os.set_inheritable(write_fd, True)
        with open(log, "wb") as log_file:
            self.proc = subprocess.Popen(argv + ["--results-fd", str(write_fd)], stdin=subprocess.PIPE,
                                         stdout=log_file, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                         cwd=workdir, env=scrubbed_env(workdir), start_new_session=True)
        os.close(write_fd)  # the worker holds the only write end now
        self.log, self.started = log, time.monotonic()
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(json.dumps(payload).encode())
            self.proc.stdin.close()

    def messages(self, deadline) -> Iterator[dict | None]:
        """Parsed lines; None once when `deadline()` (a monotonic time or None) passes; stops at EOF."""
        selector = selectors.DefaultSelector()
        selector.register(self._reader, selectors.EVENT_READ)
        try:
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    with contextlib.suppress(ValueError):
                        message = json.loads(line)
                        if isinstance(message, dict):
                            yield message
                limit = deadline()
                wait = None if limit is None else max(0.0, limit - time.monotonic())
                if not selector.select(wait):
                    yield None
                    return
                chunk = self._reader.read(65536)
                if not chunk:
                    return
                self._buffer = (self._buffer + chunk)[-_MAX_LINE:]
        finally:
            selector.close()

    def stop(self) -> None:
        """Kill the worker's process group and reap the worker."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.close()

    def log_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError):
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode(errors="replace")
        return ""

