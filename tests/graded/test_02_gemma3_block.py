"""Graded tests for phase 2, run against --impl (default: solutions/02_*.ipynb).

The test bodies live in tunix_lite/course/graded/phase02.py so that check() can run them on Colab.
"""

from tunix_lite.course.graded.phase02 import *  # noqa: F403

PHASE = "02"
