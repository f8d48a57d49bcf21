"""Verifiers: answer checkers that run untrusted work in worker processes, with a timeout per call.

A reward that evaluates a model's expression or runs its code can hang (`while True: pass`, `9 ** 9 ** 9`), blow up
memory or crash the interpreter. Run in the training process, one such completion ends a run hours in. Here every
check runs in a pool of worker processes: a check that raises, crashes its worker or runs past `timeout` scores
0.0, the worker is replaced, and training goes on.

    pool = VerifierPool(workers=2, timeout=2.0)
    pool.map(check_math, [("16", "16"), ("9 ** 9 ** 9", "1")])      # [1.0, 0.0]: the second one timed out
    pool.stats                                                       # {"calls": 2, "timeouts": 1, ...}

The rewards below follow TRL's reward-callable convention, `reward(prompts, completions, **columns) -> list[float]`,
so the GRPO trainer (and TRL's) can use them as they are; they share one pool per process (`default_pool`):

- `reward_math(prompts, completions, answer)`: the tagged answer equals the reference as a number, a list of
  numbers, or else as text (see `check_math`);
- `reward_code(prompts, completions, tests)`: the fraction of `tests` (Python assert lines) the completion's code
  passes (see `check_code`);
- `verifier_reward(check)`: any check function of your own, `check(answer, **row) -> float`, run the same way.

Workers are separate processes started with "spawn" (never fork: a forked JAX process can deadlock), so a check
function must be importable: defined at the top level of a module (a notebook cell's function is not), and its
arguments must pickle. A worker imports only this module, not JAX. This is isolation against accidents (hangs,
crashes, runaway memory), not a security sandbox: the code runs with your user's permissions.
"""

from __future__ import annotations

import ast
import atexit
import math
import multiprocessing
import operator
import os
import re
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait

TIMEOUT = 2.0  # seconds per call
MEMORY_MB = 1024  # address-space limit per worker (Linux), so `"x" * 10**12` fails in the worker, not the machine


def _worker(conn, memory_mb: int | None) -> None:
    """A worker's loop: receive (fn, args), send back float(fn(*args)) or the error's text; None stops it."""
    if memory_mb:
        try:
            import resource

            limit = memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):  # not Linux, or a lower hard limit: run without it
            pass
    conn.send(("ready", 0.0))
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        fn, args = task  # unpickled by recv: fn's module is imported by now, outside the call's timeout
        conn.send(("started", 0.0))
        try:
            conn.send(("ok", float(fn(*args))))
        except BaseException as e:  # noqa: BLE001 - whatever the check does, the worker answers
            conn.send(("error", f"{type(e).__name__}: {e}"[:200]))


class _Worker:
    STARTUP = 120.0  # seconds a new worker may take to start (a busy machine), not counted in any call's timeout

    def __init__(self, context, memory_mb):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child, memory_mb), daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(self.STARTUP) or self.conn.recv()[0] != "ready":
            self.stop(kill=True)
            raise RuntimeError(f"a verifier worker process did not start within {self.STARTUP:g} s")

    def stop(self, kill: bool = False) -> None:
        if not kill:
            try:
                self.conn.send(None)
            except (OSError, ValueError):
                kill = True
        if kill:
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class VerifierPool:
    """`workers` processes that run check functions, each call limited to `timeout` seconds.

    `map(fn, args)` returns one float per argument tuple, in order: fn's value, or `failed` (0.0: a zero reward) when
    it raised, returned something that is not a finite number, crashed its worker or timed out (the worker is killed
    and replaced).
    `stats` counts calls, timeouts, crashes and errors since the pool started; `last_errors` keeps a few messages.
    Workers start on first use; `close()` (or leaving a `with` block) stops them.
    """

    def __init__(self, workers: int | None = None, timeout: float = TIMEOUT, *, memory_mb: int | None = MEMORY_MB):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.size = workers or min(4, os.cpu_count() or 1)
        if self.size < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.timeout, self.memory_mb = timeout, memory_mb
        self._context = multiprocessing.get_context("spawn")
        self._idle: list[_Worker] = []
        self.stats = {"calls": 0, "timeouts": 0, "crashes": 0, "errors": 0}
        self.last_errors: list[str] = []

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _failed(self, kind: str, message: str) -> float:
        self.stats[kind] += 1
        self.last_errors = (self.last_errors + [message])[-5:]
        return self._failed_value

    def map(self, fn: Callable[..., float], args: Sequence[tuple], *, failed: float = 0.0) -> list[float]:
        self._failed_value = failed
        results: list[float] = [failed] * len(args)
        pending = list(enumerate(args))[::-1]  # popped from the end: first in, first out
        busy: dict = {}  # connection -> (worker, index, started)
        self.stats["calls"] += len(args)
        while pending or busy:
            while pending and len(busy) < self.size:
                worker = self._idle.pop() if self._idle else _Worker(self._context, self.memory_mb)
                index, task_args = pending.pop()
                try:
                    worker.conn.send((fn, tuple(task_args)))
                except (OSError, ValueError):  # the worker died while idle: start another and retry
                    worker.stop(kill=True)
                    pending.append((index, task_args))
                    continue
                # the clock: _Worker.STARTUP until the worker has loaded the call (imports), then `timeout`
                busy[worker.conn] = (worker, index, time.monotonic() + _Worker.STARTUP)
            soonest = min(ends for _, _, ends in busy.values())
            for conn in wait(list(busy), timeout=max(0.0, soonest - time.monotonic())):
                worker, index, ends = busy.pop(conn)
                try:
                    status, value = conn.recv()
                except (EOFError, OSError):
                    worker.stop(kill=True)
                    results[index] = self._failed("crashes", f"call {index}: the worker died (exit code "
                                                             f"{worker.process.exitcode})")
                    continue
                if status == "started":
                    busy[conn] = (worker, index, time.monotonic() + self.timeout)
                    continue
                self._idle.append(worker)
                if status == "ok" and math.isfinite(value):
                    results[index] = value
                else:
                    results[index] = self._failed("errors", f"call {index}: {value if status != 'ok' else 'non-finite'}")
            now = time.monotonic()
            for conn, (worker, index, ends) in list(busy.items()):
                if now >= ends:
                    del busy[conn]
                    worker.stop(kill=True)
                    results[index] = self._failed("timeouts", f"call {index}: no answer in {self.timeout:g} s")
        return results

    def close(self) -> None:
        for worker in self._idle:
            worker.stop()
        self._idle = []


_DEFAULT: VerifierPool | None = None


def default_pool() -> VerifierPool:
    """The process's shared pool for the reward functions below (started on first use, closed at exit)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = VerifierPool()
        atexit.register(_DEFAULT.close)
    return _DEFAULT


# ----------------------------------------------------------------------------- checks (run inside the workers)

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate_expression(text: str) -> float:
    """The value of an arithmetic expression (numbers, + - * / // % **, parentheses), ValueError otherwise.
    No names, calls or attributes are ever evaluated; `**` is evaluated as written, which is why this runs in a
    worker with a timeout (`9 ** 9 ** 9` would take hours)."""
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
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


def check_math(predicted: str | None, reference: str, rel_tol: float = 1e-6) -> float:
    """1.0 when `predicted` equals `reference`: as numbers (`"32/2"` equals `"16"`), as lists of numbers
    (`"3, 5, 7"`), else as whitespace-normalised text; 0.0 otherwise (or when there is no prediction)."""
    if predicted is None:
        return 0.0
    expected = _numbers(reference)
    if expected is not None:
        got = _numbers(predicted)
        return float(got is not None and len(got) == len(expected)
                     and all(math.isclose(g, e, rel_tol=rel_tol, abs_tol=1e-9) for g, e in zip(got, expected)))
    return float(predicted.split() == reference.split())


_EQUATION = re.compile(r"(\d[\d\s+\-*/().]*?)\s*=\s*(\d+)")


def check_steps(completion: str) -> float:
    """A reference-free check of worked arithmetic: 1.0 when every `expression = number` written in the
    completion holds and the tagged answer is the last result, 0.5 when there are no equations to check but there is
    an answer, 0.0 otherwise. Best-of-N can rank samples by it without knowing the answer."""
    from tunix_lite.data.synthetic import answer_of  # a light module: no JAX

    answer = answer_of(completion)
    if answer is None:
        return 0.0
    equations = _EQUATION.findall(completion)
    if not equations:
        return 0.5
    for expression, result in equations:
        try:
            if not math.isclose(evaluate_expression(expression), float(result)):
                return 0.0
        except (ValueError, ZeroDivisionError, OverflowError, TypeError):
            return 0.0
    return float(answer.strip() == equations[-1][1])


_CODE_BLOCK = re.compile(r"```(?:python)?\n(.*?)```", re.S)


def check_code(program: str | None, tests: str | Sequence[str]) -> float:
    """The fraction of `tests` (Python statements, usually asserts; a string holds one per line) that pass after
    running `program`. A program that raises scores 0.0; one that never ends is stopped by the pool's timeout."""
    if not program:
        return 0.0
    block = _CODE_BLOCK.search(program)
    namespace: dict = {"__name__": "__verifier__"}
    try:
        exec(compile(block.group(1) if block else program, "<completion>", "exec"), namespace)  # noqa: S102
    except BaseException:  # noqa: BLE001 - a program that fails to run passes no test
        return 0.0
    lines = [t for t in (tests.splitlines() if isinstance(tests, str) else tests) if t.strip()]
    passed = 0
    for test in lines:
        try:
            exec(compile(test, "<test>", "exec"), namespace)  # noqa: S102
            passed += 1
        except BaseException:  # noqa: BLE001
            pass
    return passed / len(lines) if lines else 0.0


# ----------------------------------------------------------------------------- rewards (TRL's convention)


def _answers(completions: Sequence[str]) -> list[str | None]:
    from tunix_lite.data.synthetic import answer_of

    return [answer_of(c) for c in completions]


def reward_math(prompts, completions: Sequence[str], answer: Sequence[str], **columns) -> list[float]:
    """1.0 per completion whose tagged answer `check_math` accepts against the `answer` column, run in the
    default pool (a hanging or crashing check scores 0.0)."""
    return default_pool().map(check_math, list(zip(_answers(completions), answer, strict=True)))


def reward_code(prompts, completions: Sequence[str], tests: Sequence, **columns) -> list[float]:
    """The fraction of the `tests` column's asserts each completion's code passes (the code is the tagged answer
    or a ```python block, else the whole completion), run in the default pool."""
    programs = [a if a is not None else c for a, c in zip(_answers(completions), completions, strict=True)]
    return default_pool().map(check_code, list(zip(programs, tests, strict=True)))


def reward_steps(prompts, completions: Sequence[str], **columns) -> list[float]:
    """`check_steps` per completion (reference-free), run in the default pool."""
    return default_pool().map(check_steps, [(c,) for c in completions])


class _PoolReward:
    """A check function as a TRL reward: check(answer, **row) for each completion, in a pool."""

    def __init__(self, check: Callable[..., float], columns: Sequence[str], pool: VerifierPool | None):
        self.check, self.columns, self.pool = check, tuple(columns), pool
        self.__name__ = getattr(check, "__name__", "verifier")

    def __call__(self, prompts, completions: Sequence[str], **columns) -> list[float]:
        missing = [c for c in self.columns if c not in columns]
        if missing:
            raise KeyError(f"verifier {self.__name__} needs the dataset columns {missing}; it got {sorted(columns)}")
        rows = zip(_answers(completions), *(columns[c] for c in self.columns), strict=True)
        return (self.pool or default_pool()).map(_call_with_columns, [(self.check, self.columns, r) for r in rows])


def _call_with_columns(check, names, row) -> float:
    answer, *values = row
    return check(answer, **dict(zip(names, values)))


def verifier_reward(check: Callable[..., float], columns: Sequence[str] = ("answer",), *,
                    pool: VerifierPool | None = None) -> Callable[..., list[float]]:
    """A TRL-style reward that runs `check(tagged_answer, **{column: value})` for every completion in a worker pool
    (the default pool unless given): a check that hangs, crashes or raises scores 0.0 instead of ending the run.
    `check` must be importable (defined at the top level of a module) so that worker processes can load it."""
    return _PoolReward(check, columns, pool)
