"""The untrusted side of `tunix_lite.sandbox`: confine a fresh process, run the program, probe it.

Started once per trainer as `python -I -S sandbox_child.py --zygote FD` (standard library only,
nothing of tunix_lite imported): the zygote. It never runs a program itself. For each call it
receives a config path and a results pipe on the socket FD, and forks a child: a pristine copy of
an interpreter that has run no untrusted code, which no earlier call's patch can reach (a fork
costs about a millisecond; starting an interpreter, forty). Where its children cannot read the
standard library (started by root with Python in root's home, as under pyenv), the zygote imports
the standard modules programs use most (`PRELOAD`) before its first fork, so they are there. It is
non-dumpable, so a program cannot read or trace its way into it, and it exits when the trainer's
end of the socket closes. The child, in its own session and the call's temporary directory, in
order:

1. dies with the zygote (PR_SET_PDEATHSIG), so a killed trainer leaves nothing running;
2. where the kernel allows it, new network, PID and IPC namespaces (no network; the trainer's pid
   is not visible, so it cannot be signalled), then fork: the program runs as pid 1, and the whole
   namespace dies with it; and a mount namespace in which the sandbox directory is a tmpfs of the
   call's disk quota, gone with it. Root makes them directly and then becomes `nobody` (kernel uid
   65534, no groups, no capabilities); any other user makes them inside a new user namespace that
   maps only its own uid. So the program never runs as kernel uid 0: root's files and sockets are
   out of reach, and the process limit holds (the kernel does not apply it to uid 0);
3. rlimits: CPU seconds, address space, file size, open files, no core files and no new processes;
4. Landlock where the kernel has it: reads only beneath the standard library and system library
   folders, writes only in the sandbox directory, no TCP, no signals or abstract sockets outside the
   sandbox;
5. a seccomp filter (x86-64 and arm64) that refuses `socket()` of every family, unix sockets
   included, and io_uring (whose requests seccomp cannot see), with no new privileges: the child
   holds the only channel it needs, its results pipe, already;
6. the results pipe moved off fd 1 (print() in the program goes to /dev/null), then the program and
   every probe are compiled before any of the program runs (patching `compile` cannot skip a probe),
   the program runs, and each probe's value is written as one JSON line of plain, type-tagged
   values.

What the program writes is never a verdict: the trusted side compares the values it gets with
expected values it never sent here. A program can lie about its own values, which is the same as
returning them.
"""

import ctypes
import errno
import functools
import itertools
import json
import os
import pwd
import resource
import signal
import socket
import sys

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 4, 36, 38
_CLONE_NEWUSER, _CLONE_NEWNET, _CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
_CLONE_NEWIPC, _CLONE_NEWNS = 0x08000000, 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
NOBODY = 65534  # the kernel uid and gid a child started by root runs as, where no `nobody` exists
# Imported by the zygote before its first fork (see the module docstring): what programs import
# most, among them everything an RL code task's solution usually needs.
PRELOAD = ("abc", "array", "base64", "binascii", "bisect", "calendar", "cmath", "collections",
           "contextlib", "copy", "dataclasses", "datetime", "decimal", "difflib", "encodings.ascii",
           "encodings.idna", "encodings.latin_1", "enum", "fractions", "functools", "hashlib",
           "heapq", "io", "itertools", "math", "numbers", "operator", "pprint", "queue", "random",
           "re", "statistics", "string", "struct", "subprocess", "textwrap", "time", "typing",
           "unicodedata", "uuid", "weakref", "zlib")
ITEMS = 1_000_000  # the most items an "iter" probe takes from an iterator
_ITERABLES = (list, tuple, set, frozenset, dict, str, bytes)  # plain already: sent as they are
# seccomp, per machine: the audit arch, and the numbers of seccomp(), socket() and io_uring_setup()
_SECCOMP = {"x86_64": (0xC000003E, 317, (41, 425)), "aarch64": (0xC00000B7, 277, (198, 425))}
_LANDLOCK_CREATE, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT = 444, 445, 446  # x86-64 and arm64 alike
_READ = 1 << 0 | 1 << 2 | 1 << 3  # EXECUTE | READ_FILE | READ_DIR
_FILE_RIGHTS = 1 << 0 | 1 << 1 | 1 << 2 | 1 << 14  # the only rights a rule on one file may carry


def die_with_parent(parent: int | None) -> None:
    """SIGKILL this process when its parent dies (Linux); exit now if `parent` is gone already."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:  # it died before the line above: nobody waits
        os._exit(1)


def enter_namespaces() -> bool:
    """New network, PID and IPC namespaces, then fork: the child goes on as pid 1; this process
    waits for it and exits with its status. Root makes them directly (and must `leave_root`
    after); any other user inside a new user namespace that maps only its own uid, so that its
    kernel uid stays its own. False (and nothing changed) where the kernel refuses."""
    if _libc is None:
        return False
    uid, gid = os.getuid(), os.getgid()
    user = 0 if uid == 0 else _CLONE_NEWUSER
    if _libc.unshare(user | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC) != 0:
        return False
    maps = (("uid_map", f"0 {uid} 1"), ("setgroups", "deny"), ("gid_map", f"0 {gid} 1"))
    for name, text in maps if user else ():
        try:
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        except OSError:  # unmapped, the program runs as the overflow user: fewer rights, not more
            pass
    child = os.fork()
    if child:
        _, status = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    die_with_parent(None)  # its parent is outside the namespace (getppid() is 0 in here)
    return True


def _private_disk(megabytes: int | None, entries: int | None) -> bool:
    """The working directory becomes a new tmpfs of `megabytes` and `entries` files and folders, in
    a mount namespace of its own: what the program writes is capped there, never reaches the disk,
    and is gone with the namespace. Call it with the rights to mount (root, or inside the user
    namespace); False (and the directory as it was) where refused."""
    if _libc is None or not megabytes or _libc.unshare(_CLONE_NEWNS) != 0:
        return False
    here = os.getcwd()
    if _libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:  # never to the host's
        return False
    options = f"size={megabytes}m,nr_inodes={entries},mode=0700".encode()
    if _libc.mount(b"tmpfs", here.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                   options) != 0:
        return False
    os.chdir(here)  # into the new mount, from the folder beneath it
    return True


def leave_root() -> int:
    """Root becomes nobody (no groups, no capabilities): the process limit then holds (the kernel
    ignores it for uid 0), and root's files, sockets and processes are out of reach. Returns the
    kernel uid this process runs as now; call it outside a user namespace."""
    if os.getuid() != 0:
        return os.getuid()
    try:
        nobody = pwd.getpwnam("nobody")
        uid, gid = nobody.pw_uid, nobody.pw_gid
    except KeyError:
        uid = gid = NOBODY
    os.chown(os.getcwd(), uid, gid)  # the sandbox directory stays writable
    os.setgroups([])
    os.setgid(gid)  # as root, both set the real, effective and saved ids
    os.setuid(uid)
    if _libc is not None:  # a change of uid clears both: keep the /proc files ours, and the signal
        _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getuid()


def confine_ids(disk_mb: int | None = None, disk_entries: int | None = None) -> dict:
    """Namespaces where the kernel allows them, with the working directory a private tmpfs of
    `disk_mb` when given, and never kernel uid 0: {"namespaces": bool, "tmpfs": bool, "uid": the
    kernel uid this process runs as now}. Root makes the namespaces first (no user namespace
    needed) and becomes nobody in them; refused, it becomes nobody and tries again as nobody."""
    namespaces = os.getuid() == 0 and enter_namespaces()
    tmpfs = namespaces and _private_disk(disk_mb, disk_entries)
    uid = leave_root()
    if not namespaces:
        namespaces = enter_namespaces()
        tmpfs = namespaces and _private_disk(disk_mb, disk_entries)
    return {"namespaces": namespaces, "tmpfs": tmpfs, "uid": uid}


def set_limits(config: dict) -> None:
    """rlimits from `config`; a None leaves that limit as it is (the grader's worker runs jax, which
    needs its threads and a large address space)."""
    memory, file = (config[key] and config[key] * 2**20 for key in ("memory_mb", "file_mb"))
    limits = ((resource.RLIMIT_CPU, config["cpu_seconds"]), (resource.RLIMIT_AS, memory),
              (resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, file),
              (resource.RLIMIT_NOFILE, config.get("open_files", 64)),
              (resource.RLIMIT_NPROC, config.get("processes", 0)))  # 0: no new process (but root)
    for name, value in limits:
        if value is None:
            continue
        try:
            resource.setrlimit(name, (value, value))
        except (ValueError, OSError):  # a lower hard limit already: keep it
            pass


def landlock(read_paths: list[str], write_path: str) -> int:
    """Confine this process with Landlock; returns the ABI version used, 0 where there is none."""
    if _libc is None:
        return 0
    syscall = _libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # 1: the version
    if abi < 1:
        return 0
    all_fs = (1 << 13) - 1 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0) \
        | (1 << 15 if abi >= 5 else 0)
    net = 0b11 if abi >= 4 else 0  # bind and connect TCP: handled, and no rule allows them
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets and signals outside the sandbox
    attr = (ctypes.c_uint64 * 3)(all_fs, net, scoped)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = syscall(_LANDLOCK_CREATE, ctypes.byref(attr), ctypes.c_size_t(size),
                      ctypes.c_uint32(0))
    if ruleset < 0:
        return 0

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    for path, access in [(p, _READ) for p in read_paths] + [(write_path, all_fs)]:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        rights = access & all_fs & (~0 if os.path.isdir(path) else _FILE_RIGHTS)
        syscall(_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(PathBeneath(rights, fd)), 0)
        os.close(fd)
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    ok = syscall(_LANDLOCK_RESTRICT, ruleset, 0) == 0
    os.close(ruleset)
    return abi if ok else 0


@functools.cache
def _seccomp_filter():
    """The classic BPF program of `seccomp`, built once (in the zygote); None on other machines."""
    if _libc is None or os.uname().machine not in _SECCOMP:
        return None
    arch, _, refused = _SECCOMP[os.uname().machine]
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EACCES  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
    load, equal, at_least, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JGE|K, RET|K
    code = [(load, 0, 0, 4), (equal, 1, 0, arch), (ret, 0, 0, deny),  # another ABI (i386): refuse
            (load, 0, 0, 0)]  # the syscall number
    checks = [(at_least, 0x40000000)] + [(equal, nr) for nr in refused]  # x32 numbers, then ours
    refuse_at = len(code) + len(checks) + 1
    code += [(op, refuse_at - (len(code) + i) - 1, 0, k) for i, (op, k) in enumerate(checks)]
    code += [(ret, 0, 0, allow), (ret, 0, 0, deny)]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(code))(*(Filter(*c) for c in code))
    return Program(len(code), filters), filters  # the array must outlive the program that points


def seccomp() -> bool:
    """No new privileges (setuid programs stay unprivileged), then refuse `socket()` of every
    family, and io_uring, to every thread of this process from now on; False where this kernel or
    machine cannot (the sockets are then as reachable as the user's permissions make them)."""
    if _libc is None:
        return False
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    built = _seccomp_filter()
    if built is None:
        return False
    syscall = _libc.syscall
    syscall.restype = ctypes.c_long
    number = _SECCOMP[os.uname().machine][1]
    set_mode_filter, tsync = 1, 1  # SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC
    return syscall(number, set_mode_filter, tsync, ctypes.byref(built[0])) == 0


def to_plain(value, depth: int = 0, leaf=None):
    """`value` as a type-tagged JSON tree of builtins, exact types only: an object with a forged
    `__eq__`, or a subclass of int, has no plain form and fails its probe. `leaf(value)` tags what
    is not a builtin (the grader's arrays), or raises."""
    kind = type(value)
    if depth > 50:
        raise ValueError("nested too deep")
    if value is None or kind in (bool, int, float, str):
        return [kind.__name__, value]
    if kind in (list, tuple, set, frozenset):
        return [kind.__name__, [to_plain(v, depth + 1, leaf) for v in value]]
    if kind is dict:
        return ["dict", [[to_plain(k, depth + 1, leaf), to_plain(v, depth + 1, leaf)]
                         for k, v in value.items()]]
    if kind is bytes:
        return ["bytes", value.hex()]
    if leaf is not None:
        return leaf(value)
    raise TypeError(f"not a plain value: {kind.__name__}")


def serve(channel: int) -> None:
    """The zygote's loop: for each request (a config path, with a results pipe attached) fork a
    child that runs the call, and answer the child's pid. Exits when the trainer's end closes."""
    if _libc is not None:
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # no program can ptrace or read its way in here
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come here, not to init
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # and are reaped as they exit
    if os.getuid() == 0 and not _world_readable(os.path.dirname(os.__file__)):
        for name in PRELOAD:  # its children become nobody, who could not import them
            try:
                __import__(name)
            except ImportError:
                pass
    _seccomp_filter()
    requests, me = socket.socket(fileno=channel), os.getpid()
    while True:
        path, fds = _request(requests)
        child = os.fork()
        if child == 0:
            try:
                requests.close()
                _call(path, fds[0], me)
            finally:
                os._exit(0)
        os.close(fds[0])
        requests.sendall(f"{child}\n".encode())


def _world_readable(folder: str) -> bool:
    """Whether any user may reach `folder` (every folder above it searchable by others) and list it
    (the standard library: pyenv as root keeps it in root's home, mode 0700)."""
    path = os.path.abspath(folder)
    while True:
        mode = os.stat(path).st_mode
        if not mode & (0o001 if path != os.path.abspath(folder) else 0o005):
            return False
        if path == os.path.dirname(path):
            return True
        path = os.path.dirname(path)


def _request(requests: socket.socket) -> tuple[str, list[int]]:
    """One request: a config path ending in a newline, the results pipe attached. Exits when the
    trainer's end is closed (a stream socket, so that this holds on macOS too)."""
    data, fds = b"", []
    while not data.endswith(b"\n"):
        try:
            chunk, more, _, _ = socket.recv_fds(requests, 4096, 1)
        except OSError:
            os._exit(0)
        if not chunk:  # the trainer is gone
            os._exit(0)
        data, fds = data + chunk, fds + more
    if len(fds) != 1:
        os._exit(1)
    return data.decode().strip(), fds


def _call(config_path: str, results: int, zygote: int) -> None:
    """One call, in a fresh fork of the zygote: leave the zygote's state, confine, run, probe."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()  # its own session and process group, which the trusted side kills whole
    if _libc is not None:
        _libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # else /proc/self/uid_map is root's to write
    os.dup2(results, 1)
    os.close(results)
    home = os.path.dirname(config_path)
    os.chdir(home)
    os.environ.update(HOME=home, TMPDIR=home)
    with open(config_path) as f:
        config = json.load(f)
    os.unlink(config_path)
    die_with_parent(zygote)
    isolation = confine_ids(config.get("disk_mb"), config.get("disk_entries"))
    set_limits(config)
    out = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_WRONLY)  # before Landlock, which allows no writes outside
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    isolation["landlock"] = landlock(config["read_paths"], os.getcwd())
    isolation["seccomp"] = seccomp()
    if _libc is not None:  # nothing below needs its /proc files: no other process may read them
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    send, evaluate, execute = out.write, eval, exec  # held now: the program's patches miss them
    as_list, first = list, itertools.islice

    def answer(message: dict) -> None:
        send(json.dumps(message) + "\n")

    answer({"ready": isolation})
    try:
        program = compile(config["program"], "<program>", "exec")
        probes = [(mode, compile(source, "<probe>", "exec" if mode == "exec" else "eval"))
                  for mode, source in config["probes"]]
    except (SyntaxError, ValueError) as e:
        answer({"program": f"{type(e).__name__}: {e}"[:300]})
        return
    namespace = {"__name__": "__main__"}
    try:
        execute(program, namespace)  # the untrusted program, in the confinement above
    except BaseException as e:  # noqa: BLE001 - SystemExit included: the program failed to run
        answer({"program": f"{type(e).__name__}: {e}"[:300]})
        return
    answer({"program": "ok"})
    for index, (mode, code) in enumerate(probes):
        try:
            value = execute(code, namespace) if mode == "exec" else evaluate(code, namespace)
            if mode == "iter" and type(value) not in _ITERABLES:
                value = as_list(first(value, ITEMS + 1))  # a generator, as a test consumes it
            answer({"probe": index, "value": to_plain(value)})
        except BaseException as e:  # noqa: BLE001
            answer({"probe": index, "error": f"{type(e).__name__}: {e}"[:300]})


if __name__ == "__main__" and sys.argv[1:2] == ["--zygote"]:
    serve(int(sys.argv[2]))
