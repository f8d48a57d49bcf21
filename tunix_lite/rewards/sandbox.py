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
- **Bounded work here.** Decoding runs under the call's deadline (`Outcome.deadline`, which the
  caller's comparisons keep too) within `Limits`: values, items per container, nesting depth,
  integer digits, text; and a set or dict is built only once no more than a few of its values share
  a hash (30,000 ints that all hash to 0 would take seconds to put in a set). An answer past them
  is an error of its probe (`EVENTS["over_limits"]`), past the deadline a TimeoutError.
- **A fresh process per call**: a fork of a zygote interpreter (`python -I -S`: no site-packages,
  no user environment) that never runs untrusted code, so no patch outlives its call; in a
  temporary HOME and working directory: where namespaces are, a private tmpfs of `DISK_MB` and
  `DISK_ENTRIES` that vanishes with the call; elsewhere a folder deleted after without recursion,
  whatever its depth (`remove_tree`), and a call whose program left more than that there fails
  (`EVENTS["disk_quota"]`). A fork costs about 1 ms where starting an interpreter costs 40, so code
  rewards stay cheap beside an RL step (benchmarks/code_reward.py).
- **Its own session and process group**, killed whole after the call (and the child dies with its
  parent: PR_SET_PDEATHSIG); a scrubbed environment (PATH, HOME, TMPDIR, LANG: no tokens); rlimits
  on CPU seconds, address space, file size and open files, no core files, no new processes.
- **This process is made non-dumpable** (prctl PR_SET_DUMPABLE 0, Linux): other processes of your
  user cannot read its memory or environment through /proc (nor can py-spy, without root).
- **Never kernel uid 0.** A child started by root runs as `nobody` (uid 65534, no groups, no
  capabilities), with or without namespaces, so the process limit holds (the kernel skips it for
  uid 0) and root's files, sockets and processes are out of reach; anyone else's child keeps its
  own uid. Where Python lives in root's home (pyenv), `nobody` cannot read it: the program then
  imports only what the zygote loaded (`sandbox_child.PRELOAD`).
- **No sockets.** A seccomp filter (x86-64, arm64) refuses `socket()` of every family, unix
  sockets included (which neither a network namespace nor Landlock covers), and io_uring.
- **Namespaces and Landlock where the kernel offers them**, tried in every call and reported in
  `Outcome.isolation` (`capabilities()` asks once, `describe()` says it in words): new network, PID
  and IPC namespaces (no network; the trainer's pid is invisible, so it cannot be signalled; all
  the program starts dies with it); Landlock: reads only beneath the standard library and /usr,
  /lib, /bin, writes only in the sandbox directory, no TCP, and from ABI 6 no signals outside.

What holds where (checked at start, never assumed; `capabilities()` says what this machine gives):

| where                        | verdicts, bounds, not uid 0 | seccomp | namespaces | Landlock |
|------------------------------|-----------------------------|---------|------------|----------|
| Linux laptop, kernel >= 6.7  | yes                         | yes     | usually    | usually  |
| Ubuntu >= 23.10 (AppArmor)   | yes                         | yes     | often not  | yes      |
| Colab, Kaggle, Docker (root) | yes (runs as nobody)        | yes     | often not  | host's   |
| macOS                        | yes, no RLIMIT_AS/PDEATHSIG | no      | no         | no       |

Everywhere, the program cannot forge a verdict, stall the trainer with its answer, poison a later
call, leave a process or a file behind (no new processes outside a PID namespace) or, on Linux,
read the trainer's environment or open a socket. Without namespaces and Landlock it can read what
its user can (as `nobody`, world-readable files only), write where its user can, and signal
processes of its user by pid: the trainer, or a sibling sandbox to spoil another completion's
reward (a PID namespace or Landlock ABI 6 stops both). Run RL with code rewards in a container or
a VM there.
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
DISK_MB, DISK_ENTRIES = 64, 10_000  # what one call's directory may hold (its quota)
TMPFS = True  # that directory a private tmpfs where namespaces allow (off: a folder, checked after)
STARTUP = 60.0  # seconds to start and confine the child on a busy machine, outside `timeout`
MAX_OUTPUT = 4 * 2**20  # bytes read back; a program that floods the pipe loses its later answers
_READ_PATHS = ("/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache", "/dev/null", "/dev/urandom")
_PR_SET_DUMPABLE = 4
# What this process's calls saw, cumulative (RL logs the change per rollout, as verifier/<event>):
# a program that ended silently (killed, or it closed its pipe), raised, returned a value that is
# not plain data (a forged object, as an attack would) or one past `Limits`, or left more on disk
# than its quota. Timeouts raise: the caller counts them.
EVENTS: collections.Counter = collections.Counter()
EVENTS_LOCK = threading.Lock()


@dataclasses.dataclass
class Outcome:
    """What came back from one call: `program` is "ok" once the program ran (else its error, or None
    when the child said nothing); `values` and `errors` map a probe's index to its plain value or
    its error text; `over_limits` counts the values refused here for going past `Limits` (each also
    an error). `deadline` (time.monotonic()) is the call's: whatever the caller computes from the
    values (its comparisons) is part of the call and must end by then."""

    isolation: dict
    program: str | None
    values: dict[int, object]
    errors: dict[int, str]
    over_limits: int = 0
    deadline: float = math.inf


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one decoded answer may hold: `values` (scalars and containers, all together), `items` in
    one container, `depth` of nesting, `digits` of one integer, `text` characters of all strings
    and bytes together, and `same_hash`: distinct values of one set or dict that share a hash."""

    values: int = 1_000_000
    items: int = 100_000
    depth: int = 64
    digits: int = 4_300  # Python's own default limit for converting an int from text
    text: int = 2**28
    same_hash: int = 16


LIMITS = Limits()


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
                       "memory_mb": memory_mb, "file_mb": FILE_MB,
                       "disk_mb": DISK_MB if TMPFS else None, "disk_entries": DISK_ENTRIES}, f)
        child, results = _ZYGOTE.fork(config)
        try:
            output, deadline = _read(results, timeout)
        finally:
            os.close(results)
            _kill(child)
        outcome = _outcome(output, deadline)
        _count(_events(outcome))
    finally:
        used, entries = remove_tree(home)
    if used > DISK_MB * 2**20 or entries > DISK_ENTRIES:
        _count(collections.Counter(disk_quota=1))
        raise RuntimeError(f"the program left {used / 2**20:.0f} MB in {entries} files and folders "
                           f"behind, past the quota of {DISK_MB} MB in {DISK_ENTRIES}")
    return outcome


def _events(outcome: Outcome) -> collections.Counter:
    program, errors = outcome.program, outcome.errors.values()
    return collections.Counter(
        silent=program is None, program_errors=program is not None and program != "ok",
        non_plain_values=sum(e.startswith("TypeError: not a plain value") for e in errors),
        over_limits=outcome.over_limits)


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
    """What confinement this machine gives a child: {"namespaces": bool (network, PID, IPC),
    "tmpfs": bool (its folder a private tmpfs of DISK_MB), "uid": the kernel uid it runs as (never
    0), "landlock": ABI version or 0, "seccomp": bool (no socket of any family)}; `describe` says
    it in words."""
    return run_untrusted("", [], timeout=5.0).isolation


def describe(isolation: dict) -> str:
    """What an isolation report (`capabilities()`, `Outcome.isolation`, the grader's) means: which
    network the code has (unix sockets included), whose uid, which files and processes."""
    landlock, namespaces = isolation.get("landlock") or 0, isolation.get("namespaces")
    if isolation.get("seccomp"):
        network = "no network (no socket of any kind: seccomp)"
    elif namespaces:
        network = "no TCP or UDP (network namespace), but unix sockets reachable"
    elif landlock >= 4:
        network = "no TCP (Landlock), but UDP and unix sockets reachable"
    else:
        network = "network reachable"
    uid = isolation.get("uid")
    parts = [network, "runs as root" if uid == 0 else
             "uid unknown" if uid is None else f"runs as uid {uid}",
             "processes outside out of reach (PID namespace)" if namespaces else
             "signals outside refused (Landlock)" if landlock >= 6 else
             "processes of its user reachable by pid",
             f"files: Landlock ABI {landlock}" if landlock else "files: its user's permissions"]
    if "tmpfs" in isolation:  # the grader's worker writes in a folder the grader removes
        parts.append(f"disk: a private tmpfs of {DISK_MB} MB" if isolation["tmpfs"] else
                     f"disk: its folder, {DISK_MB} MB at most when it ends")
    return "; ".join(parts)


@functools.cache
def read_paths() -> list[str]:
    stdlib = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    zipped = [p for p in sys.path if p.endswith(".zip")]  # python3XX.zip, where the build has one
    return sorted(stdlib | set(zipped)) + list(_READ_PATHS)


def _read(results: int, timeout: float) -> tuple[bytes, float]:
    """The child's results pipe until it closes, and the call's deadline: the clock starts at its
    first line (it is confined by then)."""
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
    return output, deadline


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


def remove_tree(path: str) -> tuple[int, int]:
    """Delete a directory that untrusted code wrote, bottom-up through file descriptors: no
    recursion (any depth), no path longer than a name (any length), each folder listed once (any
    width), never following a link, also what the code made unreadable. Returns the (bytes,
    entries) it held: the caller's quota check."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = _open_folder(path, None, flags)
    if fd is None:
        return 0, 0
    used, entries, pending = _empty(fd)
    above: list[tuple[str, tuple[int, int], list[str]]] = []  # (name, parent, parent's pending)
    try:
        while True:
            if pending:
                name = pending.pop()
                child = _open_folder(name, fd, flags)
                if child is None:
                    continue
                above.append((name, _identity(fd), pending))
                os.close(fd)
                fd = child
                size, count, pending = _empty(fd)
                used, entries = used + size, entries + count
                continue
            if not above:  # back at the top, with everything below it gone
                break
            name, parent, pending = above.pop()
            done, fd = fd, os.open("..", flags, dir_fd=fd)
            os.close(done)
            if _identity(fd) != parent:  # moved while this ran: stop rather than delete elsewhere
                return used, entries
            try:
                os.rmdir(name, dir_fd=fd)
                entries += 1
            except OSError:
                pass
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass
    return used, entries


def _empty(fd: int) -> tuple[int, int, list[str]]:
    """Unlink every entry of the folder `fd` that is not a folder: (their bytes, their number, the
    names of its folders)."""
    used = entries = 0
    folders = []
    with os.scandir(fd) as listing:
        for entry in listing:
            try:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.name)
                    continue
                blocks = entry.stat(follow_symlinks=False).st_blocks
                os.unlink(entry.name, dir_fd=fd)
                used, entries = used + blocks * 512, entries + 1
            except OSError:
                pass
    return used, entries, folders


def _identity(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def _open_folder(name: str, parent: int | None, flags: int) -> int | None:
    """A descriptor of the folder `name` in `parent`, made ours to empty (the code may have made it
    unreadable: chmod 000); None when it cannot be opened."""
    try:
        fd = os.open(name, flags, dir_fd=parent)
    except PermissionError:
        try:
            os.chmod(name, 0o700, dir_fd=parent)
            fd = os.open(name, flags, dir_fd=parent)
        except OSError:
            return None
    except OSError:
        return None
    try:
        os.fchmod(fd, 0o700)  # and writable, for the unlinks inside it
    except OSError:
        pass
    return fd


def _outcome(output: bytes, deadline: float) -> Outcome:
    """Parse the child's JSON lines: the first answer for each key counts, anything malformed is
    dropped, a value past `LIMITS` is its probe's error; TimeoutError past `deadline`."""
    outcome = Outcome(isolation={}, program=None, values={}, errors={}, deadline=deadline)
    for line in output.splitlines():
        try:
            message = loads(line)
            if not isinstance(message, dict):
                continue
            if "ready" in message and not outcome.isolation:
                ready = message["ready"]
                outcome.isolation = {k: ready[k] for k in ("namespaces", "tmpfs", "uid", "landlock",
                                                           "seccomp")}
            elif "program" in message and outcome.program is None:
                outcome.program = str(message["program"])
            elif "probe" in message and type(message["probe"]) is int:
                index = message["probe"]
                if index in outcome.values or index in outcome.errors:
                    continue
                if "value" in message:
                    try:
                        outcome.values[index] = decode(message["value"], deadline=deadline)
                    except OverLimits as e:
                        outcome.errors[index] = f"OverLimits: {e}"
                        outcome.over_limits += 1
                else:
                    outcome.errors[index] = str(message.get("error"))[:300]
        except (ValueError, TypeError, KeyError, RecursionError):
            continue
    return outcome


class OverLimits(ValueError):
    """An answer past `Limits`: too many values, too deep, an integer too long, colliding hashes."""


_SCALARS = {"NoneType": (type(None),), "bool": (bool,), "int": (int,), "float": (int, float),
            "str": (str,)}
_SEQUENCES = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}


def loads(line: str | bytes, limits: Limits = LIMITS):
    """json.loads of one line from untrusted code, refusing an integer longer than `limits.digits`
    before converting it (quadratic in its length where Python's own limit is lifted)."""
    if 0 < sys.get_int_max_str_digits() <= limits.digits:
        return json.loads(line)  # Python refuses longer ones itself, before converting

    def integer(text: str) -> int:
        if len(text) > limits.digits + 1:
            raise OverLimits(f"an integer of more than {limits.digits} digits")
        return int(text)

    return json.loads(line, parse_int=integer)


def decode(node, leaf=None, *, limits: Limits = LIMITS, deadline: float | None = None) -> object:
    """A type-tagged JSON tree (`sandbox_child.to_plain`) as plain builtins built here; ValueError
    for anything else (OverLimits past `limits`), TimeoutError once `deadline` (time.monotonic())
    passes. `leaf(kind, value)` builds the other kinds it knows (the grader's arrays)."""
    return _Decoder(limits, deadline, leaf).decode(node, 0)


class _Decoder:
    """One answer's decoding, counting what it built against the limits."""

    def __init__(self, limits: Limits, deadline: float | None, leaf):
        self.limits, self.deadline, self.leaf = limits, deadline, leaf
        self.values = self.text = 0
        self.bits = math.ceil(limits.digits * math.log2(10))

    def decode(self, node, depth: int):
        limits = self.limits
        self.values += 1
        if self.values > limits.values or depth > limits.depth:
            raise OverLimits(f"more than {limits.values} values" if self.values > limits.values
                             else f"nested deeper than {limits.depth}")
        if self.values % 4096 == 0 and self.deadline is not None \
                and time.monotonic() > self.deadline:
            raise TimeoutError("decoding the answer ran past the call's deadline")
        if type(node) is not list or len(node) != 2 or type(node[0]) is not str:
            raise ValueError(f"not a plain value: {str(node)[:50]}")
        kind, value = node
        if kind in _SCALARS and type(value) in _SCALARS[kind]:
            if type(value) is int and value.bit_length() > self.bits:
                raise OverLimits(f"an integer of more than {limits.digits} digits")
            if kind == "str":
                self.count_text(len(value))
            return float(value) if kind == "float" else value
        if kind in _SEQUENCES and type(value) is list:
            items = [self.decode(v, depth + 1) for v in self.counted(value)]
            if kind in ("set", "frozenset"):
                check_hashes(items, limits.same_hash)
            return _SEQUENCES[kind](items)
        if kind == "dict" and type(value) is list:
            pairs = [self.pair(item, depth + 1) for item in self.counted(value)]
            check_hashes([key for key, _ in pairs], limits.same_hash)
            return dict(pairs)
        if kind == "bytes" and type(value) is str:
            self.count_text(len(value) // 2)
            return bytes.fromhex(value)
        if self.leaf is not None:
            return self.leaf(kind, value)
        raise ValueError(f"not a plain value: {kind!r}")

    def counted(self, items: list) -> list:
        if len(items) > self.limits.items:
            raise OverLimits(f"a container of more than {self.limits.items} items")
        return items

    def count_text(self, size: int) -> None:
        self.text += size
        if self.text > self.limits.text:
            raise OverLimits(f"more than {self.limits.text} characters of text")

    def pair(self, item, depth: int) -> tuple:
        if type(item) is not list or len(item) != 2:
            raise ValueError("not a plain value: a dict item that is not a pair")
        return self.decode(item[0], depth), self.decode(item[1], depth)


def check_hashes(values: list, limit: int = LIMITS.same_hash) -> None:
    """OverLimits when more than `limit` distinct values share a hash: a set or dict of them costs
    time quadratic in their number (each new one is compared with all before it). TypeError for an
    unhashable value, as building the set would raise. Linear: equal values are compared within
    one hash only, at most `limit` of them."""
    distinct: dict[int, list] = {}  # hash -> its distinct values (a hash hashes to itself)
    for value in values:
        seen = distinct.setdefault(hash(value), [])
        if value not in seen:
            seen.append(value)
            if len(seen) > limit:
                raise OverLimits(f"more than {limit} distinct values share one hash")
