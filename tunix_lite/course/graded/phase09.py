"""Graded tests for phase 9 (solutions/09_capstone_exercises.ipynb): diagnosing a GRPO run from
its metrics alone.

`diagnose(history)` reads a run's metrics.jsonl as a list of dicts, with the keys tunix_lite logs
(`step`, `reward`, `reward/<name>`, `kl`, `grad_norm`, `entropy`, `length`, `truncated`,
`zero_signal_groups`, the held-out `eval_test_accuracy`, ...), and names what went wrong with one
label. The notebook says what each failure does to a run, never a threshold or an order of rules:
the learner decides how to read the curves. So the runs drawn here are clear cases, each failure's
signature with margins that any sound reading resolves (a rise is a rise by 0.1 or more over
noise of 0.01; a flat curve moves by 0.02 at most), with a random length, log interval, step
numbering, curve shape and noise, distracting keys, and optional keys left out. A table of answers,
or rules tuned to one run, fails the next draw; the instructor's hidden tests draw other runs
(course/instructor/hidden/phase09.py).
"""

from __future__ import annotations

import math

import numpy as np

from tunix_lite.course.graded import graded

__all__ = [
    "test_diagnose_names_each_failure", "test_diagnose_names_the_cause_not_the_symptom",
    "test_diagnose_reads_the_run_not_its_logging", "test_diagnose_uses_only_what_was_logged",
    "test_diagnose_one_non_finite_value_is_a_blow_up", "test_diagnose_always_returns_a_label",
]

HINTS = {
    "diagnose": [
        "Compare the start of the run with its end: sort the entries by step, then average each "
        "key over an early and a late window of the entries that logged it (the held-out accuracy "
        "is logged every few steps only). A change counts when it is clearly larger than the "
        "step-to-step noise. Then ask, for each failure, which curves it moves; where one failure "
        "causes another's symptoms, name the cause.",
        "Causes first: a non-finite or exploding number (grad_norm, kl) makes everything else "
        "meaningless; cut completions (truncated) score 0, so their groups look all-equal too; a "
        "shaping reward/<name> that climbs while reward/exact_match does not is hacking. Then the "
        "signal: nearly every group all-equal, the whole run long, is no signal. Then the held-out "
        "accuracy: rose (healthy), fell while the training reward stayed flat (drift), did not "
        "rise while the training correctness did (not_generalizing).",
        "def change(key): v = [e[key] for e in entries if key in e]; k = max(1, len(v) // 3); "
        "return None if len(v) < 2 else sum(v[-k:]) / k - sum(v[:k]) / k; a rise: change >= "
        "0.05; a blow-up: late kl >= 1 or late grad_norm > 10 x early; truncated: late "
        "truncated >= 0.5; no signal: mean zero_signal_groups >= 0.9",
    ],
}

FORBIDDEN = {"diagnose": ("tunix_lite.rl", "tunix_lite.training")}  # the library's runs and loggers

LABELS = ("learning_rate_too_high", "truncated", "reward_hacking", "no_signal", "drift",
          "not_generalizing", "healthy", "inconclusive")
SHAPING = ("format", "reasoning_format", "overlong", "steps")
HELD_OUT = "eval_test_accuracy"
DISTRACTORS = ("ratio", "clipped", "count", "rollout_tokens_per_s", "kept_groups", "rollouts",
               "verifier/timeout", "rewards_seen", "learning_rate", "seconds")


# ------------------------------------------------------------------------ runs with a known ending


def _curve(rng, n, start, end, scale=0.01, lo=-math.inf, hi=math.inf):
    """n values from start to end along x ** p (p drawn in [0.7, 1.5]: straight, early or late),
    with Gaussian noise of `scale`, clipped to [lo, hi]."""
    x = np.arange(n) / max(n - 1, 1)
    line = start + (end - start) * x ** rng.uniform(0.7, 1.5)
    return np.clip(line + rng.normal(0.0, scale, n), lo, hi).tolist()


def _flat(rng, n, level, scale=0.005, lo=-math.inf, hi=math.inf):
    """A curve that moves by 0.01 at most, plus noise."""
    return _curve(rng, n, level, level + rng.uniform(-0.01, 0.01), scale, lo, hi)


def _blow_up(rng, n, calm, wild):
    """calm values for the first 50-65 % of the run, then wild ones (so any early window before
    the middle is calm, and any late window after two thirds mostly wild)."""
    start = int(n * rng.uniform(0.5, 0.65))
    levels = np.where(np.arange(n) < start, calm, wild)
    return np.abs(levels + rng.normal(0.0, calm * 0.2, n)).tolist()


def _ordinary(rng, n):
    """An unremarkable run: moderate signal, few cut completions, a small kl, steady gradients,
    entropy and length, flat correctness and a flat held-out accuracy."""
    entropy, length = rng.uniform(0.4, 1.2), rng.uniform(25, 90)
    return {"zero_signal_groups": _flat(rng, n, rng.uniform(0.15, 0.45), 0.03, 0.0, 1.0),
            "truncated": _flat(rng, n, rng.uniform(0.0, 0.05), 0.005, 0.0, 1.0),
            "kl": _curve(rng, n, 0.0, rng.uniform(0.005, 0.05), 0.002, 0.0),
            "grad_norm": _flat(rng, n, rng.uniform(0.5, 2.0), 0.05, 0.05),
            "entropy": _curve(rng, n, entropy, entropy * rng.uniform(0.8, 1.0), 0.01, 0.01),
            "length": _curve(rng, n, length, length * rng.uniform(0.9, 1.1), 1.0, 1.0),
            "loss": _flat(rng, n, 0.0, 0.01)}


def _columns(rng, label, n):
    """The logged columns of a run that ends as `label`, and the keys its signature needs (a test
    may drop any other key)."""
    columns = _ordinary(rng, n)
    exact = _flat(rng, n, rng.uniform(0.15, 0.6), 0.01, 0.0, 1.0)
    name = str(rng.choice(SHAPING))
    shaping = _flat(rng, n, rng.uniform(0.3, 0.8), 0.01)
    held_out = _flat(rng, n, rng.uniform(0.15, 0.6), 0.005, 0.0, 1.0)
    needs = ["reward", "reward/exact_match", HELD_OUT]
    if label == "healthy":
        start = rng.uniform(0.1, 0.4)
        exact = _curve(rng, n, start, start + rng.uniform(0.15, 0.35), 0.01, 0.0, 1.0)
        start = rng.uniform(0.1, 0.4)
        held_out = _curve(rng, n, start, start + rng.uniform(0.15, 0.3), 0.005, 0.0, 1.0)
    elif label == "not_generalizing":  # lucky guesses made likelier, or training prompts learnt
        start = rng.uniform(0.1, 0.4)
        exact = _curve(rng, n, start, start + rng.uniform(0.2, 0.4), 0.01, 0.0, 1.0)
        start = rng.uniform(0.2, 0.6)
        held_out = _curve(rng, n, start, start - rng.uniform(0.0, 0.15), 0.005, 0.0, 1.0)
        columns["entropy"] = _curve(rng, n, columns["entropy"][0],
                                    columns["entropy"][0] * rng.uniform(0.3, 0.5), 0.01, 0.01)
        columns["kl"] = _curve(rng, n, 0.0, rng.uniform(0.05, 0.3), 0.005, 0.0)
    elif label == "drift":  # most groups all-equal: full-size steps follow the few others
        start = rng.uniform(0.4, 0.7)
        held_out = _curve(rng, n, start, start - rng.uniform(0.15, 0.3), 0.005, 0.0, 1.0)
        columns["zero_signal_groups"] = _flat(rng, n, rng.uniform(0.6, 0.82), 0.03, 0.0, 1.0)
        needs.append("zero_signal_groups")
    elif label == "no_signal":
        level = float(rng.choice([0.0, 1.0]))  # every sample of a group wrong, or every one right
        exact, shaping = _curve(rng, n, level, level, 0.005, 0.0, 1.0), _flat(rng, n, level, 0.005)
        columns["zero_signal_groups"] = _curve(rng, n, 1.0, 1.0, 0.02, 0.95, 1.0)
        columns["grad_norm"] = _flat(rng, n, rng.uniform(0.01, 0.05), 0.002, 0.005)
        needs.append("zero_signal_groups")
    elif label == "truncated":  # the answer never fits: every reward 0, so every group all-equal
        exact, shaping = _curve(rng, n, 0.0, 0.0, 0.005, 0.0), _curve(rng, n, 0.0, 0.0, 0.005)
        held_out = _flat(rng, n, rng.uniform(0.0, 0.05), 0.005, 0.0, 1.0)
        budget = float(rng.choice([6, 8, 16, 24, 32, 48, 64]))
        columns["length"] = _curve(rng, n, budget, budget, 0.02 * budget, 1.0, budget)
        columns["truncated"] = _curve(rng, n, *rng.uniform(0.7, 1.0, 2), 0.03, 0.6, 1.0)
        columns["zero_signal_groups"] = _curve(rng, n, 1.0, 1.0, 0.03, 0.93, 1.0)
        columns["grad_norm"] = _flat(rng, n, rng.uniform(0.01, 0.05), 0.002, 0.005)
        needs.append("truncated")
    elif label == "reward_hacking":  # a shaping term climbs; correctness does not
        low = rng.uniform(-0.8, 0.0)
        shaping = _curve(rng, n, low, low + rng.uniform(0.7, 1.0), 0.01)
        exact = _curve(rng, n, exact[0], exact[0] - rng.uniform(0.0, 0.1), 0.01, 0.0, 1.0)
        columns["length"] = _curve(rng, n, columns["length"][0], rng.uniform(3, 15), 1.0, 1.0)
        columns["kl"] = _curve(rng, n, 0.0, rng.uniform(0.05, 0.3), 0.005, 0.0)
        needs += [f"reward/{name}"]
    elif label == "learning_rate_too_high":
        exact = exact[: n // 3] + _curve(rng, n - n // 3, exact[n // 3], 0.0, 0.01, 0.0, 1.0)
        held_out = held_out[: n // 3] + _curve(rng, n - n // 3, held_out[n // 3],
                                               rng.uniform(0.0, 0.05), 0.005, 0.0, 1.0)
        columns["grad_norm"] = _blow_up(rng, n, rng.uniform(0.5, 2.0), rng.uniform(50.0, 1e4))
        columns["kl"] = _blow_up(rng, n, rng.uniform(0.001, 0.05), rng.uniform(2.0, 50.0))
        wild = float(rng.choice([rng.uniform(3.0, 6.0), rng.uniform(0.02, 0.1)]))  # up or gone
        columns["entropy"] = _blow_up(rng, n, columns["entropy"][0], wild)
        needs.append(str(rng.choice(["grad_norm", "kl"])))
    elif label != "inconclusive":
        raise ValueError(f"unknown label {label!r}")
    weight = float(rng.choice([0.5, 1.0]))
    columns |= {"reward/exact_match": exact, f"reward/{name}": shaping, HELD_OUT: held_out,
                "reward": [e + weight * s for e, s in zip(exact, shaping)]}
    return columns, needs


def _entries(rng, columns, needs, every_eval=None):
    """One dict per step (keys shuffled), with distractors, gaps, random step numbers, and the
    held-out accuracy logged every few entries only (the first and the last entry included)."""
    n = len(columns["reward"])
    first, every = int(rng.integers(0, 5000)), int(rng.choice([1, 5, 10]))
    every_eval = every_eval or int(rng.integers(1, max(2, n // 3)))
    kept = [k for k in columns if k in needs or rng.random() >= 0.3]
    extras = [str(k) for k in rng.choice(DISTRACTORS, size=int(rng.integers(0, 5)), replace=False)]
    names = kept + extras + ["step"]
    values = np.array([columns[k] for k in kept] + [rng.uniform(-5, 5, n) for _ in extras]
                      + [first + every * np.arange(n)]).T.tolist()  # [n, keys]
    present = rng.random((n, len(names))) > 0.05  # gaps
    needed = [names.index(k) for k in needs if k in names] + [len(names) - 1]
    present[:, needed] = True  # ...but never in what the signature needs, nor in the step
    present[:, len(kept):-1] &= rng.random((n, len(extras))) < 0.7
    if HELD_OUT in kept:
        evaluated = np.arange(n) % every_eval == 0
        evaluated[-1] = True
        present[:, kept.index(HELD_OUT)] &= evaluated
    order = np.argsort(rng.random((n, len(names))), axis=1)
    history = [{names[j]: row[j] for j in keys if here[j]}
               for row, keys, here in zip(values, order.tolist(), present.tolist())]
    for entry in history:
        entry["step"] = int(entry["step"])
    return history


def _length(rng):
    return int(rng.integers(12, 80))


def _run(rng, label, n=None):
    return _entries(rng, *_columns(rng, label, n or _length(rng)))


def _says(impl, history, expected, why):
    got = impl.diagnose(history)
    assert got == expected, f"{why}: got {got!r}, expected {expected!r} ({len(history)} entries)"


# ----------------------------------------------------------------------------- the tests


@graded("diagnose", reference=True)
def test_diagnose_names_each_failure(impl, rng):
    """names each failure, a healthy run and an inconclusive one, from noisy runs of random
    length, curve shape, log interval and held-out schedule"""
    for label in LABELS:
        for _ in range(3):
            _says(impl, _run(rng, label), label, f"a run drawn as {label!r}")


@graded("diagnose")
def test_diagnose_names_the_cause_not_the_symptom(impl, rng):
    """cut completions make every group all-equal: truncated; a blow-up in a run without signal is
    still a blow-up; a hacked run's total reward rises, its correctness does not"""
    n = _length(rng)
    columns, needs = _columns(rng, "truncated", n)
    columns["zero_signal_groups"] = _curve(rng, n, 1.0, 1.0, 0.01, 0.98, 1.0)
    _says(impl, _entries(rng, columns, needs + ["zero_signal_groups"]), "truncated",
          "every group all-equal because every completion was cut")
    columns, needs = _columns(rng, "learning_rate_too_high", n)
    columns["zero_signal_groups"] = _curve(rng, n, 0.96, 1.0, 0.01, 0.95, 1.0)
    _says(impl, _entries(rng, columns, needs + ["zero_signal_groups"]), "learning_rate_too_high",
          "kl and grad_norm exploded while most groups were all-equal")
    columns, needs = _columns(rng, "reward_hacking", n)
    assert columns["reward"][-1] > columns["reward"][0], "a hacked run's total reward rises"
    _says(impl, _entries(rng, columns, needs), "reward_hacking",
          "the total reward rose through a shaping term while exact_match did not")


@graded("diagnose")
def test_diagnose_reads_the_run_not_its_logging(impl, rng):
    """the same run gets the same label with its entries shuffled, steps renumbered, keys in
    another order, every other entry dropped, and the held-out accuracy logged more or less often"""
    for label in LABELS:
        columns, needs = _columns(rng, label, 2 * _length(rng))
        history = _entries(rng, columns, needs, every_eval=int(rng.integers(1, 4)))
        offset, every = int(rng.integers(-1000, 10**6)), int(rng.integers(1, 50))
        moved = [dict(reversed(list(e.items()))) | {"step": offset + every * e["step"]}
                 for e in history]
        _says(impl, [moved[i] for i in rng.permutation(len(moved))], label,
              f"a {label!r} run, entries shuffled, steps renumbered, keys reversed")
        _says(impl, moved[::2], label, f"a {label!r} run, every other entry")
        sparse = _entries(rng, columns, needs, every_eval=max(1, len(columns["reward"]) // 4))
        _says(impl, sparse, label, f"a {label!r} run, held-out accuracy logged 5 times")


@graded("diagnose")
def test_diagnose_uses_only_what_was_logged(impl, rng):
    """only step and reward are always there: a run keeps its label when every key its signature
    does not need is left out; an empty or a flat reward-only history is inconclusive"""
    for label in LABELS:
        columns, needs = _columns(rng, label, _length(rng))
        bare = {k: v for k, v in columns.items() if k in needs}
        _says(impl, _entries(rng, bare, needs), label,
              f"a {label!r} run logging only {sorted(needs)} (and step)")
    _says(impl, [], "inconclusive", "an empty history")
    n = _length(rng)
    flat = [{"step": i, "reward": r} for i, r in enumerate(_flat(rng, n, rng.uniform(0, 1)))]
    _says(impl, flat, "inconclusive", "a flat reward and nothing else")


@graded("diagnose")
def test_diagnose_one_non_finite_value_is_a_blow_up(impl, rng):
    """one NaN or infinite loss, grad_norm or kl anywhere in an otherwise healthy or flat run: the
    run diverged"""
    for key in ("loss", "grad_norm", "kl"):
        label = str(rng.choice(["healthy", "inconclusive", "no_signal"]))
        columns, needs = _columns(rng, label, _length(rng))
        history = _entries(rng, columns, needs + [key])
        history[int(rng.integers(len(history)))][key] = float(
            rng.choice([math.nan, math.inf, -math.inf]))
        _says(impl, history, "learning_rate_too_high",
              f"one {key} is not finite in a {label!r} run")


@graded("diagnose")
def test_diagnose_always_returns_a_label(impl, rng):
    """never raises on odd histories (random keys, gaps, non-finite values, one entry); returns
    one of the labels"""
    keys = ("loss", "kl", "grad_norm", "zero_signal_groups", "truncated", "length", "entropy",
            HELD_OUT, "reward/exact_match", "reward/format") + DISTRACTORS
    for _ in range(25):
        n = int(rng.integers(1, 12))
        size = int(rng.integers(0, len(keys)))
        chosen = [str(k) for k in rng.choice(keys, size=size, replace=False)]
        history = []
        for i in rng.permutation(n):
            values = [rng.uniform(-1, 2), rng.uniform(0, 1e4), math.nan, math.inf]
            entry = {k: float(rng.choice(values)) for k in chosen if rng.random() < 0.6}
            history.append(entry | {"step": int(i), "reward": float(rng.uniform(-1, 2))})
        got = impl.diagnose(history)
        assert got in LABELS, f"{history[:2]}...: got {got!r}, expected one of {LABELS}"
