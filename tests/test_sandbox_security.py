"""The verifier pool under attack: every way a hostile program got through before (issue 34), each
asserting the honest outcome: score 0 for forgeries, no file outside the sandbox, no secret in any
output, no survivor process, this (trainer) process alive, no byte received by a listener.

What the sandbox can enforce depends on the kernel (`sandbox.capabilities()`); a test that needs
namespaces or Landlock says so in its skip reason. No JAX here.
"""

import gc
import json
import os
import pickle
import shutil
import signal
import socket
import stat
import struct
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tunix_lite.rewards import sandbox
from tunix_lite.verifiers import VerifierPool, check_code, verifier_events, verifier_reward

TESTS = "assert add(2, 2) == 4\nassert add(1, 5) == 6\nassert add(-1, 1) == 0"
CAN = sandbox.capabilities()
SIGNALS_SCOPED = CAN.get("namespaces") or CAN.get("landlock", 0) >= 6
needs_signal_scope = pytest.mark.skipif(
    not SIGNALS_SCOPED, reason="no PID namespace and no Landlock ABI >= 6 here: a program can "
    "signal the trainer by pid (see tunix_lite/rewards/sandbox.py), so this attack would end the test run")
needs_landlock = pytest.mark.skipif(
    not CAN.get("landlock"), reason="no Landlock here: a program can read and write wherever its "
    "user can (see tunix_lite/rewards/sandbox.py)")


class Marker:
    """Unpickling this creates a file: proof that a pickle from outside ran in the trainer."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def flood_pipes(payload_hex: str) -> float:
    """A check that has taken over its worker: write a framed pickle to every socket it holds (its
    answer channel to the trainer among them)."""
    payload = bytes.fromhex(payload_hex)
    for fd in range(3, 64):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, struct.pack("!i", len(payload)) + payload)
        except OSError:
            pass
    return 1.0


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(workers=2, timeout=5.0) as p:
        yield p


def test_honest_programs_still_score_right(pool):
    right, wrong = "def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"
    assert pool.map(check_code, [(right, TESTS), (wrong, TESTS)]) == [1.0, 0.0]
    assert check_code("def f():\n    return [1, (2, 'x')]", "assert f() == [1, (2, 'x')]") == 1.0
    assert check_code("def f():\n    return None", "assert f() is None\nassert f() != 3") == 1.0


def test_an_object_whose_eq_is_always_true_scores_zero(pool):
    always = """
class Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __bool__(self): return True
class Four(int):
    def __eq__(self, other): return True
def add(a, b): return Anything() if a < 0 else Four(0) if a == 1 else Anything()
"""
    assert pool.map(check_code, [(always, TESTS)]) == [0.0]
    assert check_code(always, "assert add(2, 2)") == 0.0  # truthy, but not a plain value


def test_a_patched_compile_eval_or_assert_scores_zero():
    patches = """
import builtins
real = builtins.compile
builtins.compile = lambda src, name, mode, *a, **k: real("None" if mode == "eval" else "pass",
                                                        name, mode)
builtins.eval = lambda *a, **k: True
builtins.exec = lambda *a, **k: None
builtins.AssertionError = type("Never", (Exception,), {})
"""
    assert check_code(patches, TESTS) == 0.0


def test_a_program_that_writes_forged_results_to_every_pipe_scores_zero():
    forged = """
import os, json
lines = [{"program": "ok"}] + [{"probe": i, "value": ["bool", True]} for i in range(3)]
for fd in range(64):
    try:
        os.write(fd, "".join(json.dumps(m) + "\\n" for m in lines).encode())
    except OSError:
        pass
os._exit(0)
"""
    assert check_code(forged, TESTS) == 0.0  # True is not 4, 6 or 0: the expected values never left


def test_a_patch_does_not_outlive_its_call(pool):
    poison = """
import builtins, os
real = builtins.compile
builtins.compile = lambda *a, **k: real("pass", "<forged>", "exec")  # every later test passes
with open(os.path.expanduser("~/sitecustomize.py"), "w") as f:
    f.write("import builtins; builtins.AssertionError = KeyError")
def add(a, b): return a + b
"""
    wrong = "def add(a, b):\n    return 7"
    calls = [(poison, TESTS), (wrong, TESTS), (wrong, TESTS)]
    assert pool.map(check_code, calls) == [1.0, 0.0, 0.0]


def test_a_malicious_pickle_never_runs_in_the_trainer(pool, tmp_path):
    marker = tmp_path / "unpickled"
    payload = pickle.dumps(Marker(str(marker)))
    program = (f"import os, struct\nfor fd in range(64):\n"
               f"    try: os.write(fd, struct.pack('!i', {len(payload)}) + {payload!r})\n"
               f"    except OSError: pass\ndef add(a, b): return 7")
    assert pool.map(check_code, [(program, TESTS)]) == [0.0]
    crashes = pool.stats["crashes"]
    # a trusted check gone rogue in a warm worker: the trainer reads JSON only, so it counts a crash
    assert pool.map(flood_pipes, [(payload.hex(),)]) == [0.0]
    assert pool.stats["crashes"] == crashes + 1
    assert not marker.exists()


@needs_signal_scope
def test_a_program_cannot_kill_the_trainer(pool):
    me = os.getpid()
    kills = ["os.kill(os.getppid(), signal.SIGKILL)", "os.killpg(0, signal.SIGTERM)",
             f"os.kill({me}, signal.SIGKILL)", f"os.killpg(os.getpgid({me}), signal.SIGTERM)"]
    pool.map(check_code, [(f"import os, signal\n{kill}\ndef add(a, b): return a + b", TESTS)
                          for kill in kills])
    assert os.getpid() == me  # still here, and the pool still answers
    assert pool.map(check_code, [("def add(a, b):\n    return a + b", TESTS)]) == [1.0]


def test_a_process_group_signal_stays_in_the_sandbox_everywhere(pool):
    program = "import os, signal\nos.killpg(0, signal.SIGKILL)"
    assert pool.map(check_code, [(program, TESTS)]) == [0.0]


def _processes_with(text: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(entry.name))
        except (OSError, ValueError):
            pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds survivors through /proc (Linux)")
def test_no_process_the_program_starts_survives_the_call_or_close():
    nonce = f"{time.time() % 1000:.6f}"  # the survivors' sleep time: finds them by command line
    program = f"""
import os, subprocess
for _ in range(3):
    try:
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", "{nonce}"])
            os._exit(0)
    except OSError:
        pass
try:
    subprocess.Popen(["/bin/sleep", "{nonce}"], start_new_session=True)
except OSError:
    pass
def add(a, b): return a + b
"""
    with VerifierPool(workers=2, timeout=5.0) as pool:
        assert pool.map(check_code, [(program, TESTS)]) == [1.0]
    deadline = time.monotonic() + 3
    while _processes_with(nonce) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = _processes_with(nonce)
    for pid in survivors:  # leave the machine clean even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


@needs_landlock
def test_no_secret_reaches_the_program(monkeypatch, tmp_path):
    secret = f"hf_{uuid.uuid4().hex}"
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text(secret)
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HOME", str(home))
    me = os.getpid()
    program = f"""
import os
def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("latin-1")
    except OSError as e:
        return type(e).__name__
def everything():
    return [dict(os.environ), read("{home}/.cache/huggingface/token"),
            read(os.path.expanduser("~/.cache/huggingface/token")), read("/proc/{me}/environ"),
            read(f"/proc/{{os.getppid()}}/environ"), read("/proc/{me}/cmdline")]
"""
    leaked = repr(sandbox.run_untrusted(program, [("eval", "everything()")], timeout=5.0))
    assert "PermissionError" in leaked or "FileNotFoundError" in leaked
    assert secret not in leaked and "HF_TOKEN" not in leaked


@needs_landlock
def test_no_file_is_written_outside_the_sandbox(pool, monkeypatch, tmp_path):
    home, outside = tmp_path / "home", tmp_path / "outside"
    home.mkdir()
    outside.mkdir()
    monkeypatch.setenv("HOME", str(home))
    escape = f"/tmp/tunix-escape-{uuid.uuid4().hex}"
    program = f"""
import os
def write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "wrote"
    except OSError as e:
        return type(e).__name__
results = [os.getcwd(), write("{home}/escape"), write("{outside}/escape"), write("{escape}"),
           write("../escape-next-to-the-sandbox"), write(os.path.expanduser("~/inside")),
           write("inside")]
"""
    assert pool.map(check_code, [(program, "assert results == 0")]) == [0.0]
    workdir, *results = sandbox.run_untrusted(program, [("eval", "results")], timeout=5.0).values[0]
    assert results == ["PermissionError"] * 4 + ["wrote"] * 2  # only its own directory is writable
    assert not os.path.exists(workdir)  # ... and that is deleted after the call
    assert list(home.iterdir()) == list(outside.iterdir()) == [] and not os.path.exists(escape)
    assert not os.path.exists(os.path.join(os.path.dirname(workdir), "escape-next-to-the-sandbox"))


def _listener(kind):
    server = socket.socket(socket.AF_INET, kind)
    server.bind(("127.0.0.1", 0))
    if kind == socket.SOCK_STREAM:
        server.listen(1)
    server.settimeout(0.5)
    return server


@pytest.mark.skipif(not (CAN.get("namespaces") or CAN.get("landlock", 0) >= 4),
                    reason="no network namespace and no Landlock ABI >= 4 here: TCP is not blocked")
def test_no_tcp_byte_reaches_a_listener(pool):
    with _listener(socket.SOCK_STREAM) as server:
        port = server.getsockname()[1]
        program = (f"import socket\ntry:\n"
                   f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'x')\n"
                   f"except OSError:\n    pass\ndef add(a, b): return a + b")
        assert pool.map(check_code, [(program, TESTS)]) == [1.0]
        with pytest.raises(TimeoutError):
            server.accept()


@pytest.mark.skipif(not CAN.get("namespaces"), reason="no network namespace here: UDP is not "
                                                      "blocked (Landlock covers TCP only)")
def test_no_udp_byte_reaches_a_listener(pool):
    with _listener(socket.SOCK_DGRAM) as server:
        port = server.getsockname()[1]
        program = (f"import socket\ntry:\n"
                   f"    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', "
                   f"('127.0.0.1', {port}))\nexcept OSError:\n    pass\n"
                   f"def add(a, b): return a + b")
        assert pool.map(check_code, [(program, TESTS)]) == [1.0]
        with pytest.raises(TimeoutError):
            server.recvfrom(64)


def test_a_users_untrusted_check_gets_the_same_treatment(pool):
    reward = verifier_reward(check_code, columns=("tests",), pool=pool)
    completions = ["<answer>def add(a, b): return a + b</answer>",
                   "<answer>import builtins\nbuiltins.compile = lambda *a, **k: None</answer>"]
    assert reward(None, completions, tests=[TESTS, TESTS]) == [1.0, 0.0]


def test_a_dead_zygote_is_replaced_and_the_next_call_scores(pool):
    assert pool.map(check_code, [("def add(a, b):\n    return a + b", TESTS)]) == [1.0]
    zygote = sandbox._ZYGOTE._process
    zygote.kill()  # as an attack on it, or the OOM killer, would
    zygote.wait()
    assert pool.map(check_code, [("def add(a, b):\n    return a + b", TESTS)]) == [1.0]
    assert sandbox._ZYGOTE._process.pid != zygote.pid


# ------------------------------------------------------------------ issue 56: the design known
needs_seccomp = pytest.mark.skipif(
    CAN.get("seccomp", os.uname().machine in ("x86_64", "aarch64")) is False,
    reason="no seccomp filter here (not x86-64 or arm64 Linux): a program can connect to a unix "
    "socket its user may reach (see tunix_lite/rewards/sandbox.py)")
COLLIDING = 2**61 - 1  # every multiple of this int hashes to 0


def test_the_program_never_runs_as_root_and_its_report_says_what_holds():
    """Before: the child ran as kernel uid 0 inside its user namespace, and the report had no word
    for the unix sockets it could reach."""
    assert CAN["uid"] != 0 and set(CAN) == {"namespaces", "tmpfs", "uid", "landlock", "seccomp"}
    outcome = sandbox.run_untrusted("import os", [("eval", "os.getuid()")], timeout=5.0)
    assert outcome.isolation == CAN
    if os.getuid() == 0:  # no user namespace in between: the program sees its kernel uid
        assert outcome.values[0] == CAN["uid"] != 0
    words = sandbox.describe(CAN)
    assert f"runs as uid {CAN['uid']}" in words and "root" not in words, words
    assert "unix sockets reachable" in sandbox.describe(dict(CAN, seccomp=False, namespaces=True))


@needs_seccomp
def test_no_unix_socket_is_reached(pool, unix_servers):
    """Before: a program connected to a root-only unix socket (the server saw peer uid 0) and to an
    open one; a network namespace does not cover the filesystem, nor Landlock connect()."""
    paths = unix_servers.paths
    program = f"""
import socket
def attempt(path):
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path)
        client.sendall(b"x")
        return "connected"
    except OSError as e:
        return type(e).__name__
results = [attempt(path) for path in {paths!r}]
def add(a, b): return a + b
"""
    assert pool.map(check_code, [(program, TESTS)]) == [1.0]
    results = sandbox.run_untrusted(program, [("eval", "results")], timeout=5.0).values[0]
    assert results == ["PermissionError", "PermissionError"]
    assert unix_servers.peer_uids() == [[], []]


def test_a_fork_loop_starts_no_process(pool):
    """Before: as kernel uid 0 (in a user namespace) the process limit did not hold, and a program
    forked 150 children inside its timeout."""
    program = """
import os
forks = 0
for _ in range(150):
    try:
        if os.fork() == 0:
            os._exit(0)
        forks += 1
    except OSError:
        pass
def add(a, b): return a + b
"""
    assert pool.map(check_code, [(program, TESTS)]) == [1.0]
    assert sandbox.run_untrusted(program, [("eval", "forks")], timeout=5.0).values == {0: 0}


def test_a_patched_set_cannot_pass_a_non_literal_assert(pool):
    """Before: the sandbox evaluated the whole assert, so `builtins.set = lambda *a: 1` made both
    sides 1 and the wrong program scored 1.0."""
    tests = "assert set(f(3)) == set((4, 5))\nassert sorted(f(3)) == sorted([5, 4])"
    patched = ("import builtins\nbuiltins.set = lambda *a: 1\nbuiltins.sorted = lambda *a, **k: 1\n"
               "def f(x): return [9]")
    honest = "def f(x):\n    yield 5\n    yield 4"
    assert pool.map(check_code, [(patched, tests), (honest, tests)]) == [0.0, 1.0]


def test_an_answer_with_colliding_hashes_costs_no_more_than_its_timeout(pool):
    """Before: a forged answer, a set of ints that all hash to 0, held the trainer for seconds past
    the call's timeout (quadratic to build here) and counted no timeout. Now its decoding refuses
    it at once, and the pool counts an error."""
    values = [["int", COLLIDING * i] for i in range(1, 20_001)]
    line = json.dumps({"probe": 0, "value": ["set", values]})
    forged = f"""
import os
lines = ('{{"program": "ok"}}\\n' + {line!r} + "\\n").encode()
for fd in range(3, 64):
    try:
        os.write(fd, lines)
    except OSError:
        pass
os._exit(0)
"""
    errors, over = pool.stats["errors"], verifier_events()["over_limits"]
    # 3 s for the 600 kB answer to cross the pipe on a loaded machine (at 1 s, a busy CI machine
    # counted a timeout); before, decoding alone took the trainer 23 s of CPU whatever the timeout.
    # The bound is the timeout: a refusal costs ~0.1 s, but this process's other threads and a
    # garbage collection of an xdist worker's heap count too (1.06 s once, in a CI run)
    timeout = 3.0
    gc.collect()
    with VerifierPool(workers=1, timeout=timeout) as quick:
        start, cpu = time.monotonic(), time.process_time()  # the trainer's own work: the decoding
        assert quick.map(check_code, [(forged, "assert f() == {1}")]) == [0.0]
        assert time.process_time() - cpu < timeout and time.monotonic() - start < 10.0, quick.stats
        assert quick.stats["errors"] == 1 and "share one hash" in quick.last_errors[-1], quick.stats
    assert verifier_events()["over_limits"] == over + 1 and pool.stats["errors"] == errors
    cpu = time.process_time()
    with pytest.raises(sandbox.OverLimits):  # a list of them, made a set by the test: refused here
        check_code(f"def f():\n    return [{COLLIDING} * i for i in range(1, 20001)]",
                   "assert set(f()) == {1}", timeout=timeout)
    assert time.process_time() - cpu < timeout


@pytest.fixture
def on_tmpfs(monkeypatch):
    """Sandbox folders on a tmpfs where there is one: this machine's disk takes 4 ms a rmdir."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        monkeypatch.setattr(tempfile, "tempdir", "/dev/shm")


@pytest.mark.parametrize("tmpfs", [True, False], ids=["private tmpfs", "folder"])
def test_a_deep_tree_leaves_nothing_behind(tmpfs, on_tmpfs, monkeypatch):
    """Before: a folder 1,500 deep made the cleanup raise RecursionError, and the program's files
    stayed on disk after every completion that did it. Now the folder goes, at any depth, also
    what the program made unreadable: with its private tmpfs, or (no namespaces, or TMPFS off)
    removed here by `remove_tree`."""
    monkeypatch.setattr(sandbox, "TMPFS", tmpfs)
    before = set(os.listdir(tempfile.gettempdir()))
    program = """
import os
top = os.getcwd()
for depth in range(2000):
    os.mkdir("d")
    os.chdir("d")
    if depth % 500 == 0:
        os.mkdir("locked")
        open("locked/f", "w").write("x" * 1000)
        os.chmod("locked", 0)
def add(a, b): return a + b
"""
    outcome = sandbox.run_untrusted(program, [("eval", "top"), ("eval", "add(2, 2)")], timeout=10.0)
    assert outcome.values[1] == 4 and not os.path.exists(outcome.values[0])
    assert set(os.listdir(tempfile.gettempdir())) <= before


def test_remove_tree_takes_any_depth_width_and_mode(on_tmpfs):
    """What the trusted side does with a sandbox folder where no private tmpfs holds it (and with
    the grader's worker folder): 2,000 deep, 3,000 wide, folders made unreadable, a link out."""
    top, outside = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    (outside / "keep").write_text("x")
    for i in range(3000):
        (top / f"wide{i}").mkdir()
    (top / "link").symlink_to(outside)
    here = os.open(top, os.O_RDONLY)
    for depth in range(2000):
        os.mkdir("d", dir_fd=here)
        deeper = os.open("d", os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = deeper
        if depth % 500 == 0:
            os.mkdir("locked", dir_fd=here)
            os.close(os.open("locked/f", os.O_CREAT | os.O_WRONLY, dir_fd=here))
            os.chmod("locked", 0, dir_fd=here)
    os.close(here)
    assert sandbox.remove_tree(str(top))[1] == 3000 + 1 + 2000 + 4 * 2
    assert not top.exists() and (outside / "keep").read_text() == "x"
    shutil.rmtree(outside)


@pytest.mark.parametrize("tmpfs", [True, False], ids=["private tmpfs", "folder"])
def test_a_call_that_fills_the_disk_is_held_to_its_quota(tmpfs, pool, on_tmpfs, monkeypatch):
    """Files of at most FILE_MB each and DISK_MB in all: a private tmpfs refuses more (no space
    left); in a folder (no namespaces, or TMPFS off), the call fails after it (an error, counted).
    Nothing stays either way."""
    monkeypatch.setattr(sandbox, "TMPFS", tmpfs)
    program = f"""
import os
written = 0
for i in range({sandbox.DISK_MB // sandbox.FILE_MB + 1}):
    try:
        with open(f"f{{i}}", "wb") as f:
            f.write(b"x" * {sandbox.FILE_MB * 2**20})
        written += {sandbox.FILE_MB * 2**20}
    except OSError:
        pass
try:
    open("big", "wb").write(b"x" * {sandbox.FILE_MB * 2**20 + 1})
except OSError as e:
    big = type(e).__name__
def add(a, b): return a + b
"""
    before = set(os.listdir(tempfile.gettempdir()))
    quota, errors = verifier_events()["disk_quota"], pool.stats["errors"]
    if tmpfs and CAN["tmpfs"]:
        outcome = sandbox.run_untrusted(program, [("eval", "written"), ("eval", "big")],
                                        timeout=10.0)
        assert outcome.values[0] == sandbox.DISK_MB * 2**20 and outcome.values[1] == "OSError"
    else:
        assert pool.map(check_code, [(program, TESTS)]) == [0.0]
        assert pool.stats["errors"] == errors + 1 and "quota" in pool.last_errors[-1]
        assert verifier_events()["disk_quota"] == quota + 1
    assert set(os.listdir(tempfile.gettempdir())) <= before
