"""The grading worker: runs a notebook's graded cells, confined, and answers calls to them.

Started by `tunix_lite.course.grading.grade` (never by hand). The tests, the references and the
score are not here: the grader calls the learner's functions through `tunix_lite.course.calls`,
and this process only runs them and answers with plain data. In order:

1. read the orders (the code to run, which exercises, which modules are banned; never a test)
   from the requests pipe;
2. confine itself with `tunix_lite.rewards.sandbox_child`'s primitives while it has one thread (a user
   namespace needs that): die with the grader; new network, PID and IPC namespaces where the kernel
   allows them (no network; the grader's pid is not visible);
3. import jax, numpy, flax, optax, the package, the phase's public test module (for `inside`),
   the library modules the notebook's import lines name (`library_imports`: only beneath
   LIBRARIES, never a banned one; library code, not the learner's) and the standard modules
   programs use most (`sandbox_child.PRELOAD`); then rlimits (no core
   files, file size, open files); started as root, become `nobody` (after the imports: Python may
   live in root's home, which `nobody` cannot read, and there learner code imports only what is
   loaded); Landlock where the kernel has it (reads only beneath Python, its site-packages and
   tunix_lite, writes only in its temporary directory, no TCP, no signals outside); a seccomp
   filter on every thread (no socket of any family: unix sockets are the network too);
4. ban the modules the phase forbids (`ban`): out of `sys.modules`, and refused by the import
   machinery, so `os.sys.modules['optax']` or `__import__('optax')` finds nothing;
5. run the graded cells (announcing each, so a hang costs only its cell), then answer calls until
   the grader closes the pipe, and leave with os._exit (the learner's atexit hooks never run).

`sandbox_child.py` says what holds where. Landlock binds only the thread that asks for it, and jax
starts its threads before (step 3): code that reaches one of them (a callback) runs without it,
still as `nobody`, in the namespaces and under seccomp.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from tunix_lite.rewards import sandbox, sandbox_child

# The packages whose modules a notebook's import lines may load before the worker leaves root: the
# course's stack. Beneath a private folder (a checkout in a 0700 temporary directory, a venv in root's
# home) `nobody` could not import them later, and the graded cells would fail on a NameError.
LIBRARIES = ("tunix_lite", "jax", "flax", "optax", "numpy")
# Imported on first use, which may come after leaving root: numpy.testing on attribute access,
# multihost_utils by jax's device_put inside a callback (a traced call back to the grader).
LAZY = ("numpy.testing", "jax.experimental.multihost_utils")

# Read-only beneath these (besides the standard library and system libraries): what the notebook's
# imports need, and this process's own /proc entries and CPU topology, which jax reads (XLA's
# matmul library reads /proc/cpuinfo at its first large product: without it, that product fails).
_JAX_READS = ("/proc/self", "/sys/devices/system/cpu", "/etc/localtime", "/proc/cpuinfo")


def read_paths() -> list[str]:
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sysconfig.get_path("purelib"),
                sysconfig.get_path("platlib"), site.getusersitepackages(),
                str(Path(__file__).resolve().parents[1])}  # tunix_lite/, not the checkout around it
    return sorted(prefixes) + sandbox.read_paths() + list(_JAX_READS)


def library_imports(statements: Iterable[str], banned: Iterable[str]) -> list[str]:
    """The modules beneath LIBRARIES that the import `statements` (a notebook's top-level import
    lines) name, `from a import b` giving a and a.b (b may be a submodule), none of them banned."""
    import ast

    banned = tuple(banned)
    names = list(LAZY)
    for statement in statements:
        try:
            nodes = ast.walk(ast.parse(statement))
        except SyntaxError:
            continue
        for node in nodes:
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in dict.fromkeys(names)
            if name.split(".")[0] in LIBRARIES
            and not any(name == b or name.startswith(b + ".") for b in banned)]


class _Banned:
    """A meta path finder that refuses the banned modules and everything below them."""

    def __init__(self, names: Iterable[str]):
        self.names = tuple(names)

    def banned(self, name: str) -> bool:
        return any(name == banned or name.startswith(banned + ".") for banned in self.names)

    def find_spec(self, name: str, path=None, target=None):
        if self.banned(name):
            raise ImportError(f"{name} may not be used in graded cells (write it yourself)")
        return None


def ban(names: Iterable[str]) -> None:
    """The no-library rule in the import machinery: the modules `names` (and below) leave
    `sys.modules` and cannot be imported again. What already holds them keeps them (jax, the
    package); a learner who walks objects or edits `sys.meta_path` can still reach one, which the
    static rule (tunix_lite.course.rules) and course/GRADING.md account for."""
    finder = _Banned(names)
    for name in [name for name in sys.modules if finder.banned(name)]:
        del sys.modules[name]
    sys.meta_path.insert(0, finder)


def main() -> None:
    parser = argparse.ArgumentParser(description="the grading worker (started by tunix-lite grade)")
    parser.add_argument("--requests-fd", type=int, required=True)
    parser.add_argument("--answers-fd", type=int, required=True)
    args = parser.parse_args()
    requests = os.fdopen(args.requests_fd, "rb")
    orders = json.loads(requests.readline())
    sandbox_child.die_with_parent(orders["parent"])
    uid = os.getuid()  # the kernel's, before a user namespace maps it to 0
    isolation = {"namespaces": sandbox_child.enter_namespaces()}

    import flax.nnx  # noqa: F401 - imported before Landlock: reading them later may be refused
    import jax
    import numpy  # noqa: F401
    import optax  # noqa: F401

    from tunix_lite.course import calls
    from tunix_lite.course.notebook import GradedCode, build_impl

    graded = orders["graded"]  # the phase's public tests, where `inside` helpers come from
    modules = {graded: importlib.import_module(graded)} if graded else {}
    for name in [*library_imports(orders["imports"], orders["banned"]), *sandbox_child.PRELOAD]:
        try:  # while this process may still read them: `nobody` may not
            importlib.import_module(name)
        except ImportError:
            pass
    jax.numpy.zeros(1).block_until_ready()  # start the CPU backend (its threads) before the limits
    sandbox_child.set_limits({"cpu_seconds": None, "memory_mb": None, "file_mb": sandbox.FILE_MB,
                          "open_files": 1024, "processes": None})
    isolation["uid"] = sandbox_child.leave_root() if uid == 0 else uid
    isolation["landlock"] = sandbox_child.landlock(read_paths(), os.getcwd())
    isolation["seccomp"] = sandbox_child.seccomp()
    ban(orders["banned"])
    out = os.fdopen(args.answers_fd, "w", buffering=1, encoding="utf-8")
    send, dumps = out.write, json.dumps  # held now: the learner's patches of json miss them

    def tell(**message) -> None:
        send(dumps(message) + "\n")

    tell(kind="ready", isolation=isolation)
    code = GradedCode(tuple(orders["imports"]), tuple((src, tuple(names))
                                                      for src, names in orders["cells"]))
    impl, errors = build_impl(code, where=orders["where"], skip_cells=orders["skip_cells"],
                              before_cell=lambda index: tell(kind="cell", index=index))
    defined = [name for name in orders["exercises"] if callable(getattr(impl, name, None))]
    tell(kind="loaded", errors=errors, defined=defined)
    def ask(request: dict, serve) -> dict:  # a call back to a function a test passed in
        tell(kind="callback", **request)
        for line in requests:
            answer = json.loads(line)
            if answer.get("kind") == "answer":
                return answer
        os._exit(0)  # the grader is gone

    programs: dict = {}  # the learner's functions compiled for the grader's traced calls
    for line in requests:
        try:
            answer = calls.serve(impl, json.loads(line), calls.Remote(ask), programs, modules)
        except ValueError as e:  # a request this worker cannot read: say so, keep answering
            answer = {"error": ["ValueError", str(e)[:300]]}
        tell(kind="answer", **answer)
    os._exit(0)  # skip atexit hooks and finalizers: nothing the learner registered runs after this


if __name__ == "__main__":
    main()
