"""Graded tests for phase 1, run against --impl (default: solutions/01_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase01.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase01 import *  # noqa: F403

PHASE = "01"
