"""The `math` reward's check with math-verify (the [tasks] extra), for LaTeX answers.

math-verify (with sympy) is imported at the top on purpose: a verifier worker imports a check's
module while it loads the call, before the call's timeout starts, and both take ~1 s to load.
"""

from math_verify import parse, verify

from tunix_lite.rewards.math_answers import check_math


def check_math_latex(predicted: str | None, reference: str, rel_tol: float = 1e-6) -> float:
    """`check_math`, then math-verify for what its rules cannot read (see check_math's `latex`)."""
    return check_math(predicted, reference, rel_tol, latex=(parse, verify))
