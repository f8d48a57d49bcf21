"""Graded tests for phase 4, run against --impl (default: solutions/04_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase04.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase04 import *  # noqa: F403

PHASE = "04"
