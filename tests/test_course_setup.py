"""The first-cell setup: no jax at import, fake devices before jax starts, a clear error after."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tunix_lite.course.setup import choose_profile


def _python(code: str, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "TUNIX_LITE_PROFILE", "XLA_FLAGS")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean | env, timeout=120)


def test_course_modules_do_not_import_jax():
    r = _python("import sys, tunix_lite.course.setup, tunix_lite.course.build, tunix_lite.course.grading, "
                "tunix_lite.course.notebook; assert 'jax' not in sys.modules, 'jax imported'")
    assert r.returncode == 0, r.stderr


def test_setup_sets_fake_devices_and_the_ci_profile():
    r = _python("from tunix_lite.course.setup import setup; p = setup(fake_devices=4); "
                "import jax; assert len(jax.devices()) == 4; print(p.name, p.devices, p.steps)", CI="true")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "ci 4 30"


def test_setup_explains_a_late_call():
    r = _python("import jax; jax.devices()\nfrom tunix_lite.course.setup import setup; setup(fake_devices=4)")
    assert r.returncode != 0 and "Restart the kernel" in r.stderr


def test_profile_precedence(monkeypatch):
    monkeypatch.delenv("TUNIX_LITE_PROFILE", raising=False)
    monkeypatch.delenv("CI", raising=False)
    assert choose_profile(None, "cpu") == "cpu" and choose_profile(None, "tpu") == "tpu"
    monkeypatch.setenv("CI", "true")
    assert choose_profile(None, "tpu") == "ci"
    monkeypatch.setenv("TUNIX_LITE_PROFILE", "cpu")
    assert choose_profile(None, "cpu") == "cpu" and choose_profile("tpu", "cpu") == "tpu"
    with pytest.raises(ValueError, match="unknown profile"):
        choose_profile("gpu", "cpu")
