"""Graded tests for phase 9 (solutions/09_capstone_exercises.ipynb): diagnosing a GRPO run.

`diagnose(history)` reads a run's metrics.jsonl as a list of dicts, with the keys tunix_lite logs
(`step`, `reward`, `reward/<name>`, `kl`, `grad_norm`, `zero_signal_groups`, `truncated`, ...), and
names what went wrong with one label. The histories are drawn from `rng` afresh per grading run:
each failure's signature with noise, a random length, step numbering and log interval, distracting
keys, and optional keys left out, so the tests grade the notebook's rules, not a table of answers.
"""

from __future__ import annotations

import math

from tunix_lite.course.graded import graded

__all__ = [
    "test_diagnose_names_each_signature", "test_diagnose_checks_the_rules_in_order",
    "test_diagnose_sees_each_blow_up_alone", "test_diagnose_reads_the_first_and_last_thirds",
    "test_diagnose_skips_missing_keys", "test_diagnose_ignores_order_and_numbering",
    "test_diagnose_always_returns_a_label",
]

HINTS = {
    "diagnose": [
        "Sort the entries by step, cut out the first and the last n // 3 of them (at least one "
        "each), and average each key over the entries of a window that have it. Then go down the "
        "rules in the order stated and return the first label whose rule holds; a rule whose key "
        "no entry of its window has does not hold.",
        "Write a helper mean(entries, key) that returns None when no entry has the key. Blow-up: "
        "any non-finite loss/grad_norm/kl in the whole run, late grad_norm > 10 x early, or late "
        "kl >= 1. Truncated: late truncated >= 0.5. Hacking: exact_match rose < 0.05 while another "
        "reward/<name> rose >= 0.2. No signal: zero_signal_groups >= 0.9 over the whole run. "
        "Healthy: reward rose >= 0.05.",
        "entries = sorted(history, key=lambda e: e['step']); k = max(1, len(entries) // 3); "
        "early, late = entries[:k], entries[-k:]; def rise(key): a, b = mean(early, key), "
        "mean(late, key); return None if a is None or b is None else b - a; shaping = [k for e in "
        "entries for k in e if k.startswith('reward/') and k != 'reward/exact_match']",
    ],
}

FORBIDDEN = {"diagnose": ("tunix_lite.rl", "tunix_lite.training")}  # the library's runs and loggers

LABELS = ("learning_rate_too_high", "truncated", "reward_hacking", "no_signal", "healthy",
          "inconclusive")
SHAPING = ("format", "reasoning_format", "overlong", "steps")
DISTRACTORS = ("ratio", "clipped", "count", "entropy", "rollout_tokens_per_s", "kept_groups",
               "rollouts", "verifier/timeout", "eval_test_accuracy", "eval_reward/exact_match",
               "rewards_seen")


# ----------------------------------------------------------------------------- the reference


def _mean(entries, key):
    values = [e[key] for e in entries if key in e]
    return sum(values) / len(values) if values else None


def _rise(early, late, key):
    before, after = _mean(early, key), _mean(late, key)
    return None if before is None or after is None else after - before


def _at_least(value, threshold):
    return value is not None and value >= threshold


def _ref_diagnose(history):
    entries = sorted(history, key=lambda e: e["step"])
    k = max(1, len(entries) // 3)
    early, late = entries[:k], entries[-k:]
    watched = ("loss", "grad_norm", "kl")
    if any(not math.isfinite(e[key]) for e in entries for key in watched if key in e):
        return "learning_rate_too_high"
    norms = _mean(early, "grad_norm"), _mean(late, "grad_norm")
    if None not in norms and norms[1] > 10 * norms[0] or _at_least(_mean(late, "kl"), 1.0):
        return "learning_rate_too_high"
    if _at_least(_mean(late, "truncated"), 0.5):
        return "truncated"
    shaping = {key for e in entries for key in e
               if key.startswith("reward/") and key != "reward/exact_match"}
    correct = _rise(early, late, "reward/exact_match")
    climbed = any(_at_least(_rise(early, late, s), 0.2) for s in shaping)
    if correct is not None and correct < 0.05 and climbed:
        return "reward_hacking"
    if _at_least(_mean(entries, "zero_signal_groups"), 0.9):
        return "no_signal"
    if _at_least(_rise(early, late, "reward"), 0.05):
        return "healthy"
    return "inconclusive"


# ------------------------------------------------------------------------ runs with a known ending


def _noisy(rng, value, scale):
    return float(value + rng.normal(0.0, scale))


def _curve(rng, n, start, end, scale=0.01, lo=-math.inf, hi=math.inf):
    """n values going linearly from start to end, with Gaussian noise, clipped to [lo, hi]."""
    line = [start + (end - start) * i / (n - 1) for i in range(n)]
    return [min(hi, max(lo, _noisy(rng, value, scale))) for value in line]


def _blow_up(rng, n, calm, wild):
    """calm values for the first 40-60 % of the run, then wild ones."""
    start = int(n * rng.uniform(0.4, 0.6))  # the first third calm, the last third wild
    return [abs(_noisy(rng, calm if i < start else wild, calm * 0.2)) for i in range(n)]


def _ordinary(rng, n):
    """An unremarkable run: moderate signal, few cut completions, small kl, steady gradients."""
    return {"zero_signal_groups": _curve(rng, n, *rng.uniform(0.2, 0.6, 2), 0.05, 0.0, 1.0),
            "truncated": _curve(rng, n, *rng.uniform(0.0, 0.1, 2), 0.01, 0.0, 1.0),
            "kl": _curve(rng, n, 0.0, rng.uniform(0.005, 0.1), 0.002, 0.0),
            "grad_norm": _curve(rng, n, *rng.uniform(0.5, 2.0, 2), 0.1, 0.05),
            "length": _curve(rng, n, *rng.uniform(20, 120, 2), 2.0, 1.0),
            "loss": _curve(rng, n, 0.0, 0.0, 0.01)}


def _columns(rng, label, n):
    """The logged columns of a run diagnosed as `label`, and the columns the diagnosis needs."""
    columns = _ordinary(rng, n)
    top = rng.uniform(0.2, 0.5)
    exact = _curve(rng, n, top, top - rng.uniform(0.0, 0.1), 0.01, 0.0, 1.0)  # flat or falling
    name = str(rng.choice(SHAPING))
    shaping = _curve(rng, n, *[rng.uniform(0.3, 0.5)] * 2, 0.01)
    needs = ["reward"]
    if label == "healthy":
        exact = _curve(rng, n, rng.uniform(0.05, 0.3), rng.uniform(0.45, 0.8), 0.02, 0.0, 1.0)
    elif label == "no_signal":
        level = rng.choice([0.0, 1.0])  # every sample of a group wrong, or every one right
        exact = _curve(rng, n, level, level, 0.005, 0.0, 1.0)
        shaping = _curve(rng, n, level, level, 0.005)
        columns["zero_signal_groups"] = _curve(rng, n, 1.0, 1.0, 0.03, 0.93, 1.0)
        needs.append("zero_signal_groups")
    elif label == "truncated":
        exact, shaping = _curve(rng, n, 0.0, 0.0, 0.005, 0.0), _curve(rng, n, 0.0, 0.0, 0.005)
        columns["truncated"] = _curve(rng, n, *rng.uniform(0.7, 1.0, 2), 0.03, 0.6, 1.0)
        columns["zero_signal_groups"] = _curve(rng, n, 1.0, 1.0, 0.03, 0.9, 1.0)
        needs.append("truncated")
    elif label == "reward_hacking":
        low = rng.uniform(-0.6, 0.2)
        shaping = _curve(rng, n, low, low + rng.uniform(0.5, 0.8), 0.02)
        columns["length"] = _curve(rng, n, rng.uniform(60, 120), rng.uniform(3, 15), 2.0, 1.0)
        needs += ["reward/exact_match", f"reward/{name}"]
    elif label == "learning_rate_too_high":
        exact = exact[: n // 3] + [0.0] * (n - n // 3)
        columns["grad_norm"] = _blow_up(rng, n, rng.uniform(0.5, 2.0), rng.uniform(50.0, 1e4))
        columns["kl"] = _blow_up(rng, n, rng.uniform(0.001, 0.05), rng.uniform(2.0, 50.0))
        needs.append(str(rng.choice(["grad_norm", "kl"])))
    elif label != "inconclusive":
        raise ValueError(f"unknown label {label!r}")
    weight = float(rng.choice([0.5, 1.0]))
    columns |= {"reward/exact_match": exact, f"reward/{name}": shaping,
                "reward": [e + weight * s for e, s in zip(exact, shaping)]}
    return columns, needs


def _entries(rng, columns, needs):
    """One dict per step (keys shuffled), with distractors, gaps, and random step numbers."""
    n = len(columns["reward"])
    first, every = int(rng.integers(0, 5000)), int(rng.choice([1, 5, 10]))
    dropped = {k for k in columns if k not in needs and rng.random() < 0.3}
    extras = [str(k) for k in rng.choice(DISTRACTORS, size=int(rng.integers(0, 5)), replace=False)]
    history = []
    for i in range(n):
        entry = {k: v[i] for k, v in columns.items() if k not in dropped}
        entry |= {k: float(rng.uniform(-5, 5)) for k in extras if rng.random() < 0.7}
        entry = {k: v for k, v in entry.items() if k in needs or rng.random() > 0.05}  # gaps
        keys = list(entry) + ["step"]
        entry["step"] = first + i * every
        history.append({keys[j]: entry[keys[j]] for j in rng.permutation(len(keys))})
    return history


def _run(rng, label, n=None):
    n = int(rng.integers(9, 60)) if n is None else n
    return _entries(rng, *_columns(rng, label, n))


def _says(impl, history, expected, why):
    got = impl.diagnose(history)
    assert got == expected, f"{why}: got {got!r}, expected {expected!r} ({len(history)} entries)"


def _steady(n, **columns):
    """A run of n steps whose reward sits still, with the given columns (lists) added."""
    base = {"reward": [0.5] * n}
    columns = base | columns
    return [{"step": 100 + i} | {k: float(v[i]) for k, v in columns.items()} for i in range(n)]


# ----------------------------------------------------------------------------- the tests


@graded("diagnose", reference=True)
def test_diagnose_names_each_signature(impl, rng):
    """names each failure (and a healthy run) from noisy histories of random length"""
    for label in LABELS:
        for _ in range(4):
            _says(impl, _run(rng, label), label, f"a run drawn as {label!r}")


@graded("diagnose")
def test_diagnose_checks_the_rules_in_order(impl, rng):
    """the first rule that holds wins: blow-up, then truncation, then hacking, then no signal"""
    n = int(rng.integers(12, 40))
    columns, needs = _columns(rng, "truncated", n)
    _says(impl, _entries(rng, columns, needs), "truncated",
          "truncated and no signal: truncation comes first")
    columns["kl"] = [0.01] * (n // 2) + [5.0] * (n - n // 2)
    _says(impl, _entries(rng, columns, needs + ["kl"]), "learning_rate_too_high",
          "kl blew up in a cut run")
    columns, needs = _columns(rng, "reward_hacking", n)
    columns["zero_signal_groups"] = [0.95] * n
    _says(impl, _entries(rng, columns, needs + ["zero_signal_groups"]), "reward_hacking",
          "a shaping reward climbed, exact_match did not, zero_signal_groups 0.95: hacking first")


@graded("diagnose")
def test_diagnose_sees_each_blow_up_alone(impl, rng):
    """one non-finite loss, grad_norm or kl; grad_norm x10 without kl; kl >= 1 without grad_norm"""
    n = int(rng.integers(9, 30))
    for key in ("loss", "grad_norm", "kl"):
        history = _run(rng, "healthy", n)
        history[int(rng.integers(n))][key] = float(rng.choice([math.nan, math.inf, -math.inf]))
        _says(impl, history, "learning_rate_too_high", f"one {key} is not finite")
    calm = rng.uniform(0.5, 2.0)
    norms = [calm] * (n - n // 3) + [calm * rng.uniform(10.5, 19)] * (n // 3)
    _says(impl, _steady(n, grad_norm=norms), "learning_rate_too_high",
          "grad_norm grew more than 10x")
    _says(impl, _steady(n, grad_norm=[calm] * (n - n // 3) + [calm * 9] * (n // 3)), "inconclusive",
          "grad_norm grew 9x only: not a blow-up")
    _says(impl, _steady(n, grad_norm=[0.0] * n, zero_signal_groups=[1.0] * n), "no_signal",
          "grad_norm 0 throughout (0 is not more than 10 x 0): no blow-up, no signal")
    kl = [0.01] * (n - n // 3) + [rng.uniform(1.0, 3.0)] * (n // 3)
    _says(impl, _steady(n, kl=kl), "learning_rate_too_high", "late kl >= 1 (no grad_norm logged)")


@graded("diagnose")
def test_diagnose_reads_the_first_and_last_thirds(impl, rng):
    """early and late are the first and last n // 3 entries (at least one); the middle is ignored"""
    n = 3 * int(rng.integers(3, 10))
    middle = [0.01] * (n // 3) + [rng.uniform(2, 9)] * (n // 3) + [0.01] * (n // 3)
    _says(impl, _steady(n, kl=middle), "inconclusive", "kl was high in the middle third only")
    before_the_end = [1.0] * (n - n // 3) + [0.05] * (n // 3)
    _says(impl, _steady(n, truncated=before_the_end), "inconclusive",
          "completions were cut in the first two thirds, not in the last one")
    low = float(rng.uniform(0.0, 0.5))
    seven = [{"step": i, "reward": low + (0.06 if i >= 5 else 0.0)} for i in range(7)]
    _says(impl, seven, "healthy", "7 entries: windows of 2 each, and the reward rose 0.06")
    nine = [{"step": i, "reward": low + (0.09 if i in (6, 7) else 0.0)} for i in range(9)]
    _says(impl, nine, "healthy", "9 entries: windows of 3 each, and the reward rose 0.06")
    two = [{"step": 0, "reward": low}, {"step": 1, "reward": low + 0.1}]
    _says(impl, two, "healthy", "2 entries: one in each window, and the reward rose 0.1")
    _says(impl, two[:1], "inconclusive", "a single entry: nothing rose")


@graded("diagnose")
def test_diagnose_skips_missing_keys(impl, rng):
    """only step and reward are required; a rule whose key its window lacks does not hold; []"""
    _says(impl, [], "inconclusive", "an empty history")
    for label in ("healthy", "inconclusive"):
        bare = [{"step": e["step"], "reward": e["reward"]} for e in _run(rng, label)]
        _says(impl, bare, label, "a history with step and reward only")
    n = 3 * int(rng.integers(3, 10))
    only_early = [{"grad_norm": 1.0} if i < n // 3 else {} for i in range(n)]
    history = [e | {"step": i, "reward": 0.5} for i, e in enumerate(only_early)]
    _says(impl, history, "inconclusive",
          "grad_norm logged in the first third only: the blow-up rule does not hold")
    history = _run(rng, "reward_hacking")
    for entry in history:
        entry.pop("reward/exact_match")
    _says(impl, history, "healthy",
          "no reward/exact_match: the hacking rule does not hold, and the reward rose")


@graded("diagnose")
def test_diagnose_ignores_order_and_numbering(impl, rng):
    """entries in any order, steps from any number at any interval, keys in any order"""
    for label in LABELS:
        history = _run(rng, label)
        offset, every = int(rng.integers(-1000, 10**6)), int(rng.integers(1, 50))
        moved = [e | {"step": offset + every * e["step"]} for e in history]
        moved = [dict(reversed(list(e.items()))) for e in moved]
        shuffled = [moved[i] for i in rng.permutation(len(moved))]
        _says(impl, shuffled, label,
              f"a {label!r} run, entries shuffled, steps renumbered, keys reversed")


@graded("diagnose")
def test_diagnose_always_returns_a_label(impl, rng):
    """never raises on odd histories (random keys, gaps, non-finite values); returns a label"""
    keys = ("loss", "kl", "grad_norm", "zero_signal_groups", "truncated", "length",
            "reward/exact_match", "reward/format") + DISTRACTORS
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
