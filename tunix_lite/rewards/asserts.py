"""A code task's test asserts, judged in the trusted process: only the program's part runs in the
sandbox.

`assert set(f(x)) == set((4, 5))` has two parts. The program's part, `f(x)`, only the program can
compute. The test's part, `set(...) == set((4, 5))`, decides the verdict: evaluated in the sandbox,
it would run on the program's interpreter, which the program may have patched
(`builtins.set = lambda *a: 1` makes both sides 1, and the test passes). So `plan(test)` splits a
test: every call of a function that is not one of `TRUSTED`'s (the program's functions), and every
other name, becomes a probe the sandbox evaluates to a plain value; the rest is evaluated here by a
small interpreter over the test's syntax tree, with the real builtins, bounded work and the call's
deadline (`passes`). The expected values never leave this process.

    p = plan("assert set(f(x)) == set((4, 5))")
    p.probes                # (("iter", "f(x)"),): what the sandbox evaluates
    passes(p, [[5, 4]])     # True, computed here

Evaluated here: literals and displays, comparisons (chained), and/or/not, arithmetic, subscripts and
slices, conditional expressions, calls of `TRUSTED` functions and of `math`'s, and a few methods of
str, list and dict (`METHODS`) on values computed here. Bounded: no operation builds more than
`sandbox.Limits` allows (`"x" * f(n)`, `2 ** f(n)`, `list(range(f(n)))`), and a set or dict is
checked for colliding hashes before it is built. A probe that is an argument a function iterates
(`set(f(x))`, `sorted(f(x))`) comes back as a list when the program returns a generator.

A call that passes a function of the program (`map(f, xs)`, `sorted(xs, key=f)`) runs whole in
the sandbox: its value is the program's, computed from the test's inputs only. A test with anything
else (a comprehension, a lambda, an f-string, `*args`) is evaluated whole in the sandbox and passes
when its plain value is truthy, as before: a program that patches its builtins can pass it
(`Plan.in_child` says so; write such tests as separate asserts). Other statements (`x = f(2)`) run
in the sandbox and pass when they do not raise. The plan depends on the test alone, never on the
program, so a program cannot choose how it is judged.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import functools
import itertools
import math
import operator
import re
import time
from collections.abc import Sequence

from tunix_lite.rewards.sandbox import LIMITS, OverLimits, check_hashes

FAILED = object()  # a probe's answer when it raised (or did not come back)
_PROBE = "\0probe"  # the placeholder names of probes: no test can spell them
MAX_BITS = 2**20  # the largest integer arithmetic here builds (~315,000 digits)
_WIDE_FORMAT = re.compile(r"%[^a-zA-Z%]*\d{4,}")  # "%099999999d": a width past any answer


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one test is judged: `probes` ((mode, source): "eval", "iter" or "exec") run in the
    sandbox, in order; `kind` is "assert" (judged here, `expression` with the probes replaced by
    placeholders), "in_child" (an assert judged on the truth of its value from the sandbox),
    "statement" (passes when it runs) or "invalid" (fails)."""

    probes: tuple[tuple[str, str], ...]
    kind: str
    expression: ast.expr | None = None

    @property
    def in_child(self) -> bool:
        return self.kind == "in_child"


@functools.lru_cache(maxsize=4096)
def plan(test: str) -> Plan:
    """The plan of one test line (cached: RL asks the same tests of every completion)."""
    try:
        body = ast.parse(test).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return Plan((), "invalid")
    if len(body) != 1 or not isinstance(body[0], ast.Assert):
        return Plan((("exec", test),), "statement")
    planner = _Planner()
    try:
        try:
            expression = planner.visit(body[0].test)
            return Plan(tuple(planner.probes), "assert", expression)
        except _Unsupported:
            return Plan((("eval", ast.unparse(body[0].test)),), "in_child")
    except RecursionError:  # nested past what Python's own compiler takes
        return Plan((), "invalid")


def passes(plan: Plan, answers: Sequence, *, deadline: float | None = None) -> bool:
    """Whether the test passed, given the sandbox's answer to each of its probes (a plain value, or
    FAILED when it raised); TimeoutError once `deadline` (time.monotonic()) passes, OverLimits when
    judging would build past the limits (an answer made to stall this process)."""
    if plan.kind == "invalid":
        return False
    if plan.kind in ("statement", "in_child"):
        return answers[0] is not FAILED and (plan.kind == "statement" or bool(answers[0]))
    try:
        return bool(_Evaluator(answers, deadline).eval(plan.expression))
    except (TimeoutError, OverLimits):
        raise
    except Exception:  # noqa: BLE001 - a probe that raised, or a value that cannot be compared
        return False


class _Unsupported(Exception):
    """A construct the evaluator here does not know: the test runs whole in the sandbox."""


class _ProbeFailed(Exception):
    """The sandbox raised evaluating a probe the verdict needs: the assert fails, as it would."""


def _items(iterable) -> list:
    """An iterable's items, refusing more than a container may hold (`range(10**12)` included)."""
    items = list(itertools.islice(iterable, LIMITS.items + 1))
    if len(items) > LIMITS.items:
        raise OverLimits(f"more than {LIMITS.items} items")
    return items


def _set(iterable=(), kind=set):
    items = _items(iterable)
    check_hashes(items)
    return kind(items)


def _dict(items=(), **named):
    pairs = list(items.items()) if type(items) is dict else [tuple(p) for p in _items(items)]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError("dict() needs pairs")
    check_hashes([key for key, _ in pairs] + list(named))
    return dict(pairs, **named)


def _min_max(choose):
    def bounded(*args, **kwargs):
        return choose(_items(args[0]) if len(args) == 1 else args, **kwargs)
    return bounded


def _sum(iterable, start=0):
    if type(start) not in (int, float, complex):  # sum(lists, []) is quadratic
        raise TypeError("sum() here adds numbers only")
    return sum(_items(iterable), start)


def _int(value=0, *base):
    if isinstance(value, (str, bytes)) and len(value) > LIMITS.digits + 1:
        raise OverLimits(f"an integer of more than {LIMITS.digits} digits")
    return int(value, *base)


def _power(base, exponent, modulus=None):
    if modulus is None and type(base) is int and type(exponent) is int and exponent > 0 \
            and abs(base) > 1 and exponent * base.bit_length() > MAX_BITS:
        raise OverLimits(f"a power of more than {MAX_BITS} bits")
    return pow(base, exponent, modulus)


def _times(a, b):
    for sequence, count in ((a, b), (b, a)):
        if isinstance(sequence, (str, bytes, list, tuple)) and type(count) in (int, bool) \
                and len(sequence) * max(count, 0) > LIMITS.items * 64:
            raise OverLimits("a repetition past the limits")
    if type(a) is int and type(b) is int and a.bit_length() + b.bit_length() > MAX_BITS:
        raise OverLimits(f"a product of more than {MAX_BITS} bits")
    return a * b


def _shift(a, b):
    if type(a) is int and type(b) is int and a.bit_length() + b > MAX_BITS:
        raise OverLimits(f"a shift past {MAX_BITS} bits")
    return a << b


def _modulo(a, b):
    if isinstance(a, (str, bytes)) and _WIDE_FORMAT.search(str(a)):
        raise OverLimits("a %-format with a width past the limits")
    return a % b


# The builtins and math functions a test may call here: linear in their inputs, or bounded (each
# builtin that builds from an iterable, or builds large numbers, goes through `_BOUNDED`).
TRUSTED = {name: getattr(builtins, name)
           for name in ("abs", "all", "any", "bin", "bool", "chr", "dict", "divmod", "enumerate",
                        "filter", "float", "frozenset", "hex", "int", "isinstance", "len", "list",
                        "map", "max", "min", "oct", "ord", "pow", "range", "repr", "reversed",
                        "round", "set", "sorted", "str", "sum", "tuple", "type", "zip")}
MATH = {name: getattr(math, name) for name in (
    "ceil", "copysign", "e", "exp", "fabs", "floor", "gcd", "hypot", "inf", "isclose", "isfinite",
    "isinf", "isnan", "log", "log10", "log2", "nan", "pi", "sqrt", "tau", "trunc")}
_BOUNDED = {
    list: lambda iterable=(): _items(iterable), tuple: lambda iterable=(): tuple(_items(iterable)),
    set: _set, frozenset: lambda iterable=(): _set(iterable, frozenset), dict: _dict,
    sorted: lambda iterable, **kw: sorted(_items(iterable), **kw),
    min: _min_max(min), max: _min_max(max), sum: _sum, int: _int, pow: _power,
    all: lambda iterable: all(_items(iterable)), any: lambda iterable: any(_items(iterable)),
    enumerate: lambda iterable, start=0: enumerate(_items(iterable), start),
    zip: lambda *iterables: zip(*map(_items, iterables)),
    reversed: lambda sequence: reversed(_items(sequence)),
    map: lambda fn, *iterables: map(lambda *a: _call(fn, a, {}), *map(_items, iterables)),
    filter: lambda fn, iterable: [x for x in _items(iterable)
                                  if (_call(fn, (x,), {}) if fn is not None else x)],
}
# The functions whose first argument they iterate: a generator from the program comes back a list.
_ITERATES = frozenset(("all", "any", "enumerate", "frozenset", "list", "max", "min", "reversed",
                       "set", "sorted", "sum", "tuple", "zip"))
# Methods of a value computed here (never the program's objects), with the types they apply to.
_TEXT, _SEQUENCE = (str,), (str, list, tuple)
METHODS = {**dict.fromkeys(("capitalize", "endswith", "find", "isalnum", "isalpha", "isdigit",
                            "islower", "isspace", "isupper", "join", "lower", "lstrip", "rfind",
                            "rindex", "rsplit", "rstrip", "split", "splitlines", "startswith",
                            "strip", "title", "upper"), _TEXT),
           **dict.fromkeys(("count", "index"), _SEQUENCE),
           **dict.fromkeys(("get", "items", "keys", "values"), (dict,))}
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _times,
              ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: _modulo,
              ast.Pow: _power, ast.LShift: _shift, ast.RShift: operator.rshift,
              ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.BitAnd: operator.and_,
              ast.MatMult: operator.matmul}
_UNARY = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos,
          ast.Invert: operator.invert}
_COMPARISONS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
                ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
                ast.Is: operator.is_, ast.IsNot: operator.is_not,
                ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def _call(fn, args, kwargs):
    return _BOUNDED.get(fn, fn)(*args, **kwargs)


def _math_name(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "math" and node.attr in MATH)


def _rebuilt(node: ast.AST, **fields) -> ast.AST:
    new = copy.copy(node)
    for name, value in fields.items():
        setattr(new, name, value)
    return new


class _Planner:
    """Rewrites a test's expression: the program's parts become probe placeholders."""

    def __init__(self):
        self.probes: list[tuple[str, str]] = []

    def probe(self, node: ast.expr, iterated: bool) -> ast.Name:
        self.probes.append(("iter" if iterated else "eval", ast.unparse(node)))
        return ast.Name(id=f"{_PROBE}{len(self.probes) - 1}", ctx=ast.Load())

    def visit(self, node, iterated: bool = False):
        if node is None or isinstance(node, ast.Constant):
            return node
        if isinstance(node, ast.Name):
            return node if node.id in TRUSTED else self.probe(node, iterated)
        if isinstance(node, ast.Attribute):
            return node if _math_name(node) else self.probe(node, iterated)
        if isinstance(node, ast.Call):
            return self.call(node, iterated)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                raise _Unsupported
            return _rebuilt(node, elts=[self.visit(e) for e in node.elts])
        if isinstance(node, ast.Dict):
            if None in node.keys:  # {**mapping}
                raise _Unsupported
            return _rebuilt(node, keys=[self.visit(k) for k in node.keys],
                            values=[self.visit(v) for v in node.values])
        fields = {ast.Compare: ("left", "comparators"), ast.BoolOp: ("values",),
                  ast.UnaryOp: ("operand",), ast.BinOp: ("left", "right"),
                  ast.IfExp: ("test", "body", "orelse"), ast.Subscript: ("value", "slice"),
                  ast.Slice: ("lower", "upper", "step")}.get(type(node))
        if fields is None:
            raise _Unsupported  # a comprehension, a lambda, an f-string, a walrus...
        return _rebuilt(node, **{name: [self.visit(v) for v in value] if isinstance(value, list)
                                 else self.visit(value)
                                 for name in fields for value in [getattr(node, name)]})

    def call(self, node: ast.Call, iterated: bool):
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None
                                                                     for k in node.keywords):
            raise _Unsupported
        func, start = node.func, len(self.probes)
        functions = [k.value for k in node.keywords if k.arg == "key"]
        if getattr(func, "id", None) in ("map", "filter") and node.args:
            functions.append(node.args[0])
        if any(isinstance(f, ast.Name) and f.id not in TRUSTED for f in functions):
            return self.probe(node, iterated)  # the program's function applied: the call is its
        if isinstance(func, ast.Name) and func.id in TRUSTED or _math_name(func):
            name = getattr(func, "id", None)
            iterated = [name in _ITERATES and (i == 0 or name == "zip")
                        for i in range(len(node.args))]
            return _rebuilt(node, args=[self.visit(a, it) for a, it in zip(node.args, iterated)],
                            keywords=[_rebuilt(k, value=self.visit(k.value))
                                      for k in node.keywords])
        if isinstance(func, ast.Attribute) and func.attr in METHODS:
            receiver = self.visit(func.value)
            if len(self.probes) == start:  # a method of a value computed here
                return _rebuilt(node, func=_rebuilt(func, value=receiver),
                                args=[self.visit(a, func.attr == "join") for a in node.args],
                                keywords=[_rebuilt(k, value=self.visit(k.value))
                                          for k in node.keywords])
            del self.probes[start:]  # a method of the program's value: the call is the program's
        return self.probe(node, iterated)


class _Evaluator:
    """Evaluates a planned expression with the probes' answers, checking the deadline as it goes."""

    def __init__(self, answers: Sequence, deadline: float | None):
        self.answers, self.deadline = answers, deadline

    def eval(self, node):
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimeoutError("judging the tests ran past the call's deadline")
        kind = type(node)
        if kind is ast.Constant:
            return node.value
        if kind is ast.Name:
            if not node.id.startswith(_PROBE):
                return TRUSTED[node.id]
            answer = self.answers[int(node.id[len(_PROBE):])]
            if answer is FAILED:
                raise _ProbeFailed(node.id)
            return answer
        if kind is ast.Attribute:
            return MATH[node.attr]
        if kind in (ast.Tuple, ast.List):
            return (tuple if kind is ast.Tuple else list)(self.eval(e) for e in node.elts)
        if kind is ast.Set:
            return _set([self.eval(e) for e in node.elts])
        if kind is ast.Dict:
            return _dict([(self.eval(k), self.eval(v)) for k, v in zip(node.keys, node.values)])
        if kind is ast.BoolOp:
            value = None
            for operand in node.values:  # short-circuit, as Python does
                value = self.eval(operand)
                if bool(value) != isinstance(node.op, ast.And):
                    return value
            return value
        if kind is ast.UnaryOp:
            return _UNARY[type(node.op)](self.eval(node.operand))
        if kind is ast.BinOp:
            return _OPERATORS[type(node.op)](self.eval(node.left), self.eval(node.right))
        if kind is ast.Compare:
            left = self.eval(node.left)
            for op, comparator in zip(node.ops, node.comparators):
                right = self.eval(comparator)
                if not _COMPARISONS[type(op)](left, right):
                    return False
                left = right
            return True
        if kind is ast.IfExp:
            return self.eval(node.body) if self.eval(node.test) else self.eval(node.orelse)
        if kind is ast.Subscript:
            return self.eval(node.value)[self.eval(node.slice)]
        if kind is ast.Slice:
            return slice(*(None if p is None else self.eval(p)
                           for p in (node.lower, node.upper, node.step)))
        return self.call(node)

    def call(self, node: ast.Call):
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords}
        func = node.func
        if isinstance(func, ast.Attribute) and not _math_name(func):
            receiver = self.eval(func.value)
            if type(receiver) not in METHODS[func.attr]:
                raise TypeError(f"{type(receiver).__name__}.{func.attr} is not judged here")
            if func.attr == "join":
                args = [_items(args[0])] if args else args
            return getattr(receiver, func.attr)(*args, **kwargs)
        return _call(self.eval(func), args, kwargs)
