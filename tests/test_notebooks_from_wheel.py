"""Every lesson and exercise notebook runs from the installed wheel alone, in an empty folder, along
the code paths a learner's Colab or Kaggle session takes (the `cpu` profile's: PROFILE).

What a learner has there: the notebook and tunix_lite's wheel, no repository. Each notebook is copied
into a folder of its own and run top to bottom in a fresh venv that has the wheel installed and
nothing of the checkout (tests/hosted_runtime.py). The folder around it stands in for the repository
(links to its files), so a cell that reads ../configs, ../course or ../runs finds them, and fails:
every file a cell opens or lists in the source tree outside its own folder raises PermissionError
(an audit hook in the kernel, tests/source_tree_guard.py). The profile's branches run as they do
on Colab or Kaggle, and each table a cell looks up by the profile's name gives its row; the sizes the
profile itself sets (steps, batch, sequence, generated tokens) are the `ci` profile's, and every
training run stops after STEPS steps: minutes of CPU, not hours. They run with
TUNIX_LITE_WHEEL_NOTEBOOKS=all (CI runs the same notebooks through nbval: conftest.py).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from hosted_runtime import ROOT, build_wheel, farm, offline_env, runtime, stand_in_repository
from tunix_lite import compile_cache

HERE = Path(__file__).resolve().parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXERCISES = sorted((ROOT / "exercises").glob("[0-9][0-9]_*.ipynb"))
STEPS = 2  # training steps per fit: the code path, not the payoff
WORKERS = 2  # notebooks at a time
TIMEOUT = 600  # seconds per cell


# The profile the notebooks run under: a hosted session's branches (every `profile.name != "ci"`).
# On a CPU machine the tpu profile takes the same branches (those on the backend need a TPU) and
# differs only in the rows of the tables looked up by its name (data sizes), which
# test_every_table_a_notebook_looks_up_by_profile_has_a_row_for_each_profile checks without a run:
# a tpu run of NB03, one of the four notebooks with such tables, cost 321 CPU s (its cpu run 269).
PROFILE = "cpu"


# CI runs every lesson and every solution notebook from the wheel in an empty folder through nbval,
# under the ci profile (conftest.py), whose code paths are the cpu and tpu profiles' at smaller sizes
# (test_the_ci_profile_skips_no_call_the_others_make); the exercise notebooks are the solutions with
# the graded cells stubbed. Here, with TUNIX_LITE_WHEEL_NOTEBOOKS=all (e.g. before a release), every
# lesson and exercise notebook runs under the cpu profile, with the sizes of its tables: well over
# CI's budget on 2 cores. Lessons 03-07 took 871 CPU s (03 113, 04 82, 05 237, 06 86, 07 353; NB05-07
# train their SFT start on the cpu profile's data, NB07 caches the teacher on all of it); lessons
# 02-10 once took 1,865 CPU s and the exercise notebooks 115.
ALL = os.environ.get("TUNIX_LITE_WHEEL_NOTEBOOKS") == "all"


def _runs() -> list[tuple[Path, str]]:
    return [(nb, PROFILE) for nb in [*LESSONS, *EXERCISES]] if ALL else []


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> dict:
    return make_bare(tmp_path_factory.mktemp("bare"))


def make_bare(root: Path) -> dict:
    """In `root`: the runtime (a venv with the wheel installed offline), the stand-in repository,
    and the environment a kernel gets."""
    wheel = build_wheel(root / "src")
    python = runtime(root, farm(root / "preinstalled"))
    env = offline_env(root / "home")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, env=env, timeout=120)
    repository = stand_in_repository(root / "repository")
    kernels = root / "jupyter" / "kernels" / "python3"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "the runtime", "language": "python"}))
    startup = root / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    shutil.copy(HERE / "source_tree_guard.py", startup / "00_source_tree_guard.py")
    shutil.copy(HERE / "bare_kernel_startup.py", startup / "01_bare_kernel.py")
    env |= {"PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
            "JUPYTER_PATH": str(root / "jupyter"), "JUPYTER_DATA_DIR": str(root / "jupyter"),
            "IPYTHONDIR": str(root / "ipython"), "BARE_NOTEBOOK_STEPS": str(STEPS),
            "SOURCE_TREE_FORBIDDEN": os.pathsep.join([str(ROOT), str(repository)]),
            # the environment the runtime's packages link to, and CI's compilation cache
            "SOURCE_TREE_ALLOWED": os.pathsep.join([str(Path(sys.prefix).resolve()), str(ROOT / ".cache")]),
            # converted Gemma weights and compiled programs: this machine's, as a session's disk keeps them
            "TUNIX_LITE_CACHE": str(compile_cache.cache_root())}
    return {"python": python, "repository": repository, "env": env, "venv": root / "venv"}


def _check_cell(venv: Path) -> nbformat.NotebookNode:
    """Appended to each copy: no cell read the source tree (even one that caught the error), and
    tunix_lite came from the wheel."""
    return nbformat.v4.new_code_cell(
        "import sys, tunix_lite\n"
        "assert not sys.source_tree_reads, f'cells read the source tree: {sys.source_tree_reads}'\n"
        f"assert tunix_lite.__file__.startswith({str(venv)!r}), tunix_lite.__file__")


def run_bare(bare: dict, notebook: nbformat.NotebookNode, name: str, profile: str) -> dict:
    """Run `notebook` in a folder of its own inside the stand-in repository; the runner's report."""
    folder = bare["repository"] / f"{Path(name).stem}-{profile}"
    folder.mkdir()
    notebook = nbformat.from_dict(json.loads(json.dumps(notebook)))
    notebook.cells.append(_check_cell(bare["venv"]))
    nbformat.write(notebook, folder / name)
    run = subprocess.run([bare["python"], HERE / "bare_notebook_run.py", folder / name, str(TIMEOUT)],
                         capture_output=True, text=True, cwd=folder, timeout=3 * TIMEOUT,
                         env=bare["env"] | {"TUNIX_LITE_PROFILE": profile})
    lines = run.stdout.strip().splitlines()
    if run.returncode or not lines:
        return {"ok": False, "error": (run.stdout + run.stderr)[-3000:]}
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def reports(bare, request) -> dict[tuple[str, str], dict]:
    """Every selected run (all, or those `-k` picks), WORKERS at a time; prints what each cost."""
    test = test_the_notebook_runs_from_the_wheel_in_an_empty_folder.__name__
    selected = [item.callspec.params for item in request.session.items if getattr(item, "originalname", None) == test]

    def one(params):
        path, profile = params["path"], params["profile"]
        return (path.name, profile), run_bare(bare, nbformat.read(path, as_version=4), path.name, profile)

    with ThreadPoolExecutor(WORKERS) as pool:
        found = dict(pool.map(one, selected))
    for (name, profile), report in found.items():
        print(f"{name} [{profile}]: {report.get('seconds')} s, {report.get('cpu_seconds')} CPU s, "
              f"{'ok' if report['ok'] else 'FAILED'}")
    total = sum(r.get("cpu_seconds", 0) for r in found.values())
    print(f"{len(found)} notebook runs: {total:.0f} CPU s")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("path, profile", _runs(), ids=lambda x: getattr(x, "name", x))
def test_the_notebook_runs_from_the_wheel_in_an_empty_folder(reports, path, profile):
    report = reports[path.name, profile]
    assert report["ok"], f"{path.name} under the {profile} profile, from the wheel:\n{report['error']}"


def _code_trees():
    """(notebook name, cell index, the cell's parsed code) of every lesson and exercise code cell."""
    for path in [*LESSONS, *EXERCISES]:
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                                 for line in cell.source.splitlines())
                yield path.name, index, ast.parse(code)


def test_every_table_a_notebook_looks_up_by_profile_has_a_row_for_each_profile():
    """`{"ci": ..., "cpu": ..., "tpu": ...}[profile.name]` without a row for a profile stops that
    profile's run with a KeyError; a run under every profile would find it, this finds it at once."""
    from tunix_lite.course.setup import PROFILES

    missing = []
    for name, index, tree in _code_trees():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict)
                    and ast.unparse(node.slice) == "profile.name"):
                keys = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
                if keys != set(PROFILES):
                    missing.append(f"{name} cell {index}: {sorted(keys)}")
    assert not missing, f"tables without a row for each of {sorted(PROFILES)}: {missing}"


def test_the_ci_profile_skips_no_call_the_others_make():
    """CI runs the notebooks under `ci`, so a call only the cpu and tpu profiles make (`if
    profile.name == "ci": print("skipped") else: run_sft(config)`) is code CI never runs, and a
    learner on Colab or Kaggle is the first to. The ci profile makes the same calls at its own sizes
    (`profile.sized(config)`, tables looked up by profile); it may add some (a simulated second
    session) and branch on the backend (bfloat16 on a TPU)."""
    skipped = []
    for name, index, tree in _code_trees():
        for node in ast.walk(tree):
            if not isinstance(node, ast.If):
                continue
            test = ast.unparse(node.test)
            others = (node.body if "profile.name != 'ci'" in test
                      else node.orelse if "profile.name == 'ci'" in test else [])
            if any(isinstance(n, ast.Call) for part in others for n in ast.walk(part)):
                skipped.append(f"{name} cell {index}: if {test}")
    assert not skipped, f"calls the ci profile skips: {skipped}"


def test_a_shipped_pipeline_is_checked_by_name_from_the_wheel_in_an_empty_folder(wheel_site, tmp_path):
    """What a Kaggle session runs first: the config by its name, no repository anywhere."""
    empty = tmp_path / "empty"
    empty.mkdir()
    cli = ("import sys, tunix_lite, tunix_lite.cli\n"
           f"assert tunix_lite.__file__.startswith({str(wheel_site)!r}), tunix_lite.__file__\n"
           "sys.exit(tunix_lite.cli.main(sys.argv[1:]))")
    run = subprocess.run([sys.executable, "-c", cli, "run", "capstone_gemma3_270m_tpu", "--check"],
                         capture_output=True, text=True, cwd=empty, timeout=300,
                         env=offline_env(tmp_path / "home", PYTHONPATH=str(wheel_site)))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "capstone_gemma3_270m_tpu: 3 stages into runs/capstone_gemma3_270m_tpu" in run.stdout
    assert "devices: " in run.stdout and not list(empty.iterdir())  # a check writes nothing
