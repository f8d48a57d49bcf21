"""Verifiers: a check that hangs, crashes, raises or eats memory costs a zero reward and a fresh
worker, never the run; the checks themselves (math, code, worked steps) against hand-written cases.
Attacks on the pool are in test_sandbox_security.py.

No JAX here: the workers import only tunix_lite.verifiers and this module.
"""

import os
import time

import pytest

from tunix_lite.rewards.math_answers import check_math, evaluate_expression
from tunix_lite.rewards.asserts import plan
from tunix_lite.verifiers import (VerifierPool, check_code, check_steps, reward_code, reward_math,
                                  reward_steps, verifier_reward)


# Check functions the workers import by name (they must live at the top level of a module).
def echo(x):
    return x


def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


def hang():
    while True:
        pass


def die():
    os._exit(3)  # the worker process ends without answering


def boom():
    raise RuntimeError("bad check")


def allocate():
    return len(bytearray(8 * 2**30))  # 8 GiB: refused by the worker's memory limit


def not_a_number():
    return "yes"


def answer_is_even(answer, modulus):
    return float(int(answer) % modulus == 0)


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(workers=2, timeout=1.0) as p:
        yield p


def test_hangs_crashes_errors_and_memory_bombs_score_zero_and_the_pool_goes_on(pool):
    start = time.monotonic()
    calls = [(echo, (0.25,)), (hang, ()), (die, ()), (boom, ()), (allocate, ()), (not_a_number, ()),
             (echo, (1.0,))]
    results = [pool.map(fn, [args])[0] for fn, args in calls]
    assert results == [0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert time.monotonic() - start < 30
    assert pool.stats["timeouts"] == 1 and pool.stats["crashes"] == 1 and pool.stats["errors"] == 3
    assert any("RuntimeError: bad check" in e for e in pool.last_errors)
    # in order, workers replaced
    assert pool.map(echo, [(i,) for i in range(5)]) == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_hanging_call_does_not_hold_up_the_others(pool):
    """Two workers: the hanging call takes one for `timeout` seconds while the other answers the
    rest."""
    start = time.monotonic()
    out = pool.map(sleep_then, [(100, 9.0)] + [(0.01, float(i)) for i in range(6)])
    assert out == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert time.monotonic() - start < 5  # one timeout, not one per call


def test_bad_pool_settings_are_refused():
    with pytest.raises(ValueError, match="timeout must be > 0"):
        VerifierPool(timeout=0)


@pytest.mark.parametrize("predicted, reference, expected", [
    ("16", "16", 1.0), (" 32/2 ", "16", 1.0), ("16.0", "16", 1.0), ("2**4", "16", 1.0), ("15", "16", 0.0),
    ("3, 5, 7", "3, 5, 7", 1.0), ("3,5,7", "3, 5, 7", 1.0), ("3, 7, 5", "3, 5, 7", 0.0), ("3, 5", "3, 5, 7", 0.0),
    ("Velo", "Velo", 1.0), ("velo", "Velo", 0.0), ("moo  moo", "moo moo", 1.0), (None, "16", 0.0),
    ("__import__('os')", "16", 0.0), ("1/0", "16", 0.0),
])
def test_check_math(predicted, reference, expected):
    assert check_math(predicted, reference) == expected


def test_expressions_never_evaluate_names_or_calls():
    assert evaluate_expression("(2 + 3) * 4 - 6 / 3") == 18.0
    for text in ("x + 1", "abs(-1)", "().__class__", "'a' * 3"):
        with pytest.raises(ValueError):
            evaluate_expression(text)


def test_check_steps_is_a_reference_free_arithmetic_check():
    assert check_steps("5 + 3 = 8. 8 * 2 = 16. <answer>16</answer>") == 1.0
    assert check_steps("<reasoning>5 + 3 = 8. 8 * 2 = 16.</reasoning><answer>16</answer>") == 1.0
    assert check_steps("5 + 3 = 9. 9 * 2 = 18. <answer>18</answer>") == 0.0  # a false step
    # the answer is not the last result
    assert check_steps("5 + 3 = 8. 8 * 2 = 16. <answer>17</answer>") == 0.0
    assert check_steps("Sort: 1, 2. <answer>1, 2</answer>") == 0.5  # nothing to check
    assert check_steps("5 + 3 = 8.") == 0.0  # no answer


def test_check_code_counts_passing_tests():
    program = "```python\ndef add(a, b):\n    return a + b\n```"
    assert check_code(program, "assert add(1, 2) == 3\nassert add(2, 2) == 5") == 0.5
    assert check_code("def add(a, b): return a + b", ["assert add(1, 2) == 3"]) == 1.0
    assert check_code("raise SystemExit", "assert True") == 0.0
    assert check_code(None, "assert True") == 0.0


def test_rewards_follow_trls_convention_and_survive_bad_completions():
    completions = ["<answer>16</answer>", "<answer>9 ** 9 ** 9</answer>", "no answer", "<answer>32/2</answer>"]
    start = time.monotonic()
    assert reward_math(None, completions, answer=["16"] * 4, domain=["x"] * 4) == [1.0, 0.0, 0.0, 1.0]
    assert time.monotonic() - start < 30  # the huge power timed out instead of running for hours
    code = ["<answer>def f(): return 1</answer>", "```python\ndef f():\n    while True: pass\n```"]
    assert reward_code(None, code, tests=["assert f() == 1"] * 2) == [1.0, 0.0]
    steps = ["2 + 2 = 4. <answer>4</answer>", "2 + 2 = 5. <answer>5</answer>"]
    assert reward_steps(None, steps) == [1.0, 0.0]


def test_a_users_check_runs_in_the_pool_with_its_columns(pool):
    reward = verifier_reward(answer_is_even, columns=("modulus",), pool=pool)
    assert reward.__name__ == "answer_is_even"
    completions = ["<answer>4</answer>", "<answer>5</answer>", "<answer>oops</answer>"]
    # int('oops') raised
    assert reward(None, completions, modulus=[2, 2, 2], answer=["x"] * 3) == [1.0, 0.0, 0.0]
    with pytest.raises(KeyError, match=r"needs the dataset columns \['modulus'\]"):
        reward(None, completions, answer=["x"] * 3)


def test_arguments_cross_to_the_workers_as_json_only(pool):
    with pytest.raises(TypeError, match="must be JSON data"):
        pool.map(echo, [(object(),)])
    with pytest.raises(TypeError, match="top level of a module"):
        pool.map(lambda x: x, [(1,)])


def test_only_the_programs_part_of_a_test_is_sent_to_the_sandbox():
    """The expected values, and every builtin the verdict needs, stay in this process."""
    assert plan("assert f(2) == 4").probes == (("eval", "f(2)"),)
    assert plan("assert [1, 2] == sorted_copy(x)").probes == (("eval", "sorted_copy(x)"),)
    assert plan("assert is_prime(7)").probes == (("eval", "is_prime(7)"),)
    assert plan("assert set(f(x)) == set((4, 5))").probes == (("iter", "f(x)"),)
    assert plan("assert math.isclose(area(2), 12.56, rel_tol=0.01)").probes == (("eval", "area(2)"),)
    assert plan("assert abs(f(1) - 2.5) < 1e-6 and g(y)").probes == (("eval", "f(1)"), ("eval", "g(y)"))
    assert plan("assert Solution().two([2, 7], 9) == [0, 1]").probes == (
        ("eval", "Solution().two([2, 7], 9)"),)
    assert plan("assert list(map(f, [1, 2])) == [2, 4]").probes == (("iter", "map(f, [1, 2])"),)
    assert plan("x = f(2)").probes == (("exec", "x = f(2)"),)
    assert plan("assert (").kind == "invalid"
    comprehension = plan("assert all(f(i) == 2 * i for i in range(3))")
    assert comprehension.in_child and comprehension.probes[0][0] == "eval"


def test_tests_judged_here_keep_pythons_meaning():
    program = ("import math\ndef f(x):\n    return x * 2\ndef g(n):\n    yield from range(n)\n"
               "def words():\n    return ['b', 'a']\nclass Solution:\n    def two(self, xs, t):\n"
               "        return [0, 1]\nresult = [3, 1, 2]")
    tests = ["assert f(2) == 4", "assert abs(f(1.25) - 2.5) < 1e-6", "assert math.isclose(f(0.5), 1.0)",
             "assert set(g(3)) == {0, 1, 2}", "assert sorted(g(3), reverse=True) == [2, 1, 0]",
             "assert ', '.join(sorted(words())) == 'a, b'", "assert f('ab').upper() == 'ABAB'",
             "assert Solution().two([2, 7], 9) == [0, 1]", "assert list(map(f, [1, 2])) == [2, 4]",
             "assert sorted(result) == [1, 2, 3] and len(result) == 3", "assert f(1) == 3 or f(2) == 4",
             "assert not f(0)", "assert f(2) in (1, 4) and isinstance(f(2), int)", "assert f(3) < 7 <= f(4)",
             "assert {f(1): 1}[2] == 1", "assert list(g(5))[1:3] == [1, 2]", "y = f(3)", "assert y == 6",
             "assert sum(g(4)) == 6 and max(g(4)) == 3 and min(g(4), default=9) == 0",
             "assert all(x >= 0 for x in g(3))"]
    assert check_code(program, tests) == 1.0
    wrong = ["assert f(2) == 5", "assert set(g(3)) == {0, 1}", "assert f(1) == 3 or f(2) == 5",
             "assert undefined(1) == 1 or f(2) == 4 and False"]
    assert check_code(program, wrong) == 0.0


def test_a_hanging_program_is_a_timeout_of_its_own_sandbox(pool):
    timeouts = pool.stats["timeouts"]
    start = time.monotonic()
    programs = [("while True: pass", "assert True"), ("def f(): return 1", "assert f() == 1")]
    assert pool.map(check_code, programs) == [0.0, 1.0]
    assert pool.stats["timeouts"] == timeouts + 1 and time.monotonic() - start < 10


def test_judging_the_programs_values_here_is_bounded():
    """What a test does to the program's values cannot build without bound in this process: the
    call fails (the pool counts an error) instead of holding the trainer."""
    from tunix_lite.rewards.sandbox import OverLimits

    for test in ("assert 'x' * f() == 'x'", "assert 2 ** f() > 0", "assert 1 << f() > 0",
                 "assert len(list(range(f()))) == 1", "assert sorted(range(f()))[0] == 0"):
        with pytest.raises(OverLimits):
            check_code("def f():\n    return 10 ** 12", test, timeout=2.0)
    assert check_code("def f():\n    return 3", "assert 'x' * f() == 'xxx'\nassert 2 ** f() == 8") == 1.0
