"""Math answers compared by rule: arithmetic read without `eval`, numbers and lists of numbers.

These are trusted checks: the verifier pool (tunix_lite.rewards.verifiers) runs them in worker
processes with a timeout, because an expression such as `9 ** 9 ** 9` is legal and would take
hours.
math-verify's LaTeX reading is layered on top in tunix_lite.rewards.math_latex.
"""

import ast
import math
import operator
import re

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate_expression(text: str) -> float:
    """The value of an arithmetic expression (numbers, + - * / // % **, parentheses), ValueError
    otherwise. No names, calls or attributes are ever evaluated; `**` is evaluated as written,
    which is why this runs in a worker with a timeout (`9 ** 9 ** 9` would take hours)."""
    def value(node):
        number = isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
        if number and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        raise ValueError(f"not arithmetic: {ast.unparse(node)!r}")

    try:
        tree = ast.parse(text.strip().replace("^", "**").replace("×", "*"), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an expression: {text!r}") from None
    return value(tree.body)


def _numbers(text: str) -> list[float] | None:
    """A comma-separated list of expressions as numbers (one item for a single number), or None."""
    try:
        return [float(evaluate_expression(part)) for part in text.split(",")]
    except (ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None


def check_math(predicted: str | None, reference: str, rel_tol: float = 1e-6, latex=None) -> float:
    """1.0 when `predicted` equals `reference`: as numbers (`"32/2"` equals `"16"`), as lists of
    numbers (`"3, 5, 7"`), else as whitespace-normalised text; 0.0 otherwise (or when there is no
    prediction).

    `latex`: math-verify's `(parse, verify)`, to also accept what those rules cannot read when the
    reference holds a digit or a backslash: `\\frac{1}{2}` for `0.5`, `1+x^2` for `x^2+1`. Plain
    words never reach it: read as math, `bleu` is the product b*l*e*u, equal to `blue`. The reward
    passes it through `tunix_lite.rewards.math_latex.check_math_latex` where math-verify is
    installed."""
    if predicted is None:
        return 0.0
    expected, got = _numbers(reference), _numbers(predicted)
    if expected is not None and got is not None:
        return float(len(got) == len(expected) and all(
            math.isclose(g, e, rel_tol=rel_tol, abs_tol=1e-9) for g, e in zip(got, expected)))
    if predicted.split() == reference.split():
        return 1.0
    if latex is None or not re.search(r"[\\\d]", reference):
        return 0.0
    parse, verify = latex
    # $...$: read as math; unwrapped, math-verify compares a comma list by its last number only
    return float(verify(parse(f"${reference}$"), parse(f"${predicted}$")))
