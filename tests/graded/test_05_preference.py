"""Graded tests for phase 5, run against --impl (default: solutions/05_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase05.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase05 import *  # noqa: F403

PHASE = "05"
