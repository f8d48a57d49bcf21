"""Every badge and relative link in the course points at a file that exists, at the pinned release,
every notebook starts with the shared setup cell, and every install source a learner sees (badge,
setup cell, README command) is built from the one setting, course.REPO_URL + VERSION + RELEASED:
before a release no badge, command or setup cell points at PyPI or GitHub: they hold nothing yet."""

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
# anything that pins where tunix-lite comes from: a PyPI version, a git URL at a ref, a wheel file name
PINS = re.compile(r"tunix-lite(?:\[[\w,]*\])?==(?P<version>[\w.]+)"
                  r"|git\+(?P<repo>https://[^\s@'\"]+)@(?P<ref>[\w.-]+)"
                  r"|tunix_lite-(?P<wheel>\d[\w.]*)-py3")
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
    found = BADGE.findall(text)
    assert course.RELEASED or not found, f"badges for an unpublished release: {found}"
    for owner_name, ref, file in found:
        assert owner_name == repo, f"badge for {owner_name}, configured repo is {repo}"
        assert ref == course.TAG, f"badge at {ref}, not the pinned tag {course.TAG}"
        assert (ROOT / file).is_file(), f"badge points at missing {file}"


def _everything(path: Path) -> str:
    if path.suffix == ".ipynb":
        return "\n".join(source(c) for c in read(path)["cells"])
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", MARKDOWN + NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_install_pin_is_the_one_setting(path):
    for m in PINS.finditer(_everything(path)):
        network = m["version"] or m["repo"]
        assert course.RELEASED or not network, f"{m[0]}: {course.VERSION} is not published"
        assert m["version"] in (None, course.VERSION), f"{m[0]}: not tunix-lite {course.VERSION}"
        assert m["wheel"] in (None, course.VERSION), f"{m[0]}: not tunix-lite {course.VERSION}"
        if m["repo"]:
            assert (m["repo"], m["ref"]) == (course.REPO_URL, course.TAG), f"{m[0]}: not {course.REPO_URL}@{course.TAG}"


def test_setup_cell_and_badges_follow_the_setting(monkeypatch):
    assert course.TAG == f"v{course.VERSION}"
    monkeypatch.setattr(course, "RELEASED", True)
    monkeypatch.setattr(course, "REPO_URL", "https://github.com/someone/fork")
    monkeypatch.setattr(course, "VERSION", "9.8.7")
    monkeypatch.setattr(course, "TAG", "v9.8.7")
    text = course.setup_cell() + course.badges("notebooks/x.ipynb")
    assert "tunix-lite/tunix-lite" not in text and "0.1.0" not in text
    pins = [m[0] for m in PINS.finditer(text)]
    assert pins == ["tunix-lite==9.8.7", "git+https://github.com/someone/fork@v9.8.7"]
    assert "github/someone/fork/blob/v9.8.7/notebooks/x.ipynb" in text
    assert "src=https://github.com/someone/fork/blob/v9.8.7/notebooks/x.ipynb" in text
    assert all(glob in text for glob in course.WHEEL_GLOBS) and course.WHEEL_BUILD in text


def test_before_a_release_only_the_wheel_route_is_offered(monkeypatch):
    monkeypatch.setattr(course, "RELEASED", False)
    text = course.setup_cell() + course.badges("notebooks/x.ipynb")
    assert [m[0] for m in PINS.finditer(text)] == [] and "https://" not in text
    assert "PyPI" not in text and "GitHub" not in text
    assert all(glob in text for glob in course.WHEEL_GLOBS) and course.WHEEL_BUILD in text
    assert "\n" not in course.badges("notebooks/x.ipynb") and "`notebooks/x.ipynb`" in text


def test_readme_documents_the_wheel_build_and_the_jax_range():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"`{course.WHEEL_BUILD}`" in readme or f"\n{course.WHEEL_BUILD}\n" in readme
    unpublished = f"tunix-lite {course.VERSION} is not published yet" in readme
    assert unpublished != course.RELEASED, "the README must say whether the release is published"
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    (jax,) = [d for d in deps if d.startswith("jax")]
    assert f"`{jax}`" in readme, f"README must state the supported range {jax}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_has_its_own_badges_and_the_setup_cell(path):
    nb = read(path)
    rel = path.relative_to(ROOT).as_posix()
    assert course.badges(rel) in source(nb["cells"][0]), "run tunix_lite.course.build --stamp"
    first_code = next(source(c) for c in nb["cells"] if c["cell_type"] == "code")
    *body, last = first_code.splitlines()
    assert body == course.setup_cell().splitlines()[:-1], "the first code cell must be course.setup_cell(...)"
    assert last.startswith("profile = setup(")


def test_version_matches_pyproject():
    import tunix_lite

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["version"] == course.VERSION == tunix_lite.__version__
    assert meta["project"]["name"] == course.PACKAGE
