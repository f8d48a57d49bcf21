"""IPython startup file of the kernels tests/test_notebooks_from_wheel.py runs notebooks in.

Two things, before the notebook's first cell:
- Every file a cell opens or lists is checked (a Python audit hook): one inside the source tree
  (the repository, or its stand-in around the notebook's folder) but outside the notebook's own
  folder fails that cell with PermissionError, and is recorded in sys.source_tree_reads (a cell
  that catches the error is still caught by the last cell the test appends).
- setup() returns the profile asked for (its name, so every branch a cell takes on it) with the
  `ci` profile's sizes and demo model (the cpu profile's, Gemma 3 270M, is a download a runtime
  makes, not a file of the source tree); once it has run (jax is up by then), every Trainer.fit
  stops after BARE_NOTEBOOK_STEPS steps: the profile's code paths, at a few steps each, compiling
  mostly the programs CI's own run of the notebooks compiles (the persistent cache shares them).
"""

import dataclasses
import os
import sys

FORBIDDEN = os.environ["BARE_NOTEBOOK_FORBIDDEN"].split(os.pathsep)  # the source tree(s)
ALLOWED = [os.getcwd(), *os.environ["BARE_NOTEBOOK_ALLOWED"].split(os.pathsep)]  # inside them
STEPS = int(os.environ["BARE_NOTEBOOK_STEPS"])
EVENTS = ("open", "os.listdir", "os.scandir", "glob.glob")
sys.source_tree_reads = []


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _audit(event: str, args: tuple) -> None:
    if event not in EVENTS or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    named = os.path.abspath(os.fsdecode(args[0]))
    for path in (named, os.path.realpath(named)):
        if _inside(path, FORBIDDEN) and not _inside(path, ALLOWED):
            sys.source_tree_reads.append(os.fsdecode(args[0]))
            raise PermissionError(f"a cell reads {os.fsdecode(args[0])!r}, a file of the source tree "
                                  "outside the notebook's folder: on Colab or Kaggle it is not there")


sys.addaudithook(_audit)

import tunix_lite.course.setup as _course_setup  # noqa: E402  (imports no jax)

_setup = _course_setup.setup


def _setup_then_cap_steps(*args, **kwargs):
    profile = _setup(*args, **kwargs)
    ci = _course_setup.PROFILES["ci"]
    data = profile.mesh_shape["data"]
    profile = dataclasses.replace(profile, steps=ci.steps, batch=-(-ci.batch // data) * data,
                                  seq=ci.seq, gen_tokens=ci.gen_tokens, demo_model=ci.demo_model)
    from tunix_lite.training.trainer import Trainer

    fit = Trainer.fit

    def capped(self, batches, steps, **options):
        return fit(self, batches, min(steps, STEPS), **options)

    Trainer.fit = capped
    return profile


_course_setup.setup = _setup_then_cap_steps
