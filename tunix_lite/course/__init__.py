"""The course harness: notebook setup, exercise build, graded tests and the grader.

Everything a notebook links to or installs is built from the two constants below, so a fork or a
release changes one place (tests/test_course_links.py checks every badge and the setup cells).
This module imports nothing heavy: `tunix_lite.course.setup` must run before jax is imported.
"""

from __future__ import annotations

REPO_URL = "https://github.com/tunix-lite/tunix-lite"  # where the badges and the Colab/Kaggle install point
VERSION = "0.1.0"  # the release the notebooks install: tag v{VERSION}, never a branch head

TAG = f"v{VERSION}"


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


def setup_cell(*args: str) -> str:
    """Source of every notebook's first code cell; `args` are setup()'s arguments, e.g. 'extras=["gemma"]'.

    It must work before tunix_lite is installed: in a clone it uses the checkout, on Colab/Kaggle it
    pip-installs the pinned release, then setup() sets fake devices before jax starts.
    """
    return "\n".join([
        "# Setup: run this cell first (Colab, Kaggle or a laptop). It installs nothing on a laptop clone.",
        "import importlib, importlib.util, pathlib, subprocess, sys",
        "if importlib.util.find_spec(\"tunix_lite\") is None:",
        "    if (pathlib.Path.cwd().parent / \"tunix_lite\").is_dir():  # a clone of the repository",
        "        sys.path.insert(0, str(pathlib.Path.cwd().parent))",
        "    else:  # Colab / Kaggle: the pinned release tag, never a branch head",
        f"        subprocess.check_call([sys.executable, \"-m\", \"pip\", \"install\", \"-q\", "
        f"\"tunix-lite[course] @ git+{REPO_URL}@{TAG}\"])",
        "        importlib.invalidate_caches()",
        "from tunix_lite.course.setup import setup",
        f"profile = setup({', '.join(args)})",
    ])
