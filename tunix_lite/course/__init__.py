"""The course harness: notebook setup, exercise build, graded tests and the grader.

The install source is one setting, REPO_URL + VERSION + RELEASED below: every badge, every
notebook's setup cell and setup()'s dependency install are built from it, so a fork or a release
changes one place (`python -m tunix_lite.course.build --stamp` rewrites the notebooks;
tests/test_course_links.py checks). This module imports nothing heavy: `tunix_lite.course.setup`
must run before jax is imported.
"""

from __future__ import annotations

import re
import string

REPO_URL = "https://github.com/tunix-lite/tunix-lite"  # where badges and the hosted install point
VERSION = "0.1.0"  # the release the notebooks install: tunix-lite=={VERSION} or tag v{VERSION}
# True once tunix-lite VERSION is on PyPI and tag vVERSION is on GitHub. Until then those routes
# and the Open-in-Colab/Kaggle badges would point at nothing: the notebooks offer the wheel alone.
RELEASED = False

PACKAGE = "tunix-lite"
TAG = f"v{VERSION}"
# Where a learner's wheel lands: a Kaggle dataset attached to the notebook, or a Colab upload.
WHEEL_GLOBS = ("/kaggle/input/**/tunix_lite-*.whl", "/content/tunix_lite-*.whl")
WHEEL_BUILD = "pip wheel --no-deps -w dist ."  # writes dist/tunix_lite-{VERSION}-py3-none-any.whl
# An offline Kaggle session (internet off): tunix_lite's wheel and the wheels of every dependency of
# the extras a notebook or a hackathon run needs, in one folder to attach as a dataset. Run it in a
# checkout on Linux with the session's Python version; setup() installs from the folder it lands in.
WHEELHOUSE_BUILD = 'pip wheel ".[hosted,gemma,tasks]" -w wheelhouse'
# Starts the line that stands in for the badges before a release; the stamp finds it by this prefix.
OPEN_BY_UPLOAD = "**Colab / Kaggle:**"


def _github_path() -> str:
    """'owner/name' from REPO_URL."""
    return REPO_URL.removeprefix("https://github.com/").strip("/")


def colab_url(path: str) -> str:
    """Open `path` (relative to the repository root) in Colab, at the pinned tag."""
    return f"https://colab.research.google.com/github/{_github_path()}/blob/{TAG}/{path}"


def kaggle_url(path: str) -> str:
    return f"https://kaggle.com/kernels/welcome?src={REPO_URL}/blob/{TAG}/{path}"


def badges(path: str) -> str:
    """Markdown that tells how to open a notebook on Colab or Kaggle: the 'Open in Colab' and
    'Open in Kaggle' badges once released; before that, one line: upload it and attach the wheel."""
    if not RELEASED:
        return (f"{OPEN_BY_UPLOAD} tunix-lite {VERSION} is not published yet: upload `{path}` to "
                f"Colab or Kaggle, attach the wheel (`{WHEEL_BUILD}` in a checkout) as a Kaggle "
                "dataset or in Colab's Files pane, and run the first code cell.")
    colab = "https://colab.research.google.com/assets/colab-badge.svg"
    kaggle = "https://kaggle.com/static/images/open-in-kaggle.svg"
    return (f"[![Open In Colab]({colab})]({colab_url(path)}) "
            f"[![Open In Kaggle]({kaggle})]({kaggle_url(path)})")


def install_routes() -> list[tuple[str, str]]:
    """(where from, pip spec) for the routes that need the internet, in the order the setup cell
    tries them after an attached wheel; none before a release, when they could only fail."""
    if not RELEASED:
        return []
    return [("PyPI", f"{PACKAGE}=={VERSION}"), ("GitHub", f"{PACKAGE} @ git+{REPO_URL}@{TAG}")]


def wheel_instructions() -> str:
    """What a learner does when no route worked."""
    if RELEASED:
        build = f"turn the internet on, or build the wheel in a clone at {TAG}"
    else:  # there is no tag to clone yet
        build = "build the wheel in a checkout of the source"
    return (f"{build} ({WHEEL_BUILD}), attach it to Kaggle as a dataset or upload it to Colab's "
            "Files pane, and rerun this cell")


def _string(name: str, text: str, indent: str) -> list[str]:
    """`name = (text)` as source lines of at most 100 columns (implicit concatenation), broken only
    after a comma so that a command in `text` stays whole."""
    first = f"{indent}{name} = ("
    chunks = [""]
    for phrase in re.split(r"(?<=, )", text):
        if chunks[-1] and len(first) + len(chunks[-1] + phrase) > 97:  # room for quotes and ')'
            chunks.append("")
        chunks[-1] += phrase
    lines = [" " * len(first) + repr(chunk) for chunk in chunks]
    lines[0] = first + lines[0].lstrip()
    lines[-1] += ")"
    return lines


def _route_lines() -> str:
    """The setup cell's lines listing the routes to try, given `wheel` (None if none attached)."""
    routes = install_routes()
    if not routes:  # without a wheel there is nothing to try: say so in one line and stop
        stop = f"{PACKAGE} {VERSION} is not published yet: "
        return (f"        if wheel is None:\n            raise NotInstalled({stop!r} + fix)\n"
                "        routes = [('uploaded wheel', wheel)]")
    wheel_first = "        routes = [('uploaded wheel', wheel)] if wheel else []  # no network"
    return "\n".join([wheel_first, *(f"        routes.append({route!r})" for route in routes)])


# Each notebook's first code cell; $-names are filled in by setup_cell().
_SETUP_CELL = string.Template("""\
# Setup: run this cell first (Colab, Kaggle or a laptop). It installs nothing on a laptop clone.
import glob, importlib, importlib.util, pathlib, subprocess, sys
if importlib.util.find_spec("tunix_lite") is None:
    if (pathlib.Path.cwd().parent / "tunix_lite").is_dir():  # a clone of the repository
        sys.path.insert(0, str(pathlib.Path.cwd().parent))
    else:  # Colab / Kaggle: $package $version alone; setup() adds the dependencies
        class NotInstalled(Exception):  # Jupyter shows this one line, not a traceback
            def _render_traceback_(self):
                return [str(self)]
$fix
        uploads = $uploads
        wheel = max((w for g in uploads for w in glob.glob(g, recursive=True)), default=None)
$routes
        for n, (where, spec) in enumerate(routes, 1):
            pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                  "--retries", "1", spec], capture_output=True, text=True)
            if pip.returncode == 0:
                print(f"installed $package from {where}: {spec}")
                break
            error = (pip.stderr.strip() or "pip failed").splitlines()[-1]
            if n == len(routes):  # the last route: stop, saying what to do
                raise NotInstalled(f"$package from {where} failed ({error}); {fix}")
            print(f"$package from {where} failed ({error}); trying {routes[n][0]} next")
        importlib.invalidate_caches()
from tunix_lite.course.setup import setup
profile = setup($args)""")


def setup_cell(*args: str) -> str:
    """Source of every notebook's first code cell; `args` are setup()'s arguments, e.g.
    'extras=["gemma"]'.

    It must work before tunix_lite is installed: in a clone it uses the checkout; on Colab/Kaggle it
    installs the package alone (no dependencies) from an attached wheel, then (once released) from
    PyPI, then GitHub, printing one line per route that fails; the last failure stops the cell with
    one line, not a traceback. setup() then installs the dependencies this runtime lacks (keeping an
    accelerator jax that is in range) and, where asked, sets fake devices before jax starts.
    """
    return _SETUP_CELL.substitute(package=PACKAGE, version=VERSION, uploads=repr(list(WHEEL_GLOBS)),
                                  fix="\n".join(_string("fix", wheel_instructions(), " " * 8)),
                                  routes=_route_lines(), args=", ".join(args))
