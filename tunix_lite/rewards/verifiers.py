"""Verifiers: answer checkers that run untrusted work in worker processes, with a timeout per call.

A reward that evaluates a model's expression or runs its code can hang (`while True: pass`,
`9 ** 9 ** 9`), blow up memory or crash the interpreter. Run in the training process, one such
completion ends a run hours in. Here every check runs in a pool of worker processes: a check that
raises, crashes its worker or runs past `timeout` scores 0.0, the worker is replaced, and training
goes on.

    pool = VerifierPool(workers=2, timeout=2.0)
    pool.map(check_math, [("16", "16"), ("9 ** 9 ** 9", "1")])
        # [1.0, 0.0]: the second one timed out
    pool.stats  # {"calls": 2, "timeouts": 1, ...}

The rewards below follow TRL's reward-callable convention, `reward(prompts, completions, **columns)
-> list[float]`, so the GRPO trainer (and TRL's) can use them as they are; they share one pool per
process (`default_pool`):

- `reward_math(prompts, completions, answer)`: the tagged answer equals the reference as a number, a
  list of numbers, or else as text (see `check_math`);
- `reward_code(prompts, completions, tests)`: the fraction of `tests` (Python assert lines) the
  completion's code passes (see `check_code`);
- `verifier_reward(check)`: any check function of your own, `check(answer, **row) -> float`, run the
  same way.

Trusted checks (ours, or yours: a function of a module applied to the answer *string*) run in warm
worker processes started with "spawn" (never fork: a forked JAX process can deadlock), so a check
function must be importable: defined at the top level of a module (a notebook cell's function is
not). Its arguments and its result travel as JSON (strings, numbers, lists, dicts), never pickle, so
a worker cannot send code back into the trainer. A worker imports only this module, not JAX.

Model-written *code* never runs there. `check_code` (and any check marked `@untrusted_check`) is
called in the trainer's threads and runs the program through `tunix_lite.sandbox`: a fresh, confined
interpreter per call that returns plain values, compared here with expected values it never sees
(the threat model, and what holds on which OS, are in that module's docstring).
"""

from __future__ import annotations

import atexit
import importlib
import json
import math
import multiprocessing
import os
import re
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import wait

from tunix_lite.rewards import asserts, sandbox
from tunix_lite.rewards.math_answers import check_math, evaluate_expression
from tunix_lite.rewards.sandbox import harden_current_process, run_untrusted

TIMEOUT = 2.0  # seconds per call
# address-space limit per worker (Linux), so `"x" * 10**12` fails in the worker, not the machine
MEMORY_MB = 1024
MAX_MESSAGE = 2**20  # bytes: a worker's answer is a float; anything longer is not one


def untrusted_check(check: Callable[..., float]) -> Callable[..., float]:
    """Mark a check that runs model-written code itself, through `tunix_lite.sandbox.run_untrusted`:
    the pool then calls it in the trainer's threads as `check(*args, timeout=pool.timeout)`, never
    in a warm worker."""
    check.untrusted = True
    return check


def _resolve(name: str) -> Callable[..., float]:
    """"module:qualname" -> the function (imported here, in the worker, from a name: no pickle)."""
    module, _, qualname = name.partition(":")
    target = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _name(fn: Callable) -> str:
    """The name a worker imports `fn` by: JSON carries names, never code."""
    name = f"{getattr(fn, '__module__', None)}:{getattr(fn, '__qualname__', '<none>')}"
    if "<" in name or name.startswith("None:"):  # a lambda, a local function, a partial
        raise TypeError(f"a check must be a function defined at the top level of a module, "
                        f"got {fn!r}")
    return name


def _dumps(message) -> bytes:
    """JSON, with numpy scalars and arrays (a dataset column's values) as their Python values."""
    def plain(value):
        if hasattr(value, "tolist"):
            return value.tolist()
        raise TypeError(f"a verifier's arguments must be JSON data (str, numbers, lists, dicts), "
                        f"got {type(value).__name__}")

    return json.dumps(message, default=plain).encode()


def _worker(conn, memory_mb: int | None) -> None:
    """A worker's loop: receive [function name, args, kwargs] as JSON, send back ["ok", float] or
    ["error", text]; an empty message stops it."""
    harden_current_process()
    if hasattr(os, "setsid"):
        os.setsid()  # its own process group: a scorer gone wrong cannot killpg the trainer
    if memory_mb:
        try:
            import resource

            limit = memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass  # not Linux, or a lower hard limit: run without it
    conn.send_bytes(_dumps(["ready", 0.0]))
    while True:
        try:
            task = conn.recv_bytes()
        except EOFError:
            return
        if not task:
            return
        try:
            name, args, kwargs = json.loads(task)
            fn = _resolve(name)  # imports fn's module, outside the call's timeout
        except BaseException as e:  # noqa: BLE001 - a name that does not resolve: an error
            conn.send_bytes(_dumps(["error", f"{type(e).__name__}: {e}"[:200]]))
            continue
        conn.send_bytes(_dumps(["started", 0.0]))
        try:
            conn.send_bytes(_dumps(["ok", float(fn(*args, **kwargs))]))
        except BaseException as e:  # noqa: BLE001 - whatever the check does, the worker answers
            conn.send_bytes(_dumps(["error", f"{type(e).__name__}: {e}"[:200]]))


class _Worker:
    # seconds a new worker may take to start (a busy machine), not counted in any call's timeout
    STARTUP = 120.0

    def __init__(self, context, memory_mb):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child, memory_mb), daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(self.STARTUP) or self.receive()[0] != "ready":
            self.stop(kill=True)
            raise RuntimeError(f"a verifier worker process did not start within {self.STARTUP:g} s")

    def receive(self) -> list:
        """The worker's next answer, parsed as JSON only; anything else raises, as a crash would."""
        message = json.loads(self.conn.recv_bytes(MAX_MESSAGE))
        if not (isinstance(message, list) and len(message) == 2 and isinstance(message[0], str)):
            raise ValueError(f"not an answer: {str(message)[:100]}")
        return message

    def stop(self, kill: bool = False) -> None:
        if not kill:
            try:
                self.conn.send_bytes(b"")
            except (OSError, ValueError):
                kill = True
        if kill:
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class VerifierPool:
    """`workers` processes that run check functions, each call limited to `timeout` seconds.

    `map(fn, args)` returns one float per argument tuple, in order: fn's value, or `failed` (0.0: a
    zero reward) when it raised, returned something that is not a finite number, crashed its worker
    or timed out (the worker is killed and replaced). A check marked `@untrusted_check` (such as
    `check_code`) runs in up to `workers` threads of this process instead, each call in its own
    sandbox, given `timeout=`. `stats` counts calls, timeouts, crashes and errors since the pool
    started; `last_errors` keeps a few messages. Workers start on first use; `close()` (or leaving a
    `with` block) stops them.
    """

    def __init__(self, workers: int | None = None, timeout: float = TIMEOUT, *,
                 memory_mb: int | None = MEMORY_MB):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.size = workers or min(4, os.cpu_count() or 1)
        if self.size < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.timeout, self.memory_mb = timeout, memory_mb
        harden_current_process()  # the trainer holds tokens: keep other processes out of its memory
        self._context = multiprocessing.get_context("spawn")
        self._idle: list[_Worker] = []
        self.stats = {"calls": 0, "timeouts": 0, "crashes": 0, "errors": 0}
        self.last_errors: list[str] = []
        _POOLS.add(self)

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _failed(self, kind: str, message: str) -> float:
        self.stats[kind] += 1
        self.last_errors = (self.last_errors + [message])[-5:]
        return self._failed_value

    def map(self, fn: Callable[..., float], args: Sequence[tuple], *,
            failed: float = 0.0) -> list[float]:
        return self.call(fn, [(tuple(a), {}) for a in args], failed=failed)

    def call(self, fn: Callable[..., float], calls: Sequence[tuple[tuple, dict]], *,
             failed: float = 0.0) -> list[float]:
        """`map` with keyword arguments: one `(args, kwargs)` pair per call."""
        self._failed_value = failed
        self.stats["calls"] += len(calls)
        if getattr(fn, "untrusted", False):
            return self._in_sandboxes(fn, calls)
        messages = [_dumps([_name(fn), list(a), kw]) for a, kw in calls]  # not JSON: fail up front
        results: list[float] = [failed] * len(calls)
        pending = list(enumerate(messages))[::-1]  # popped from the end: first in, first out
        busy: dict = {}  # connection -> (worker, index, ends)
        while pending or busy:
            while pending and len(busy) < self.size:
                worker = self._idle.pop() if self._idle else _Worker(self._context, self.memory_mb)
                index, message = pending.pop()
                try:
                    worker.conn.send_bytes(message)
                except (OSError, ValueError):  # the worker died while idle: start another and retry
                    worker.stop(kill=True)
                    pending.append((index, message))
                    continue
                # the clock: _Worker.STARTUP until the worker has loaded the call (imports),
                # then `timeout`
                busy[worker.conn] = (worker, index, time.monotonic() + _Worker.STARTUP)
            soonest = min(ends for _, _, ends in busy.values())
            for conn in wait(list(busy), timeout=max(0.0, soonest - time.monotonic())):
                worker, index, ends = busy.pop(conn)
                try:
                    status, value = worker.receive()
                except (EOFError, OSError, ValueError):
                    worker.stop(kill=True)
                    exit_code = worker.process.exitcode
                    results[index] = self._failed("crashes", f"call {index}: the worker died or "
                                                  f"garbled its answer (exit code {exit_code})")
                    continue
                if status == "started":
                    busy[conn] = (worker, index, time.monotonic() + self.timeout)
                    continue
                self._idle.append(worker)
                results[index] = self._result(index, status, value)
            now = time.monotonic()
            for conn, (worker, index, ends) in list(busy.items()):
                if now >= ends:
                    del busy[conn]
                    worker.stop(kill=True)
                    results[index] = self._failed("timeouts",
                                                  f"call {index}: no answer in {self.timeout:g} s")
        return results

    def _result(self, index: int, status: str, value) -> float:
        if status == "ok" and type(value) in (int, float) and math.isfinite(value):
            return float(value)
        problem = value if status != "ok" else "not a finite number"
        return self._failed("errors", f"call {index}: {problem}")

    def _in_sandboxes(self, fn: Callable[..., float],
                      calls: Sequence[tuple[tuple, dict]]) -> list[float]:
        """Each call of an untrusted check in a thread here; the check runs its own sandbox."""
        def one(index: int) -> tuple[str, object]:
            args, kwargs = calls[index]
            try:
                return "ok", float(fn(*args, **kwargs, timeout=self.timeout))
            except TimeoutError:
                return "timeouts", f"no answer in {self.timeout:g} s"
            except Exception as e:  # noqa: BLE001 - a failed check scores `failed`, the run goes on
                return "errors", f"{type(e).__name__}: {e}"[:200]

        with ThreadPoolExecutor(max_workers=self.size) as threads:
            answers = list(threads.map(one, range(len(calls))))
        return [self._result(i, *answer) if answer[0] == "ok"  # counted here, in one thread
                else self._failed(answer[0], f"call {i}: {answer[1]}")
                for i, answer in enumerate(answers)]

    def close(self) -> None:
        for worker in self._idle:
            worker.stop()
        self._idle = []


_DEFAULT: VerifierPool | None = None
_POOLS: weakref.WeakSet = weakref.WeakSet()


def verifier_events() -> dict[str, int]:
    """This process's verifier calls so far, cumulative, and what went wrong: the pools' timeouts,
    crashes and errors (each such call scored 0.0), and what the sandbox saw model-written code do
    (`tunix_lite.sandbox.EVENTS`: silent ends, program errors, non-plain values, answers past the
    limits, disk quotas). An RL run logs the change per rollout, so a policy that learns to attack
    its verifier shows up in the logs."""
    counts = {key: sum(pool.stats[key] for pool in list(_POOLS))
              for key in ("calls", "timeouts", "crashes", "errors")}
    with sandbox.EVENTS_LOCK:
        for key in ("silent", "program_errors", "non_plain_values", "over_limits", "disk_quota"):
            counts[key] = sandbox.EVENTS[key]
    return counts


def default_pool() -> VerifierPool:
    """The process's shared pool for the reward functions below (started on first use, closed
    at exit)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = VerifierPool()
        atexit.register(_DEFAULT.close)
    return _DEFAULT


# ----------------------------------------------------------------------------- checks

_EQUATION = re.compile(r"(\d[\d\s+\-*/().]*?)\s*=\s*(\d+)")


def check_steps(completion: str) -> float:
    """A reference-free check of worked arithmetic: 1.0 when every `expression = number` written
    in the completion holds and the tagged answer is the last result, 0.5 when there are no
    equations to check but there is an answer, 0.0 otherwise. Best-of-N can rank samples by it
    without knowing the answer."""
    from tunix_lite.rewards.tags import answer_of  # a light module: no JAX

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


@untrusted_check
def check_code(program: str | None, tests: str | Sequence[str], *,
               timeout: float = TIMEOUT) -> float:
    """The fraction of `tests` (Python statements, usually asserts; a string holds one per line)
    that pass after running `program` in a fresh sandboxed interpreter (`tunix_lite.sandbox`):
    only the program's calls run there, the asserts are judged here (`rewards.asserts`). The
    program sees the standard library only (no site-packages). A program that raises scores 0.0;
    one whose run, or the judging of its answers, goes past `timeout` seconds raises TimeoutError
    (the pool counts it as a timeout), one whose answers go past `sandbox.Limits` raises
    OverLimits (an error): either scores 0.0."""
    lines = [t for t in (tests.splitlines() if isinstance(tests, str) else tests) if t.strip()]
    if not program or not lines:
        return 0.0
    block = _CODE_BLOCK.search(program)
    plans = [asserts.plan(test) for test in lines]
    probes = [probe for plan in plans for probe in plan.probes]
    outcome = run_untrusted(block.group(1) if block else program, probes, timeout=timeout)
    if outcome.program != "ok":
        return 0.0
    if outcome.over_limits:  # an answer made to stall this process: the call fails (an error)
        raise sandbox.OverLimits(next(e for e in outcome.errors.values()
                                      if e.startswith("OverLimits: ")))
    answers = [outcome.values.get(i, asserts.FAILED) for i in range(len(probes))]
    passed = first = 0
    for plan in plans:
        mine, first = answers[first:first + len(plan.probes)], first + len(plan.probes)
        passed += asserts.passes(plan, mine, deadline=outcome.deadline)
    return passed / len(lines)


# ----------------------------------------------------------------------- rewards (TRL's convention)


def _answers(completions: Sequence[str]) -> list[str | None]:
    from tunix_lite.rewards.tags import answer_of

    return [answer_of(c) for c in completions]


def reward_math(prompts, completions: Sequence[str], answer: Sequence[str],
                **columns) -> list[float]:
    """1.0 per completion whose tagged answer `check_math` accepts against the `answer` column (with
    math-verify for LaTeX answers where it is installed: the [tasks] extra), run in the default pool
    (a hanging or crashing check scores 0.0)."""
    return default_pool().map(_math_check(), list(zip(_answers(completions), answer, strict=True)))


def _math_check() -> Callable[..., float]:
    """check_math, or with math-verify (tunix_lite.math_latex) where math-verify is installed."""
    try:
        from tunix_lite.rewards.math_latex import check_math_latex
    except ImportError:
        return check_math
    return check_math_latex


def reward_code(prompts, completions: Sequence[str], tests: Sequence, **columns) -> list[float]:
    """The fraction of the `tests` column's asserts each completion's code passes (the code is the
    tagged answer or a ```python block, else the whole completion), run in the default pool."""
    programs = [a if a is not None else c
                for a, c in zip(_answers(completions), completions, strict=True)]
    return default_pool().map(check_code, list(zip(programs, tests, strict=True)))


def reward_steps(prompts, completions: Sequence[str], **columns) -> list[float]:
    """`check_steps` per completion (reference-free), run in the default pool."""
    return default_pool().map(check_steps, [(c,) for c in completions])


class _PoolReward:
    """A check function as a TRL reward: check(answer, **row) for each completion, in a pool."""

    def __init__(self, check: Callable[..., float], columns: Sequence[str],
                 pool: VerifierPool | None):
        self.check, self.columns, self.pool = check, tuple(columns), pool
        self.__name__ = getattr(check, "__name__", "verifier")

    def __call__(self, prompts, completions: Sequence[str], **columns) -> list[float]:
        missing = [c for c in self.columns if c not in columns]
        if missing:
            raise KeyError(f"verifier {self.__name__} needs the dataset columns {missing}; "
                           f"it got {sorted(columns)}")
        rows = zip(_answers(completions), *(columns[c] for c in self.columns), strict=True)
        calls = [((answer,), dict(zip(self.columns, values))) for answer, *values in rows]
        return (self.pool or default_pool()).call(self.check, calls)


def verifier_reward(check: Callable[..., float], columns: Sequence[str] = ("answer",), *,
                    pool: VerifierPool | None = None) -> Callable[..., list[float]]:
    """A TRL-style reward that runs `check(tagged_answer, **{column: value})` for every completion
    in a worker pool (the default pool unless given): a check that hangs, crashes or raises scores
    0.0 instead of ending the run. `check` must be importable (defined at the top level of a module)
    so that worker processes can load it, and gets the answer as a string: a check that runs it as
    code must do so through `tunix_lite.sandbox` and be marked `@untrusted_check` (as `check_code`
    is), never exec it."""
    return _PoolReward(check, columns, pool)
