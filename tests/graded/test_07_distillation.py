"""Graded tests for phase 7, run against --impl (default: solutions/07_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase07.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase07 import *  # noqa: F403

PHASE = "07"
