"""The course harness: notebook setup, exercise build, graded tests and the grader.

The install source is one setting, REPO_URL + VERSION below: every badge, every notebook's setup cell
and setup()'s dependency install are built from it, so a fork or a release changes one place
(`python -m tunix_lite.course.build --stamp` rewrites the notebooks; tests/test_course_links.py checks).
This module imports nothing heavy: `tunix_lite.course.setup` must run before jax is imported.
"""

from __future__ import annotations

REPO_URL = "https://github.com/tunix-lite/tunix-lite"  # where the badges and the Colab/Kaggle install point
VERSION = "0.1.0"  # the release the notebooks install: tunix-lite=={VERSION} or tag v{VERSION}, never a branch head

PACKAGE = "tunix-lite"
TAG = f"v{VERSION}"
# Where a learner's uploaded wheel lands: a Kaggle dataset attached to the notebook, or a Colab upload.
WHEEL_GLOBS = ("/kaggle/input/**/tunix_lite-*.whl", "/content/tunix_lite-*.whl")
WHEEL_BUILD = "pip wheel --no-deps -w dist ."  # in a clone at TAG: dist/tunix_lite-{VERSION}-py3-none-any.whl


def _github_path() -> str:
    """'owner/name' from REPO_URL."""
    return REPO_URL.removeprefix("https://github.com/").strip("/")


def colab_url(path: str) -> str:
    """Open `path` (relative to the repository root) in Colab, at the pinned tag."""
    return f"https://colab.research.google.com/github/{_github_path()}/blob/{TAG}/{path}"


def kaggle_url(path: str) -> str:
    return f"https://kaggle.com/kernels/welcome?src={REPO_URL}/blob/{TAG}/{path}"


def badges(path: str) -> str:
    """Markdown for the 'Open in Colab' and 'Open in Kaggle' badges of a notebook."""
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(path)}) "
            f"[![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]({kaggle_url(path)})")


def install_routes() -> list[tuple[str, str, str]]:
    """(where from, pip spec, what happens if it fails) for the routes that need the internet, in the
    order the setup cell tries them; it tries an uploaded wheel last."""
    return [
        ("PyPI", f"{PACKAGE}=={VERSION}", "trying GitHub next"),
        ("GitHub", f"{PACKAGE} @ git+{REPO_URL}@{TAG}", "trying an uploaded wheel next"),
    ]


def setup_cell(*args: str) -> str:
    """Source of every notebook's first code cell; `args` are setup()'s arguments, e.g. 'extras=["gemma"]'.

    It must work before tunix_lite is installed: in a clone it uses the checkout; on Colab/Kaggle it
    installs the package alone (no dependencies) by the first route that works, printing one line per
    route that fails; setup() then installs the dependencies this runtime lacks (keeping an accelerator
    jax that is in range) and sets fake devices before jax starts.
    """
    pypi, github = install_routes()
    no_upload = (f"turn the internet on, or build the wheel in a clone at {TAG} ({WHEEL_BUILD}), upload it to Colab "
                 "or attach it to Kaggle as a dataset, and rerun this cell")
    return "\n".join([
        "# Setup: run this cell first (Colab, Kaggle or a laptop). It installs nothing on a laptop clone.",
        "import glob, importlib, importlib.util, pathlib, subprocess, sys",
        "if importlib.util.find_spec(\"tunix_lite\") is None:",
        "    if (pathlib.Path.cwd().parent / \"tunix_lite\").is_dir():  # a clone of the repository",
        "        sys.path.insert(0, str(pathlib.Path.cwd().parent))",
        f"    else:  # Colab / Kaggle: {PACKAGE} {VERSION} alone, by the first route that works; setup() adds the rest",
        f"        uploads = {list(WHEEL_GLOBS)!r}",
        "        wheel = max((w for g in uploads for w in glob.glob(g, recursive=True)), default=None)",
        f"        routes = [{pypi!r},",
        f"                  {github!r},",
        f"                  ('uploaded wheel', wheel, {no_upload!r})]",
        "        for where, spec, otherwise in routes:",
        "            if spec is None:",
        f"                print(f\"{PACKAGE} from {{where}} failed (no file matches {{' or '.join(uploads)}}); "
        "{otherwise}\")",
        "                continue",
        "            pip = subprocess.run([sys.executable, \"-m\", \"pip\", \"install\", \"-q\", \"--no-deps\", "
        "\"--retries\", \"1\", spec],",
        "                                 capture_output=True, text=True)",
        "            if pip.returncode == 0:",
        f"                print(f\"installed {PACKAGE} from {{where}}: {{spec}}\")",
        "                break",
        "            error = (pip.stderr.strip() or \"pip failed\").splitlines()[-1]",
        f"            print(f\"{PACKAGE} from {{where}} failed ({{error}}); {{otherwise}}\")",
        "        else:",
        f"            raise RuntimeError(\"{PACKAGE} is not installed: see the lines above\")",
        "        importlib.invalidate_caches()",
        "from tunix_lite.course.setup import setup",
        f"profile = setup({', '.join(args)})",
    ])
