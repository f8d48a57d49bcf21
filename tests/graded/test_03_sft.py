"""Graded tests for phase 3, run against --impl (default: solutions/03_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase03.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase03 import *  # noqa: F403

PHASE = "03"
