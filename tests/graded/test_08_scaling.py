"""Graded tests for phase 8, run against --impl (default: solutions/08_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase08.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase08 import *  # noqa: F403

PHASE = "08"
