"""Reward functions in TRL's convention, several at once with weights,
each one checked and logged on its own.

A reward function scores a batch of completions:

    def reward(prompts: list[str], completions: list[str], **columns) -> list[float]

`columns` holds the dataset's other columns (e.g. `answer`, `domain`), one value per completion, and
`completion_ids` (the generated token ids, stop token included), so a reward can count tokens rather
than characters. `tunix_lite.rewards.tags.reward_exact_match` and `reward_format` follow this
convention, and so does any function written for TRL's GRPOTrainer.

    rewards = Rewards({"exact_match": reward_exact_match, "format": reward_format},
                      weights=[1.0, 0.5])
    total, parts = rewards(prompts, completions, answer=answers, completion_ids=ids)
    # total [R] = 1.0 * exact_match + 0.5 * format;  parts = {"exact_match": [R], "format": [R]}
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tunix_lite.rewards.reasoning_gym import reward_reasoning_gym
from tunix_lite.rewards.tags import reward_exact_match, reward_format, reward_reasoning_format
from tunix_lite.rewards.verifiers import reward_code, reward_math, reward_steps, verifier_events

RewardFn = Callable[..., Sequence[float]]


class RewardError(ValueError):
    """A reward function that raised, or returned something other than one finite number per
    completion."""


def overlong_penalty(max_tokens: int, buffer: int) -> RewardFn:
    """DAPO's soft overlong punishment (DAPO = Decoupled Clip and Dynamic sAmpling Policy
    Optimization, arXiv 2503.14476), counted in tokens:

        R_length(y) = 0                                 if |y| <= L_max - L_cache
                      ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
                      -1                                if |y| > L_max

    with L_max = `max_tokens` and L_cache = `buffer`: a completion is punished linearly over the
    last `buffer` tokens before the limit. |y| is read from `completion_ids`, in tokens as in the
    paper (counting characters instead, as some implementations do, punishes digits and short words
    unevenly).
    """
    if buffer < 1 or buffer > max_tokens:
        raise ValueError(f"overlong_penalty: need 1 <= buffer <= max_tokens, got buffer={buffer}, "
                         f"max_tokens={max_tokens}")

    def reward_overlong(prompts, completions, completion_ids, **columns) -> list[float]:
        lengths = np.array([len(ids) for ids in completion_ids], np.float64)
        start = max_tokens - buffer
        return np.where(lengths <= start, 0.0,
                        np.where(lengths <= max_tokens, (start - lengths) / buffer, -1.0)).tolist()

    return reward_overlong


# Names a config file may use (`rewards: [exact_match, format]`). The verifiers' rewards (math,
# code, steps) run their checks in a worker pool with a timeout per call, as does reasoning_gym
# (each task's own scorer, on `reasoning_gym:TASK` data). A trained reward model is named by its
# directory: `reward_model:runs/rm_tiny/reward_model`; the caller says how one loads (`reward_set`'s
# load_reward_model: tunix_lite.preference.reward_model.reward_model_reward, which RLConfig passes).
REWARD_FUNCTIONS: dict[str, RewardFn] = {
    "exact_match": reward_exact_match, "format": reward_format,
    "reasoning_format": reward_reasoning_format, "math": reward_math, "code": reward_code,
    "steps": reward_steps, "reasoning_gym": reward_reasoning_gym}
REWARD_MODEL = "reward_model:"


def _accepts(fn: RewardFn, name: str) -> bool:
    parameters = inspect.signature(fn).parameters.values()
    return any(p.kind is p.VAR_KEYWORD or p.name == name for p in parameters)


class Rewards:
    """Weighted reward functions: `total = sum_k w_k * r_k`, with every r_k kept for logging.

    functions: {name: function} (the name is what the logs show); weights: one per function (default
    1.0 each). A function is given only the columns it names or everything when it takes **kwargs,
    as TRL does.
    """

    def __init__(self, functions: Mapping[str, RewardFn], weights: Sequence[float] | None = None):
        if not functions:
            raise ValueError("Rewards needs at least one reward function")
        self.functions = dict(functions)
        weights = [1.0] * len(self.functions) if weights is None else list(weights)
        if len(weights) != len(self.functions):
            raise ValueError(f"{len(weights)} reward weights for {len(self.functions)} "
                             f"reward functions ({', '.join(self.functions)})")
        self.weights = dict(zip(self.functions, map(float, weights)))
        self.verifier_events: dict[str, int] = {}  # the last call's verifier calls and failures

    def __call__(self, prompts: Sequence, completions: Sequence[str],
                 **columns) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(total [R], {name: [R]}) for R completions;
        RewardError names the function that misbehaved."""
        R = len(completions)
        parts, before = {}, verifier_events()
        for name, fn in self.functions.items():
            given = {k: v for k, v in columns.items() if _accepts(fn, k)}
            try:
                values = fn(prompts, completions, **given)
            except Exception as e:
                raise RewardError(f"reward function {name!r} raised {type(e).__name__}: {e} "
                                  f"(called on {R} completions "
                                  f"with columns {sorted(given)})") from e
            text = next(((i, v) for i, v in enumerate(np.asarray(values, object).flat)
                         if isinstance(v, (str, bytes))), None)
            if text is not None:  # np.asarray(["1.0"], np.float64) would read it as a number
                i, value = text
                raise RewardError(f"reward function {name!r} returned {value!r} "
                                  f"({type(value).__name__}), not a number, for completion {i}; "
                                  "return one float per completion")
            try:
                values = np.asarray(values, np.float64)
            except (TypeError, ValueError):
                odd = next((v for v in values if not isinstance(v, (int, float, np.number))),
                           values)
                raise RewardError(f"reward function {name!r} returned {odd!r} "
                                  f"({type(odd).__name__}), not a number; "
                                  "return one float per completion") from None
            if values.shape != (R,):
                raise RewardError(f"reward function {name!r} returned {values.size} values in "
                                  f"shape {values.shape} for {R} completions; "
                                  f"return a list of {R} floats")
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                raise RewardError(f"reward function {name!r} returned {values[bad[0]]} "
                                  f"for completion {bad[0]} ({completions[bad[0]]!r}); "
                                  "rewards must be finite numbers")
            parts[name] = values
        total = sum(self.weights[name] * values for name, values in parts.items())
        events = {k: n - before[k] for k, n in verifier_events().items()}
        self.verifier_events = events if events["calls"] else {}  # no verifier, nothing to log
        return total, parts


def reward_set(names: Sequence[str], weights: Sequence[float] | None = None, *,
               extra: Mapping[str, RewardFn] | None = None,
               load_reward_model: Callable[[str], RewardFn] | None = None) -> Rewards:
    """Rewards from names in REWARD_FUNCTIONS (and `extra`), or `reward_model:PATH` for a saved
    reward model, as a config file lists them. `load_reward_model(PATH)` makes that reward (this
    floor holds no model code: `tunix_lite.preference.reward_model.reward_model_reward` checks the
    directory at once and loads the weights at the first call)."""
    known = REWARD_FUNCTIONS | dict(extra or {})
    functions = {}
    for name in names:
        if name.startswith(REWARD_MODEL):
            if load_reward_model is None:
                raise ValueError(f"{name!r}: pass load_reward_model=tunix_lite.preference."
                                 "reward_model.reward_model_reward to load a trained reward model")
            try:
                functions[name] = load_reward_model(name.removeprefix(REWARD_MODEL))
            except ValueError as e:
                raise ValueError(f"{name!r}: {e}") from None
        elif name in known:
            functions[name] = known[name]
        else:
            raise ValueError(f"unknown reward {name!r}; choose from {', '.join(known)} "
                             f"or {REWARD_MODEL}PATH (a trained reward model)")
    return Rewards(functions, weights)
