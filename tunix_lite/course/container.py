"""Grade one notebook inside a container: `tunix-lite grade-all ... --docker IMAGE` grades each
learner in a fresh container of the grader image (course/instructor/Dockerfile), as
course/GRADING.md's "A container" runs it by hand:

    docker run --rm --network none --read-only --tmpfs /tmp --pids-limit 256 --memory 8g --cpus 2
      -v NOTEBOOK:/in/submission.ipynb:ro -v TESTS:/hidden:ro -v OUT:/out IMAGE
      tunix-lite grade /in/submission.ipynb --phase NN --tests /hidden --json /out/grade.json

The submission and the hidden tests are read-only, only a fresh results folder is writable, there
is no network, and the container is removed afterwards: whatever a notebook does stays in its own
container. The report is read back from OUT/grade.json, so a row of the CSV is the same whether a
learner was graded here or in a container.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tunix_lite.course import grading
from tunix_lite.course.notebook import phase_of

LIMITS = ("--network", "none", "--read-only", "--tmpfs", "/tmp", "--pids-limit", "256",
          "--memory", "8g", "--cpus", "2")


def check_image(image: str, docker: str = "docker") -> None:
    """Stop before the first learner when docker or the image is missing (one line each)."""
    if shutil.which(docker) is None:
        raise ValueError(f"--docker {image}: no `{docker}` command here; install Docker, or grade "
                         "without --docker")
    found = subprocess.run([docker, "image", "inspect", image], capture_output=True, text=True)
    if found.returncode != 0:
        raise ValueError(f"--docker {image}: no such image ({found.stderr.strip()[:200]}); build "
                         "it: docker build -f course/instructor/Dockerfile -t "
                         f"{image} .")


def command(image: str, notebook: Path, out: Path, *, phase: str, tests_dir: str | None,
            timeout: float, docker: str = "docker") -> list[str]:
    """The `docker run` that grades `notebook` into out/grade.json."""
    mounts = ["-v", f"{notebook.resolve()}:/in/submission.ipynb:ro", "-v", f"{out.resolve()}:/out"]
    hidden = []
    if tests_dir is not None:
        mounts += ["-v", f"{Path(tests_dir).resolve()}:/hidden:ro"]
        hidden = ["--tests", "/hidden"]
    return [docker, "run", "--rm", *LIMITS, *mounts, image, "tunix-lite", "grade",
            "/in/submission.ipynb", "--phase", phase, *hidden, "--json", "/out/grade.json",
            "--timeout", f"{timeout:g}"]


def grade(notebook: str | Path, *, image: str, timeout: float = grading.EXERCISE_SECONDS,
          phase: str | None = None, tests_dir: str | None = None, docker: str = "docker") -> dict:
    """`grading.grade`'s report for `notebook`, graded in a fresh container of `image`."""
    notebook = Path(notebook)
    phase = phase or phase_of(notebook)
    with tempfile.TemporaryDirectory(prefix="tunix-lite-container-") as folder:
        out = Path(folder)
        out.chmod(0o777)  # the image's user (not ours) writes the report here
        run = command(image, notebook, out, phase=phase, tests_dir=tests_dir, timeout=timeout,
                      docker=docker)
        # python, jax and every exercise's limit, with room: a container never outlives it
        limit = 2 * grading.STARTUP_SECONDS + 40 * timeout
        try:
            done = subprocess.run(run, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the container ran past {limit:.0f} s") from None
        report = out / "grade.json"
        if not report.is_file():
            tail = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise RuntimeError(f"the container wrote no report (exit {done.returncode}): {tail}")
        return json.loads(report.read_text(encoding="utf-8"))
