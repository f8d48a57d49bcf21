"""Run untrusted Python (a model's program) in a fresh, confined interpreter; get plain values back.

This is the trusted half; `sandbox_child.py` runs on the other side. One call:

    outcome = run_untrusted("def f(x): return 2 * x", [("eval", "f(2)")], timeout=2.0)
    outcome.values  # {0: 4}: plain values only (None, bool, int, float, str, bytes, containers)

The threat model: the program comes from a policy under RL pressure, which finds whatever raises its
reward. It may patch anything in its own interpreter, read any memory or file it can reach, signal
any process it may, fork, open sockets and write anywhere its user can. What it must not reach is
the reward, the trainer and your machine. So:

- **Verdicts stay on the trusted side.** The child returns values as type-tagged JSON, decoded here
  into plain builtins (no pickle crosses, no object of the program's making survives the trip); the
  caller compares them with expected values the child never sees. An object whose `__eq__` always
  says True has no plain form; a patched `compile` or `eval` changes only values the program could
  have returned anyway.
- **A fresh process per call**: a fork of a zygote interpreter (`python -I -S`: no site-packages,
  no user environment) that never runs untrusted code, so no patch outlives its call; in a
  temporary HOME and working directory, deleted after. A fork costs about 1 ms where starting an
  interpreter costs 40, so code rewards stay cheap beside an RL step (benchmarks/code_reward.py).
- **Its own session and process group**, killed whole after the call (and the child dies with its
  parent: PR_SET_PDEATHSIG); a scrubbed environment (PATH, HOME, TMPDIR, LANG: no tokens); rlimits
  on CPU seconds, address space, file size and open files, no core files, no new processes.
- **This process is made non-dumpable** (prctl PR_SET_DUMPABLE 0, Linux): other processes of your
  user cannot read its memory or environment through /proc (nor can py-spy, without root).
- **Namespaces and Landlock where the kernel offers them**, tried in every call and reported in
  `Outcome.isolation` (`capabilities()` asks once): new user + network + PID namespaces (no network;
  the trainer's pid is invisible, so it cannot be signalled; all the program starts dies with it);
  Landlock: reads only beneath the standard library and /usr, /lib, /bin, writes only in the sandbox
  directory, no TCP, and from ABI 6 no signals to processes outside. Without namespaces, a child
  started by root runs as `nobody`, so that the process limit holds and root's processes and files
  are out of reach.

What holds where (checked at start, never assumed; `capabilities()` says what this machine gives):

| where                        | verdicts, fresh interpreter, env, rlimits | namespaces | Landlock |
|------------------------------|-------------------------------------------|------------|----------|
| Linux laptop, kernel >= 6.7  | yes                                       | usually    | usually  |
| Ubuntu >= 23.10 (AppArmor)   | yes                                       | often not  | yes      |
| Colab, Kaggle, Docker (root) | yes; without namespaces, runs as nobody   | often not  | host's   |
| macOS                        | yes, but no RLIMIT_AS, no PDEATHSIG       | no         | no       |

Everywhere, the program cannot forge a verdict, poison a later call, leave a process behind (no new
processes outside a PID namespace) or, on Linux, read the trainer's environment. Without namespaces
and Landlock it can read what its user can (as `nobody`, world-readable files only; and where Python
lives in root's home, as under pyenv, it cannot import modules not loaded yet), write where its user
can, open sockets, and signal processes of its user by pid: the trainer, or a sibling sandbox to
spoil another completion's reward (a PID namespace or Landlock ABI 6 stops both). Run RL with code
rewards in a container or a VM there.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import dataclasses
import functools
import json
import math
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

CHILD = Path(__file__).with_name("sandbox_child.py")
MEMORY_MB = 1024  # address space of the child: `"x" * 10**12` fails there, not on the machine
FILE_MB = 16  # the largest file the program may write
STARTUP = 60.0  # seconds to start and confine the child on a busy machine, outside `timeout`
MAX_OUTPUT = 4 * 2**20  # bytes read back; a program that floods the pipe loses its later answers
_READ_PATHS = ("/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", "/dev/null", "/dev/urandom")
_PR_SET_DUMPABLE = 4
# What this process's calls saw, cumulative (RL logs the change per rollout, as verifier/<event>):
# a program that ended silently (killed, or it closed its pipe), raised, or returned a value that
# is not plain data (a forged object, as an attack would). Timeouts raise: the caller counts them.
EVENTS: collections.Counter = collections.Counter()
EVENTS_LOCK = threading.Lock()


@dataclasses.dataclass
class Outcome:
    """What came back from one call: `program` is "ok" once the program ran (else its error, or None
    when the child said nothing); `values` and `errors` map a probe's index to its plain value or
    its error text."""

    isolation: dict
    program: str | None
    values: dict[int, object]
    errors: dict[int, str]


def harden_current_process() -> None:
    """Mark this (trusted) process non-dumpable on Linux: its /proc memory and environ become
    unreadable to other processes of the same user."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def run_untrusted(program: str, probes: Sequence[tuple[str, str]], *, timeout: float,
                  memory_mb: int = MEMORY_MB) -> Outcome:
    """Run `program`, then each probe (`("eval", expression)` or `("exec", statements)`) in its
    namespace, in a fresh confined interpreter; raises TimeoutError when it has not finished within
    `timeout` seconds (start-up not counted). The child and anything it started are dead, and its
    directory gone, when this returns."""
    harden_current_process()
    home = tempfile.mkdtemp(prefix="tunix-sandbox-")
    try:
        config = os.path.join(home, ".config.json")
        with open(config, "w") as f:
            json.dump({"program": program, "probes": list(map(list, probes)),
                       "read_paths": read_paths(), "cpu_seconds": math.ceil(timeout) + 1,
                       "memory_mb": memory_mb, "file_mb": FILE_MB}, f)
        child, results = _ZYGOTE.fork(config)
        try:
            output = _read(results, timeout)
        finally:
            os.close(results)
            _kill(child)
        outcome = _outcome(output)
        _count(_events(outcome))
        return outcome
    finally:
        _remove(home)


def _events(outcome: Outcome) -> collections.Counter:
    program = outcome.program
    return collections.Counter(
        silent=program is None, program_errors=program is not None and program != "ok",
        non_plain_values=sum(e.startswith("TypeError: not a plain value")
                             for e in outcome.errors.values()))


def _count(events: collections.Counter) -> None:
    with EVENTS_LOCK:
        EVENTS.update(events)


class _Zygote:
    """The interpreter that forks one child per call (`sandbox_child.serve`), started on first use
    and again whenever it has died; shared by this process's threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._socket: socket.socket | None = None
        self._owner = 0  # the pid that started it: a forked trainer starts its own

    def fork(self, config: str) -> tuple[int, int]:
        """A child for the call whose config file is `config`: (its pid, the read end of its
        results pipe)."""
        read_end, write_end = os.pipe()
        try:
            with self._lock:
                for _ in range(2):  # a dead zygote (killed; or this is a fork) is restarted once
                    if not self._alive():
                        self._start()
                    try:
                        socket.send_fds(self._socket, [f"{config}\n".encode()], [write_end])
                        return self._pid(), read_end
                    except (OSError, ValueError):
                        self.close()
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        os.close(read_end)
        raise RuntimeError("the sandbox's zygote process failed to start twice")

    def _pid(self) -> int:
        """The zygote's answer: the child's pid and a newline."""
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = self._socket.recv(32)
            if not chunk:
                raise OSError("the zygote closed its end")
            answer += chunk
        return int(answer)

    def _alive(self) -> bool:
        return (self._process is not None and self._process.poll() is None
                and self._owner == os.getpid())

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.settimeout(STARTUP)  # a stopped zygote costs one call, not the run
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(CHILD), "--zygote", str(theirs.fileno())],
                cwd="/", env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._socket, self._owner = ours, os.getpid()

    def close(self) -> None:
        """Stop the zygote (its children die with it)."""
        if self._socket is not None:
            self._socket.close()
        if self._process is not None and self._owner == os.getpid():
            self._process.kill()
            self._process.wait()
        self._process = self._socket = None


_ZYGOTE = _Zygote()
atexit.register(_ZYGOTE.close)


@functools.cache
def capabilities() -> dict:
    """What confinement this machine gives a child: {"namespaces": bool, "nobody": bool (root ran it
    as nobody), "landlock": ABI version or 0}."""
    return run_untrusted("", [], timeout=5.0).isolation


@functools.cache
def read_paths() -> list[str]:
    stdlib = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    zipped = [p for p in sys.path if p.endswith(".zip")]  # python3XX.zip, where the build has one
    return sorted(stdlib | set(zipped)) + list(_READ_PATHS)


def _read(results: int, timeout: float) -> bytes:
    """The child's results pipe until it closes; the clock starts at its first line (it is confined
    by then)."""
    output = b""
    deadline = time.monotonic() + STARTUP
    with selectors.DefaultSelector() as selector:
        selector.register(results, selectors.EVENT_READ)
        while len(output) < MAX_OUTPUT:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer in {timeout:g} s")
            if not selector.select(left):
                continue
            chunk = os.read(results, 2**16)
            if not chunk:  # closed: the child and everything that held the pipe are gone
                break
            if b"\n" not in output and b"\n" in chunk:
                deadline = time.monotonic() + timeout
            output += chunk
    return output


def _kill(child: int) -> None:
    """SIGKILL the child's whole process group (a PID namespace dies with its first process), and
    wait until the zygote has reaped it."""
    deadline = time.monotonic() + 5.0
    try:
        os.killpg(child, signal.SIGKILL)
        while time.monotonic() < deadline:
            os.killpg(child, 0)  # raises once no process of the group is left
            time.sleep(0.0005)
    except (ProcessLookupError, PermissionError):
        pass


def _remove(path: str) -> None:
    """Delete the sandbox directory, also what the program made unreadable (never following a
    symlink)."""
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), 0o700)
    shutil.rmtree(path, ignore_errors=True)


def _outcome(output: bytes) -> Outcome:
    """Parse the child's JSON lines: the first answer for each key counts, anything malformed is
    dropped."""
    outcome = Outcome(isolation={}, program=None, values={}, errors={})
    for line in output.splitlines():
        try:
            message = json.loads(line)
            if not isinstance(message, dict):
                continue
            if "ready" in message and not outcome.isolation:
                ready = message["ready"]
                outcome.isolation = {k: ready[k] for k in ("namespaces", "nobody", "landlock")}
            elif "program" in message and outcome.program is None:
                outcome.program = str(message["program"])
            elif "probe" in message and type(message["probe"]) is int:
                index = message["probe"]
                if index in outcome.values or index in outcome.errors:
                    continue
                if "value" in message:
                    outcome.values[index] = decode(message["value"])
                else:
                    outcome.errors[index] = str(message.get("error"))[:300]
        except (ValueError, TypeError, KeyError, RecursionError):
            continue
    return outcome


_SCALARS = {"NoneType": (type(None),), "bool": (bool,), "int": (int,), "float": (int, float),
            "str": (str,)}
_SEQUENCES = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}


def decode(node, leaf=None) -> object:
    """A type-tagged JSON tree (`sandbox_child.to_plain`) as plain builtins built here; ValueError
    for anything else. `leaf(kind, value)` builds the other kinds it knows (the grader's arrays)."""
    kind, value = node
    if kind in _SCALARS and type(value) in _SCALARS[kind]:
        return float(value) if kind == "float" else value
    if kind in _SEQUENCES and type(value) is list:
        return _SEQUENCES[kind](decode(v, leaf) for v in value)
    if kind == "dict" and type(value) is list:
        return {decode(k, leaf): decode(v, leaf) for k, v in value}
    if kind == "bytes" and type(value) is str:
        return bytes.fromhex(value)
    if leaf is not None and type(kind) is str:
        return leaf(kind, value)
    raise ValueError(f"not a plain value: {kind!r}")
