"""Hidden thresholds of the capstone check, for this cohort (course/INSTRUCTOR.md):

    tunix-lite grade-capstone RUN_DIR --tests course/instructor/hidden --json results/grade.json

They override tunix_lite/course/capstone.py's public THRESHOLDS. The public check compares with the
start model (`base`), which any working recipe beats; here the bar is the course's own recipe: a
learner's last stage must beat its SFT stage on held-out prompts, paired, on at least 240 of them.
Change them per cohort (another baseline, a reference run `DIR:STAGE` scored on the same test
prompts, a higher bar) and check them on a reference run first.
"""

THRESHOLDS = {
    "baseline": "sft",
    "min_n": 240,
    "min_lower_bound": 0.0,
    "min_words": 300,
    "sections": ("recipe", "result", "what did not work", "next"),
}
