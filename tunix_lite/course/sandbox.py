"""Run a grading worker as a child the grader controls, and leave nothing of it behind.

- a fresh temporary working directory (relative paths in learner code land there) and a scrubbed
  environment (PATH, locale and what Python needs to import the package; no tokens, no PWD);
- its own process group, killed after each attempt; on Linux the grader is also a *child subreaper*
  while the worker runs, so a grandchild that left the group (setsid, double fork) is reparented to the
  grader and killed too, before any report is written;
- two pipes opened before the worker starts: requests down (its orders, then calls), answers up;
  stdout and stderr go to a log, never parsed. Every answer is a value, never a verdict.

The worker confines itself further before learner code runs (tunix_lite.course.worker: namespaces,
Landlock); course/GRADING.md says what holds where.
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

from tunix_lite.course.setup import SMALL_PROGRAM_XLA_FLAGS
from tunix_lite.rewards.sandbox import loads

_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT")
_MAX_LINE = 1 << 28  # the largest answer: arrays of the graded tests are far smaller


def scrubbed_env(home: str) -> dict[str, str]:
    """The worker's whole environment: enough to import tunix_lite and jax on the CPU, nothing else."""
    package_root = str(Path(__file__).resolve().parents[2])  # works from a checkout without pip install
    paths = [package_root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    return env | {"HOME": home, "TMPDIR": home, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
                  "PYTHONUSERBASE": site.getuserbase(),  # HOME moved: keep a --user install importable
                  "PYTHONDONTWRITEBYTECODE": "1", "JAX_PLATFORMS": "cpu",
                  "XLA_FLAGS": SMALL_PROGRAM_XLA_FLAGS,  # the graded tests' programs are tiny
                  "TUNIX_LITE_COMPILATION_CACHE": "0"}  # it would write outside the sandbox


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


class WorkerLost(Exception):
    """The worker died, or ran past its deadline: the grader restarts it for the next exercise."""


class Worker:
    """One worker process: its orders go down the requests pipe first, then `ask` sends one request
    and waits for its answer, and `messages()` yields the worker's lines until it ends or a deadline
    (`self.deadline`, a monotonic time) passes. `lost` says why it stopped answering."""

    def __init__(self, argv: list[str], orders: dict, *, workdir: str, log: str):
        request_read, self._requests = os.pipe()
        read_fd, answer_write = os.pipe()
        with open(log, "wb") as log_file:
            self.proc = subprocess.Popen(
                argv + ["--requests-fd", str(request_read), "--answers-fd", str(answer_write)],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                pass_fds=(request_read, answer_write), cwd=workdir, env=scrubbed_env(workdir),
                start_new_session=True)
        os.close(request_read)  # the worker holds the only read end of its requests now
        os.close(answer_write)  # ... and the only write end of its answers
        os.set_blocking(self._requests, False)  # a worker that stops reading cannot block us
        self.log, self.deadline, self.lost = log, time.monotonic() + 60.0, None
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self._send(orders)

    def _send(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        with selectors.DefaultSelector() as selector:
            selector.register(self._requests, selectors.EVENT_WRITE)
            while data:
                if not selector.select(max(0.0, self.deadline - time.monotonic())):
                    self._lose("timeout")
                try:
                    data = data[os.write(self._requests, data):]
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    self._lose("exited")

    def _lose(self, why: str):
        self.lost = self.lost or why
        raise WorkerLost(self.lost)

    def ask(self, request: dict, serve) -> dict:
        """The worker's answer to `request`, serving its calls back with `serve(message) -> answer`
        meanwhile; WorkerLost once it died or ran past the deadline."""
        if self.lost:
            raise WorkerLost(self.lost)
        self._send(request)
        for message in self.messages():
            if message is None:
                self._lose("timeout")
            if message.get("kind") == "callback":
                self._send({"kind": "answer", **serve(message)})
            elif message.get("kind") == "answer":
                return message
        self._lose("exited")

    def messages(self) -> Iterator[dict | None]:
        """Parsed lines; None once the deadline passes; stops at EOF."""
        selector = selectors.DefaultSelector()
        selector.register(self._reader, selectors.EVENT_READ)
        try:
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    with contextlib.suppress(ValueError, RecursionError):  # not ours: skipped
                        message = loads(line)
                        if isinstance(message, dict):
                            yield message
                if not selector.select(max(0.0, self.deadline - time.monotonic())):
                    yield None
                    return
                chunk = self._reader.read(1 << 20)
                if not chunk:
                    return
                self._buffer += chunk
                if len(self._buffer) > _MAX_LINE:  # no answer is this long: not ours
                    self._lose("flooded its answers")
        finally:
            selector.close()

    def stop(self) -> None:
        """Kill the worker's process group and reap the worker."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.close()
        os.close(self._requests)

    def log_tail(self, limit: int = 2000) -> str:
        with contextlib.suppress(OSError):
            with open(self.log, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode(errors="replace")
        return ""
