"""The TPU configs train on every chip; `tunix-lite run --check` names the devices a run uses."""

import subprocess
import sys

import pytest
import yaml

from tunix_lite import configs
from tunix_lite.pipeline import unused_devices_warning
from tunix_lite.sharding import STRATEGIES

CONFIGS = configs.FOLDER
TPU_CONFIGS = sorted(CONFIGS.glob("*_tpu.yaml"))
EVERY_DEVICE = ("auto", *STRATEGIES)  # a strategy name spans every device; fixed axis sizes may not


def test_there_are_tpu_configs():
    assert TPU_CONFIGS, f"no *_tpu.yaml in {CONFIGS}"


@pytest.mark.parametrize("path", TPU_CONFIGS, ids=lambda p: p.name)
def test_every_stage_of_a_tpu_config_uses_every_device(path):
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    default = values.get("defaults", {}).get("mesh")
    for stage in values["stages"]:
        mesh = stage.get("mesh", default)
        assert mesh in EVERY_DEVICE, (f"{path.name}: stage {stage['name']} has mesh: {mesh}; "
                                      f"set one of {EVERY_DEVICE} so it trains on every chip")


def test_a_mesh_on_one_of_eight_tpu_chips_is_warned_about_with_the_fix():
    warning = unused_devices_warning(available=8, used=1, platform="tpu")
    assert warning == ("warning: this machine has 8 TPU devices; the mesh uses 1. "
                       "Set mesh: auto to use all of them")


@pytest.mark.parametrize("available, used, platform", [(8, 8, "tpu"), (1, 1, "cpu")],
                         ids=["auto-on-8-tpu-chips", "one-cpu"])
def test_a_mesh_over_every_device_gets_no_warning(available, used, platform):
    assert unused_devices_warning(available, used, platform) is None


def test_check_prints_the_devices_and_warns_when_the_mesh_is_unset(tmp_path, subprocess_env):
    """On 8 simulated CPU devices (a child process: jax fixes its device count when it starts)."""
    config = CONFIGS / "capstone_gemma3_270m_tpu.yaml"  # a preset model: no weights folder needed
    values = yaml.safe_load(config.read_text(encoding="utf-8"))
    values["defaults"].pop("mesh")
    unset = tmp_path / "no_mesh.yaml"
    unset.write_text(yaml.safe_dump(values), encoding="utf-8")
    check = "from tunix_lite.cli import main; main(['run', {!r}, '--check', '--output-dir', {!r}])"
    script = "; ".join(check.format(str(path), str(tmp_path / "run")) for path in (config, unset))
    env = subprocess_env(XLA_FLAGS="--xla_force_host_platform_device_count=8")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    with_mesh, without = run.stdout.split(str(unset))
    assert "devices: 8 x cpu, mesh {'data': 8, 'fsdp': 1, 'tensor': 1}" in with_mesh
    assert "warning" not in with_mesh
    assert "devices: 1 x cpu, mesh null (one device)" in without
    assert ("warning: this machine has 8 CPU devices; the mesh uses 1. "
            "Set mesh: auto to use all of them") in without
