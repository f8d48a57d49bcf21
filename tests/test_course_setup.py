"""The first-cell setup: no jax at import, fake devices before jax starts, a clear error after; what it
installs on Colab/Kaggle; the mesh a profile trains on. The install itself, end to end, is
tests/test_hosted_install.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tunix_lite.course import setup as course_setup
from tunix_lite.course.setup import choose_profile, hosted_extras, profile_for, unmet_requirements


def _python(code: str, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CI", "TUNIX_LITE_PROFILE", "XLA_FLAGS") and not k.startswith(course_setup.TPU_ENV)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean | env, timeout=120)


def test_course_modules_do_not_import_jax():
    r = _python("import sys, tunix_lite.course.setup, tunix_lite.course.build, tunix_lite.course.grading, "
                "tunix_lite.course.notebook; assert 'jax' not in sys.modules, 'jax imported'")
    assert r.returncode == 0, r.stderr


def test_setup_sets_fake_devices_and_the_ci_profile():
    r = _python("from tunix_lite.course.setup import setup; p = setup(fake_devices=4); "
                "import jax; assert len(jax.devices()) == 4; print(p.name, p.devices, p.steps, dict(p.mesh().shape))",
                CI="true")
    assert r.returncode == 0, r.stderr
    # training uses one CPU device: the fake ones are for the sharding lessons
    assert r.stdout.strip().splitlines()[-1] == "ci 4 30 {'data': 1, 'fsdp': 1, 'tensor': 1}"
    assert "WARNING" not in r.stderr or course_setup.detect_accelerator()  # CPU jax beside a GPU warns


def test_small_programs_compile_with_their_flags_on_a_cpu_only_machine():
    """setup(small_programs=True) puts SMALL_PROGRAM_XLA_FLAGS beside the fake-device flag, keeping
    the user's other flags, and the programs still compute: on an accelerator it changes nothing."""
    code = ("import os; from tunix_lite.course import setup as s; s.detect_accelerator = lambda: {acc}; "
            "s.setup(fake_devices=2, small_programs=True, verbose=False); import jax, jax.numpy as jnp; "
            "assert float(jnp.sum(jnp.arange(4.0))) == 6.0; print(os.environ['XLA_FLAGS'])")
    user = "--xla_cpu_enable_fast_math=false --xla_backend_optimization_level=2"
    cpu_only, accelerated = (_python(code.format(acc=acc), XLA_FLAGS=user) for acc in ("None", "'gpu'"))
    assert cpu_only.returncode == 0 and accelerated.returncode == 0, cpu_only.stderr + accelerated.stderr
    assert cpu_only.stdout.split() == ["--xla_cpu_enable_fast_math=false",
                                       *course_setup.SMALL_PROGRAM_XLA_FLAGS.split(),
                                       "--xla_force_host_platform_device_count=2"]
    assert accelerated.stdout.split() == [*user.split(), "--xla_force_host_platform_device_count=2"]


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


def test_the_tpu_profile_trains_on_every_core():
    assert profile_for("tpu", "kaggle", "tpu", 8).mesh_shape == {"data": 8, "fsdp": 1, "tensor": 1}
    assert profile_for("tpu", "colab", "tpu", 1).mesh_shape["data"] == 1
    assert profile_for("cpu", "kaggle", "gpu", 2).mesh_shape["data"] == 2  # Kaggle's 2 x T4
    assert profile_for("tpu", "local", "tpu", 6).batch == 66  # whole examples per replica: 64 -> 6 x 11
    assert profile_for("cpu", "local", "cpu", 8).mesh_shape["data"] == 1


def test_a_lesson_runs_the_file_s_config_and_ci_cuts_only_its_size():
    """The cpu and tpu profiles run a config as written; ci runs the same code at a few steps on a few
    prompts, with every cut value still valid (warmup below the steps)."""
    from tunix_lite import configs
    from tunix_lite.distill.distill import DistillConfig
    from tunix_lite.training.sft import SFTConfig

    sft = SFTConfig.from_yaml(configs.path("sft_tiny"))
    for name in ("cpu", "tpu"):
        assert profile_for(name, "local", "cpu", 1).sized(sft) is sft
    ci = profile_for("ci", "local", "cpu", 1)
    cut = ci.sized(sft)
    assert (cut.steps, cut.n_accuracy, cut.n_validation, cut.eval_every) == (ci.run_steps, ci.run_prompts,
                                                                             ci.run_prompts, 0)
    assert cut.warmup_steps < cut.steps and cut.learning_rate == sft.learning_rate and sft.steps == 150
    distill = ci.sized(DistillConfig.from_yaml(configs.path("distill_tiny")))
    assert (distill.steps, distill.n_accuracy) == (ci.run_steps, ci.run_prompts)


def test_the_sft_start_trains_once_and_a_cut_run_never_stands_in_for_the_file_s(tmp_path):
    """Phases 5-7 start from sft_model(profile): trained in runs/ on first use, loaded after; a cut run
    writes to a folder named by its steps, so the full run's folder only ever holds the full run."""
    import dataclasses

    from tunix_lite.course.sft_start import sft_model

    short = dataclasses.replace(profile_for("ci", "local", "cpu", 1), run_steps=2, run_prompts=2)
    model = sft_model(short, runs=tmp_path)
    assert model == tmp_path / "sft_tiny_2_steps" / "model" and (model / "config.json").is_file()
    written = (model / "config.json").stat().st_mtime_ns
    assert sft_model(short, runs=tmp_path) == model and (model / "config.json").stat().st_mtime_ns == written
    assert not (tmp_path / "sft_tiny").exists()


def test_setup_warns_loudly_when_an_accelerator_is_unused():
    r = _python("from tunix_lite.course.setup import setup; setup(fake_devices=2)", CI="true",
                TPU_ACCELERATOR_TYPE="v5litepod-8", JAX_PLATFORMS="cpu")
    assert r.returncode == 0, r.stderr
    assert "WARNING: this machine has a TPU, but jax runs on CPU" in r.stderr
    assert 'pip install "tunix-lite[tpu]==' in r.stderr


REQUIRES = [  # the shape of tunix-lite's installed metadata
    "jax<0.13,>=0.10.2",
    "numpy>=1.26",
    'gguf>=0.17; extra == "gemma"',
    'matplotlib>=3.8; extra == "hosted"',
    'surely-not-installed-xyz>=1; extra == "hosted"',
    'jupyterlab>=4; extra == "course"',
    'tunix-lite[hosted]; extra == "course"',
    'jax[tpu]<0.13,>=0.10.2; extra == "tpu"',
]


def test_unmet_requirements_checks_versions_and_follows_extras(monkeypatch):
    assert unmet_requirements([], REQUIRES) == {}
    assert unmet_requirements(["hosted"], REQUIRES) == {"surely-not-installed-xyz": "missing, need >=1"}
    assert "surely-not-installed-xyz" in unmet_requirements(["course"], REQUIRES)  # course -> tunix-lite[hosted]
    monkeypatch.setattr(course_setup, "_version", lambda name: "0.4.33" if name == "jax" else "9.9")
    assert unmet_requirements([], REQUIRES) == {"jax": "0.4.33 installed, need <0.13,>=0.10.2"}


def test_setup_can_install_every_extra_a_notebook_or_a_config_needs():
    """setup(extras=[...]) knows every optional extra of pyproject.toml (tasks for reasoning-gym data
    and the math reward, gemma for the weights, the trackers, hub), each by a module it installs."""
    import tomllib
    from pathlib import Path

    extras = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    chosen_elsewhere = {"test", "all", "tpu", "cuda"}  # CI's own, the laptop's all, hosted_extras' jax
    assert set(course_setup.EXTRAS) == set(extras) - chosen_elsewhere
    with pytest.raises(ValueError, match="unknown extras \\['task'\\]"):
        course_setup.setup(extras=["task"])


def test_hosted_install_keeps_an_accelerator_jax_in_range():
    assert hosted_extras(["gemma"], "tpu", unmet=[]) == ["hosted", "gemma"]  # the runtime's TPU jax stays
    assert hosted_extras([], "tpu", unmet=["jax"]) == ["hosted", "tpu"]  # out of range: jax[tpu], not CPU jax
    assert hosted_extras([], "gpu", unmet=["jax", "flax"]) == ["hosted", "cuda"]
    assert hosted_extras([], None, unmet=["jax"]) == ["hosted"]


def test_hosted_install_failure_is_one_line_with_the_fix(monkeypatch, tmp_path):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "tunix_lite-0.1.0-py3-none-any.whl").touch()
    monkeypatch.setattr(course_setup, "WHEEL_GLOBS", (f"{tmp_path}/**/tunix_lite-*.whl",))
    monkeypatch.setattr(course_setup, "_installed_version", lambda: "0.1.0")
    monkeypatch.setattr(course_setup, "unmet_requirements", lambda extras: {"jax": "0.4.33 installed, need <0.13"})
    monkeypatch.setattr(course_setup, "detect_accelerator", lambda: "tpu")
    calls = []

    def pip(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "Looking in indexes\nERROR: No matching distribution found\n")

    monkeypatch.setattr(course_setup.subprocess, "run", pip)
    with pytest.raises(RuntimeError) as err:
        course_setup._ensure_installed("kaggle", ["gemma"])
    (cmd,) = calls
    assert cmd[-3:] == ["tunix-lite[hosted,gemma,tpu]==0.1.0", "--find-links", str(tmp_path / "ds")]
    message = str(err.value)
    assert "\n" not in message and "No matching distribution found" in message and "turn the internet on" in message
