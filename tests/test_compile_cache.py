"""XLA's persistent compilation cache: on by default under tunix_lite's cache directory, off by a
switch or a flag, JAX's own setting first; a second process reads what the first compiled."""

import subprocess
import sys

import jax
import pytest

from tunix_lite import compile_cache
from tunix_lite.cli import main


def test_where_the_cache_goes(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv(compile_cache.SWITCH, raising=False)
    monkeypatch.setenv("TUNIX_LITE_CACHE", str(tmp_path))
    assert compile_cache.cache_path() == tmp_path / "xla"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "own"))
    assert compile_cache.cache_path() == tmp_path / "own"  # JAX's own setting wins
    for off in ("0", "false", "off"):
        monkeypatch.setenv(compile_cache.SWITCH, off)
        assert compile_cache.cache_path() is None and compile_cache.enable() is None


def test_info_names_the_cache_and_the_flag_turns_it_off(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv(compile_cache.SWITCH, raising=False)
    monkeypatch.setenv("TUNIX_LITE_CACHE", str(tmp_path))
    assert main(["info"]) == 0
    assert f"compilation cache: {tmp_path / 'xla'}" in capsys.readouterr().out
    assert main(["--no-compile-cache", "info"]) == 0
    assert "compilation cache: off" in capsys.readouterr().out


@pytest.mark.slow
def test_a_second_process_reads_the_first_ones_programs(tmp_path):
    program = ("import jax, jax.numpy as jnp; from tunix_lite import compile_cache; "
               f"compile_cache.enable({str(tmp_path / 'c')!r}); "
               "f = jax.jit(lambda x: jnp.sin(x) @ x.T + jnp.cos(x).sum()); "
               "f(jnp.ones((64, 64))).block_until_ready()")
    env = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "PATH": "/usr/bin:/bin",
           "JAX_PLATFORMS": "cpu", "HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-c", program], check=True, env=env, timeout=120)
    written = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "c").glob("jit_*-cache")}
    assert written
    subprocess.run([sys.executable, "-c", program], check=True, env=env, timeout=120)
    # a hit reads the entry; a miss would compile again and rewrite it under the same key
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "c").glob("jit_*-cache")} == written
    assert jax.config.jax_compilation_cache_dir != str(tmp_path / "c")  # this process untouched
