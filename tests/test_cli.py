"""The command line: info, generate on the embedded model, and one-line errors for bad input."""

import os
import subprocess
import sys

from tunix_lite.cli import main


def run_cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "tunix_lite.cli", *args], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, **env))


def test_info_lists_versions_devices_and_a_mesh():
    result = run_cli("info")
    assert result.returncode == 0, result.stderr
    assert "jax" in result.stdout and "backend: cpu" in result.stdout and "suggested mesh: data=1" in result.stdout


def test_generate_from_the_embedded_model():
    result = run_cli("generate", "--model", "tiny", "--prompt", "Question: What is 2 + 3?\nAnswer:",
                     "--max-new-tokens", "12")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Question: What is 2 + 3?\nAnswer:") and "tokens in" in result.stderr


def test_unknown_model_lists_the_choices(capsys):
    assert main(["generate", "--model", "no-such-model", "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'no-such-model'" in err and "tiny, gemma3-270m" in err and "Traceback" not in err


def test_offline_hub_id_says_how_to_use_a_local_path():
    # HF_HUB_OFFLINE is read when huggingface_hub is imported: hence a fresh process
    result = run_cli("generate", "--model", "some-org/some-model", "--prompt", "hi", HF_HUB_OFFLINE="1")
    assert result.returncode == 2
    assert "could not download 'some-org/some-model'" in result.stderr and "local" in result.stderr
