"""The static results a notebook shows in every profile: a full run, measured once and saved with the course.

A `ci` run of a notebook trains for seconds, so its numbers show the mechanics, not the payoff. The payoff is a
full-recipe run saved in `course/results/NAME.md` (and `NAME.png`, a figure, when there is one), whose first line
names the command that reproduces it. `show(NAME, COMMAND)` displays them, or says which command makes them.
"""

from __future__ import annotations

from pathlib import Path

RESULTS = Path("../course/results")  # from notebooks/ or solutions/ in a clone


def show(name: str, command: str, folder: str | Path = RESULTS) -> bool:
    """Display course/results/NAME.png and .md; True when they exist (False in a copy without them)."""
    from IPython.display import Image, Markdown, display

    folder = Path(folder)
    table, figure = folder / f"{name}.md", folder / f"{name}.png"
    if figure.is_file():
        display(Image(filename=str(figure)))
    if table.is_file():
        display(Markdown(table.read_text(encoding="utf-8")))
        return True
    print(f"course/results/{name}.md is not in this copy: `{command}` measures it (a full run, minutes to an hour "
          "on a CPU) and writes it there")
    return False
