"""Graded tests for phase 6, run against --impl (default: solutions/06_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase06.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase06 import *  # noqa: F403

PHASE = "06"
