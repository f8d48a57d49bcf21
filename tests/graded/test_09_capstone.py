"""Graded tests for phase 9, run against --impl (default: solutions/09_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase09.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase09 import *  # noqa: F403

PHASE = "09"
