"""The results the lessons display: full-recipe runs, measured once and shipped with the package.

A `ci` run of a notebook trains for seconds, so its numbers show the mechanics, not the payoff. The
payoff is a full run saved here as `NAME.md` (and `NAME.png`, a figure, when there is one), whose
first line names the command that reproduces it. They ship inside tunix_lite, so a notebook shows
them wherever it runs (a clone, a Colab upload, a Kaggle session with nothing beside it).
How they were measured (the scripts, each run's log, the trained adapters) stays in the
repository's course/results/.

    show("06_rl")                  # display 06_rl.png and 06_rl.md
    path("06_rl_gemma.md")         # the file, e.g. to display one section of it
"""

from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The shipped result file `name` (e.g. "06_rl.md"); one line listing them when it is not one."""
    file = FOLDER / name
    if "/" in name or not file.is_file():
        shipped = sorted(p.name for p in FOLDER.iterdir() if p.suffix in (".md", ".png"))
        raise FileNotFoundError(f"no result named {name!r}; shipped: {', '.join(shipped)}")
    return file


def show(name: str, command: str | None = None) -> None:
    """Display NAME.png (when there is one) and NAME.md. `command`: the run that measured them, as
    the table's first line also says (kept for the reader of the notebook's source)."""
    from IPython.display import Image, Markdown, display

    figure = FOLDER / f"{name}.png"
    if figure.is_file():
        display(Image(filename=str(figure)))
    display(Markdown(path(f"{name}.md").read_text(encoding="utf-8")))
