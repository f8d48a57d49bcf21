"""Every badge and relative link in the course points at a file that exists, at the pinned release,
and every notebook starts with the shared setup cell."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from urllib.parse import unquote

import pytest

from tunix_lite import course
from tunix_lite.course.notebook import read, source

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "exercises") for p in (ROOT / d).glob("*.ipynb"))
MARKDOWN = sorted((ROOT / "course").glob("*.md")) + [p for p in [ROOT / "README.md"] if p.is_file()]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # markdown links and images: [text](target)
BADGE = re.compile(r"(?:colab\.research\.google\.com/github/|kaggle\.com/kernels/welcome\?src=https://github\.com/)"
                   r"([^/]+/[^/]+)/blob/([^/]+)/([^)\s]+)")


def _documents():
    for path in MARKDOWN:
        yield path, path.read_text(encoding="utf-8")
    for path in NOTEBOOKS:
        yield path, "\n".join(source(c) for c in read(path)["cells"] if c["cell_type"] == "markdown")


DOCS = list(_documents())


@pytest.mark.parametrize("path, text", DOCS, ids=[str(p.relative_to(ROOT)) for p, _ in DOCS])
def test_relative_links_exist(path, text):
    missing = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        file = unquote(target.split("#", 1)[0])
        if file and not (path.parent / file).exists():
            missing.append(target)
    assert not missing, f"{path.relative_to(ROOT)}: broken links {missing}"


@pytest.mark.parametrize("path, text", DOCS, ids=[str(p.relative_to(ROOT)) for p, _ in DOCS])
def test_badges_point_at_existing_files_at_the_pinned_tag(path, text):
    repo = course.REPO_URL.removeprefix("https://github.com/")
    for owner_name, ref, file in BADGE.findall(text):
        assert owner_name == repo, f"badge for {owner_name}, configured repo is {repo}"
        assert ref == course.TAG, f"badge at {ref}, not the pinned tag {course.TAG}"
        assert (ROOT / file).is_file(), f"badge points at missing {file}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_has_its_own_badges_and_the_setup_cell(path):
    nb = read(path)
    rel = path.relative_to(ROOT).as_posix()
    assert course.colab_url(rel) in source(nb["cells"][0]) and course.kaggle_url(rel) in source(nb["cells"][0])
    first_code = next(source(c) for c in nb["cells"] if c["cell_type"] == "code")
    *body, last = first_code.splitlines()
    assert body == course.setup_cell().splitlines()[:-1], "the first code cell must be course.setup_cell(...)"
    assert last.startswith("profile = setup(")


def test_version_matches_pyproject():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["version"] == course.VERSION
    assert "course" in meta["project"]["optional-dependencies"]
