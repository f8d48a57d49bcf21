"""The evaluations drivers hand to `Run.train` as eval_fn, and the plot of a run's history.

    loss_eval = validation_loss_fn(val_data, batch_size)            # {"loss", ...} on validation
    task_eval = task_eval_fn(config, model, tokenizer, validation)  # greedy accuracy, or None
    plot_history(result.history, ["reward", "kl"])                  # one panel per key
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flax import nnx

from tunix_lite.data.sft import SFTBatches, SFTData
from tunix_lite.training.config import ConfigError
from tunix_lite.training.losses import lm_loss
from tunix_lite.training.trainer import COUNT, evaluate


def validation_loss_fn(data: SFTData, batch_size: int) -> Callable[[nnx.Module], dict]:
    """eval_fn(model) -> lm_loss's metrics over every validation row (one fixed order: one
    compile)."""
    batches = SFTBatches(data, batch_size, shuffle=False).epoch(0)
    return lambda model: {k: v for k, v in evaluate(model, lm_loss, batches).items() if k != COUNT}


def task_eval_fn(config, model, tokenizer, validation, *, max_new_tokens: int | None = None,
                 n_test: int = 0, policy: Callable[[nnx.Module], nnx.Module] = lambda m: m):
    """eval_fn(model) -> greedy accuracy (judged as training's reward would:
    `rewards.judge.reward_for`) and format on the first config.n_accuracy validation records, and
    with `n_test` on that many held-out test-split prompts of the synthetic tasks (keys prefixed
    "test_"). None when there is nothing to answer: both 0, or validation records without an
    answer column and no n_test.

    max_new_tokens: the answer budget (None: from the longest reference completion).
    policy(model): the language model inside what trains (PPO trains a value head around it)."""
    from tunix_lite.evaluation.accuracy import TaskEval
    from tunix_lite.rewards.judge import reward_for

    evals = []
    if config.n_accuracy and "answer" in validation.column_names:
        records = validation.select(range(min(config.n_accuracy, len(validation))))
        evals.append(("", TaskEval(policy(model), tokenizer, records, template=config.template,
                                   max_new_tokens=max_new_tokens, reward_fn=reward_for(records))))
    if n_test:
        from tunix_lite.data.synthetic import DOMAINS, make_splits

        if config.train_data != "synthetic":
            raise ConfigError("n_test: the held-out test split exists for the synthetic tasks "
                              "only; set n_test: 0")
        test = make_splits(0, 0, n_test, domains=config.domains or DOMAINS,
                           seed=config.seed)["test"]
        evals.append(("test_", TaskEval(policy(model), tokenizer, test, template=config.template,
                                        max_new_tokens=max_new_tokens)))
    if not evals:
        return None
    return lambda m: {prefix + k: v for prefix, task in evals for k, v in task(policy(m)).items()}


def plot_history(history: list[dict], keys: str | Sequence[str | Sequence[str]] = ("loss",), *,
                 title: str | None = None):
    """History keys against the step (eval keys only where they were measured), one panel per
    entry of `keys` (a reward, a KL and a length have different scales); an entry that is a tuple
    of keys shares one panel. Keys no entry has are left out (the KL of a run without a
    reference); KeyError when none is there. Returns the Figure."""
    from matplotlib.figure import Figure  # not pyplot: no global state, shown once in a notebook

    seen = {k for h in history for k in h}
    entries = [keys] if isinstance(keys, str) else keys
    panels = [[k for k in ([entry] if isinstance(entry, str) else entry) if k in seen]
              for entry in entries]
    panels = [panel for panel in panels if panel]
    if not panels:
        raise KeyError(f"no history entry has {keys!r}; keys seen: {sorted(seen)}")
    fig = Figure(figsize=(max(6.0, 3.2 * len(panels)), 3.2), layout="constrained")
    for i, panel in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for key in panel:
            points = [(h["step"], h[key]) for h in history if key in h]
            ax.plot(*zip(*points), label=key, marker="o" if len(points) < 30 else None)
        ax.set_title(", ".join(panel))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(panel) > 1:
            ax.legend()
    if title:
        fig.suptitle(title)
    return fig
