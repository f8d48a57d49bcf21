"""Prompts in; groups of completions, scored, out; then the fixed-length rows a train step reads.

    prompts = Prompts.build(records, tokenizer, max_tokens=64)
    groups = sample_groups(engine, prompts, [3, 14, 15], rewards, group_size=8, max_new_tokens=64,
                           row_len=128)
    groups.rewards, groups.parts["exact_match"], groups.texts  # [R], [R], R strings (R = 3 * 8)
    rows = groups.rows(pad_id)                                # {inputs, targets, ...} [R, 128]

Every rollout pads its prompts to the same length and asks for the same number of them, so the
rollout program and the train step each compile once per run, whatever the prompts' lengths
(`tunix_lite.data.rollouts`). Shared by GRPO, PPO and the agent (whose config, `RLConfig`, is in
`tunix_lite.rl.config`): the seam where an algorithm supplies its sampling (`RolloutSampler`:
`GroupSampler` here, the agent's multi-turn `TrajectorySampler`), and the one batch stream that
turns rollouts into optimizer steps (`RolloutStream`), in turn or sampled ahead on a thread
(`tunix_lite.rl.asynchronous`).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
from flax import nnx

from tunix_lite.chat import format_chat
from tunix_lite.data.rollouts import rollout_rows
from tunix_lite.rewards.functions import Rewards
from tunix_lite.rl.asynchronous import PolicyVersions, RolloutProducer
from tunix_lite.rl.config import RLConfig  # noqa: F401 - its former home, for older imports
from tunix_lite.rl.engine import RolloutEngine
from tunix_lite.sampler import GenerateOutput
from tunix_lite.training.losses import sequence_log_probs
from tunix_lite.training.trainer import score_batch


# ----------------------------------------------------------------------------- prompts


@dataclasses.dataclass
class Prompts:
    """The RL prompts: dataset records (whose columns the rewards read) and their chat-formatted
    token ids, all left-padded to `length` tokens when sampled."""

    records: list[dict]
    ids: list[list[int]]
    length: int
    max_tokens: int  # the longest prompt allowed
    dropped: int = 0  # prompts longer than max_tokens, left out (drop_long)

    @classmethod
    def build(cls, records: Sequence[Mapping], tokenizer, *, max_tokens: int,
              template: str | None = None, drop_long: bool = False,
              multiple: int = 8) -> "Prompts":
        """Format each record's "prompt" as a user turn. A prompt longer than `max_tokens` raises
        (naming the record) unless `drop_long`, which leaves it out and counts it (all left out
        raises). `length` is the longest prompt rounded up to `multiple`, capped at max_tokens."""
        records = [dict(r) for r in records]
        if not records or "prompt" not in records[0]:
            raise ValueError("RL prompts need records with a 'prompt' column, got "
                             f"{sorted(records[0]) if records else 'none'}")
        kept, ids = [], []
        for i, record in enumerate(records):
            tokens = format_chat(tokenizer, [{"role": "user", "content": record["prompt"]}],
                                 template=template)
            if len(tokens) > max_tokens:
                if drop_long:
                    continue
                raise ValueError(f"prompt {i} ({record['prompt'][:60]!r}...) is {len(tokens)} "
                                 f"tokens; at most {max_tokens} fit before the completion budget. "
                                 "Raise seq_len, lower max_new_tokens, or set truncation: drop")
            kept.append(record)
            ids.append(tokens)
        if not kept:
            raise ValueError(f"all {len(records)} prompts are longer than {max_tokens} tokens, so "
                             "truncation: drop left none; raise seq_len or max_prompt_tokens, or "
                             "lower max_new_tokens")
        longest = max(map(len, ids))
        return cls(kept, ids, min(-(-longest // multiple) * multiple, max_tokens), max_tokens,
                   len(records) - len(kept))

    def __len__(self) -> int:
        return len(self.records)

    @classmethod
    def from_config(cls, config, records, tokenizer) -> "Prompts":
        """The config's train_data as prompts; an error starts with the key and the file."""
        try:
            return cls.build(records, tokenizer, max_tokens=config.prompt_budget,
                             template=config.template, drop_long=config.truncation == "drop")
        except ValueError as e:
            raise ValueError(f"train_data ({config.train_data}): {e}") from None

    def report(self) -> str:
        """How many prompts, their padded length, and how many were dropped as too long."""
        dropped = (f"; {self.dropped} of {self.dropped + len(self)} dropped as longer than "
                   f"{self.max_tokens} tokens, by truncation: drop") if self.dropped else ""
        return f"{len(self)} prompts (left-padded to {self.length} tokens{dropped})"


# ----------------------------------------------------------------------------- scored groups


@dataclasses.dataclass
class Groups:
    """B prompts x G completions with their rewards; row b*G + g is completion g of prompt b."""

    output: GenerateOutput
    records: list[dict]  # the prompt's record, once per row
    rewards: np.ndarray  # [R] weighted total
    parts: dict[str, np.ndarray]  # each reward function's [R]
    group_size: int
    row_len: int  # prompt + completion <= row_len + 1: the training rows' length
    max_new_tokens: int  # the completion budget
    seconds: float = 0.0  # spent sampling
    verifier_events: dict[str, int] = dataclasses.field(default_factory=dict)  # Rewards' counts

    @property
    def texts(self) -> list[str]:
        return self.output.texts

    def __len__(self) -> int:
        return len(self.rewards) // self.group_size

    def informative(self) -> np.ndarray:
        """[B] bool: groups whose rewards are not all equal (the others give every estimator zero
        advantage)."""
        r = self.rewards.reshape(-1, self.group_size)
        return r.max(axis=1) > r.min(axis=1)

    def select(self, groups: Sequence[int]) -> "Groups":
        rows = (np.asarray(groups, int)[:, None] * self.group_size
                + np.arange(self.group_size)).reshape(-1)
        out = self.output
        output = dataclasses.replace(out, texts=[out.texts[r] for r in rows],
                                     tokens=out.tokens[rows], logprobs=out.logprobs[rows],
                                     sampled_logprobs=out.sampled_logprobs[rows],
                                     lengths=out.lengths[rows],
                                     prompt_tokens=out.prompt_tokens[rows],
                                     prompt_lengths=out.prompt_lengths[rows])
        return Groups(output, [self.records[r] for r in rows], self.rewards[rows],
                      {k: v[rows] for k, v in self.parts.items()}, self.group_size, self.row_len,
                      self.max_new_tokens, self.seconds, self.verifier_events)

    @staticmethod
    def concat(parts: Sequence["Groups"]) -> "Groups":
        first = parts[0]
        outs = [p.output for p in parts]
        output = dataclasses.replace(
            first.output, texts=[t for o in outs for t in o.texts],
            **{f: np.concatenate([getattr(o, f) for o in outs])
               for f in ("tokens", "logprobs", "sampled_logprobs", "lengths", "prompt_tokens",
                         "prompt_lengths")})
        return Groups(output, [r for p in parts for r in p.records],
                      np.concatenate([p.rewards for p in parts]),
                      {k: np.concatenate([p.parts[k] for p in parts]) for k in first.parts},
                      first.group_size, first.row_len, first.max_new_tokens,
                      sum(p.seconds for p in parts),
                      {k: sum(p.verifier_events.get(k, 0) for p in parts)
                       for k in first.verifier_events})

    def rows(self, pad_id: int, **per_token: np.ndarray) -> dict[str, np.ndarray]:
        """Training rows of row_len tokens (`tunix_lite.data.rollouts.rollout_rows`)."""
        return rollout_rows(self.output, self.row_len, pad_id, **per_token)

    def stats(self) -> dict[str, float]:
        """What a rollout looked like, for the logs: mean rewards, the sampled tokens'
        entropy, completion length, how many completions were cut (by the budget or the row's end),
        how many groups carried no signal, the verifiers' failures, and sampling speed."""
        out = self.output
        cut = ((out.lengths >= self.max_new_tokens)
               | (out.prompt_lengths + out.lengths > self.row_len))
        stats = {"reward": float(self.rewards.mean())}
        stats |= {f"reward/{k}": float(v.mean()) for k, v in self.parts.items()}
        # on a mix of tasks (reasoning_gym:a,b,...), each task's own curve: one task can fall
        # while the mean holds
        domains = np.array([r.get("domain", "") for r in self.records])
        if len(set(domains)) > 1:
            stats |= {f"reward@{d}": float(self.rewards[domains == d].mean())
                      for d in sorted(set(domains))}
        # -log pi of each sampled token, averaged: the policy's entropy per token (in expectation,
        # when sampling at temperature 1 with no top-k / top-p); its fall is the policy sharpening
        entropy = float(-out.logprobs.sum() / max(out.lengths.sum(), 1))
        stats |= {"entropy": entropy, "length": float(out.lengths.mean()),
                  "truncated": float(np.mean(cut)),
                  "zero_signal_groups": float(1.0 - self.informative().mean())}
        # calls of this rollout's verifiers that timed out, crashed, raised, or met code that did
        # something a program under test has no reason to do (a policy attacking its reward)
        stats |= {f"verifier/{k}": float(n) for k, n in self.verifier_events.items()}
        if self.seconds:
            stats["rollout_tokens_per_s"] = float(out.lengths.sum() / self.seconds)
        return stats


def sample_groups(engine: RolloutEngine, prompts: Prompts, index: Sequence[int],
                  rewards: Rewards, *,
                  group_size: int, max_new_tokens: int, row_len: int, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None, seed: int = 0) -> Groups:
    """G completions of each prompt in `index`, each stopped where its training row of row_len
    tokens ends, scored by every reward function. The rewards see each prompt's text, the
    completions' text, the prompt's other record columns and `completion_ids` (generated ids, stop
    token included), one per completion, as TRL passes them."""
    start = time.perf_counter()
    out = engine.generate([prompts.ids[i] for i in index], max_new_tokens=max_new_tokens,
                          num_samples=group_size, temperature=temperature, top_k=top_k,
                          top_p=top_p, seed=seed, max_total_tokens=row_len + 1)
    seconds = time.perf_counter() - start
    records = [prompts.records[i] for i in index for _ in range(group_size)]
    columns = {k: [r[k] for r in records] for k in records[0] if k != "prompt"}
    completion_ids = [row[:n].tolist() for row, n in zip(out.tokens, out.lengths)]
    total, parts = rewards([r["prompt"] for r in records], out.texts,
                           completion_ids=completion_ids, **columns)
    return Groups(out, records, total.astype(np.float32), parts, group_size, row_len,
                  max_new_tokens, seconds, rewards.verifier_events)


# ---------------------------------------------------------------------- where rollouts come from


class Rollout(Protocol):
    """One rollout as the stream reads it: B prompts' samples, scored. `Groups` (single-turn
    completions) is one; the agent's `Trajectories` (multi-turn, through an environment) another."""

    def stats(self) -> dict[str, float]:
        """What the rollout looked like, for the log entries of the steps it feeds."""


class RolloutSampler(Protocol):
    """What a RolloutStream samples with: `GroupSampler` through a rollout engine (GRPO, PPO), or
    the agent's `TrajectorySampler` through its environment. The stream moves the weights: it calls
    `engine.sync_weights` with `model` (or a snapshot of it) before each rollout."""

    prompts: Prompts
    model: nnx.Module  # the policy being trained
    engine: RolloutEngine  # where the samples come from

    def __call__(self, index: Sequence[int], seed: int) -> Rollout:
        """The samples of prompts[index] from the engine's weights, drawn with `seed`."""


class GroupSampler:
    """G completions of each prompt from the engine, each cut where its training row of row_len
    tokens ends, scored: GRPO's and PPO's rollouts (`sample_groups`)."""

    def __init__(self, config, model: nnx.Module, engine: RolloutEngine, prompts: Prompts,
                 rewards: Rewards):
        self.config, self.model, self.engine = config, model, engine
        self.prompts, self.rewards = prompts, rewards
        self.row_len = min(config.seq_len, prompts.length + config.max_new_tokens - 1)

    def __call__(self, index: Sequence[int], seed: int) -> Groups:
        c = self.config
        return sample_groups(self.engine, self.prompts, index, self.rewards,
                             group_size=c.group_size, max_new_tokens=c.max_new_tokens,
                             row_len=self.row_len, temperature=c.temperature, top_k=c.top_k,
                             top_p=c.top_p, seed=seed)


# ----------------------------------------------------------------------------- the policy's side


def old_log_probs(model: nnx.Module, rows: Mapping[str, np.ndarray]) -> np.ndarray:
    """log pi_old of every target [R, T] under the model as it is now, before the rollout's updates:
    what the ratio of inner iterations after the first compares with. Recomputed rather than taken
    from the sampler, whose log-probs may come from another kernel, dtype or engine."""
    keys = ("inputs", "targets", "positions", "segment_ids")
    model.eval()
    try:
        return np.asarray(score_batch(sequence_log_probs, model, {k: rows[k] for k in keys}))
    finally:
        model.train()


def mini_batches(rows: Mapping[str, np.ndarray], iterations: int, parts: int, seed: Sequence[int]):
    """Yield `iterations` passes over the rows, each shuffled (seeded) and split into `parts` equal
    mini-batches."""
    n = len(next(iter(rows.values())))
    size = n // parts
    for it in range(iterations):
        order = np.random.default_rng([*seed, it]).permutation(n) if parts > 1 else np.arange(n)
        for p in range(parts):
            take = order[p * size:(p + 1) * size]
            yield {k: v[take] for k, v in rows.items()}


def rollout_seed(seed: int, rollout: int, attempt: int = 0) -> int:
    """The sampling seed of one rollout (and refill attempt): fixed by the run's seed, so a resumed
    run samples exactly what the uninterrupted one did."""
    return int(np.random.default_rng([seed, rollout, attempt]).integers(2**31 - 1))


# ------------------------------------------------------------------------------ the batch stream


class RolloutStream:
    """The batch stream of every RL run (GRPO, PPO, the agent): rollout k feeds optimizer steps
    k*S + 1 ... (k+1)*S, where S = inner_iterations x mini_batches. The stream owns what the
    algorithms share: which prompts each rollout draws and its seed, which weights sample it and
    when they move to the sampler, resuming mid-rollout, the mini-batches, and each step's rollout
    statistics (`metrics(step)`, for Trainer.fit's host_metrics).

    sampler(index, seed) -> rollout: the algorithm's sampling (a `RolloutSampler`).
    prepare(rollout) -> rows: the algorithm's part (advantages, old log-probs, values), B * G rows;
    always run on the trainer's side, with its weights as they are before the rollout's first step.
    dynamic_sampling: DAPO's filter, for a sampler of `Groups`. Groups whose rewards are all equal
    are dropped and more prompts are drawn (at most `max_refills` extra rollouts) until B groups
    carry signal; if they never do, the rollout trains on the groups it has plus zero-weight
    padding rows.

    Staleness: `lag(step)` is how many optimizer updates the weights that sampled a step's rollout
    trail the weights that step updates (logged as `staleness`, beside the rollout's
    `policy_version`). `rollout_lag` = max_staleness: rollout k is sampled from the weights
    rollout_lag updates before its first step (`PolicyVersions`, the one rule for it), 0 by
    default: the live weights right before. asynchronous: sample each rollout on a thread as soon
    as its weights exist (`RolloutProducer`), while the trainer steps on earlier ones; otherwise in
    line, when the trainer needs it. Both give the same numbers (`timeline` says when each
    rollout's weights were taken, synced and sampled).
    """

    def __init__(self, config, sampler: RolloutSampler, prepare, *,
                 dynamic_sampling: bool = False, max_refills: int = 0, rollout_lag: int = 0,
                 asynchronous: bool = False):
        if rollout_lag < 0:
            raise ValueError(f"rollout_lag: {rollout_lag} updates; a rollout cannot be sampled "
                             "from weights newer than the step that trains on it")
        self.config, self.sampler, self.prepare = config, sampler, prepare
        self.dynamic_sampling, self.max_refills = dynamic_sampling, max_refills
        self.rollout_lag, self.asynchronous = rollout_lag, asynchronous
        self.versions = PolicyVersions(config.steps_per_rollout if config else 1, rollout_lag)
        self.timeline: list[dict] = []  # one entry per rollout sampled: times are perf_counter()
        self._metrics: dict[int, dict] = {}

    def lag(self, step: int) -> int:
        """Optimizer updates between the weights that sampled step `step`'s rollout (steps count
        from 1) and the weights the step updates."""
        return self.versions.staleness(step)

    def sample(self, rollout: int, index: Sequence[int], attempt: int = 0) -> Rollout:
        return self.sampler(index, rollout_seed(self.config.seed, rollout, attempt))

    def rollout(self, rollout: int, index: Sequence[int]) -> tuple[Rollout, dict]:
        groups = self.sample(rollout, index)
        if not self.dynamic_sampling:
            return groups, {}
        stats = {"zero_signal_groups": float(1.0 - groups.informative().mean())}  # before filtering
        B, kept, attempt = len(index), [groups.select(np.flatnonzero(groups.informative()))], 0
        while sum(map(len, kept)) < B and attempt < self.max_refills:
            attempt += 1
            refill = np.random.default_rng([self.config.seed, rollout, attempt]).choice(
                len(self.sampler.prompts), B, replace=False)
            more = self.sample(rollout, refill, attempt)
            kept.append(more.select(np.flatnonzero(more.informative())))
        have = sum(map(len, kept))
        if have == 0:
            return groups, stats | {"kept_groups": 0.0, "rollouts": float(attempt + 1)}
        groups = Groups.concat(kept)
        return groups.select(range(min(have, B))), stats | {"kept_groups": min(have, B) / B,
                                                            "rollouts": float(attempt + 1)}

    def _sample_job(self, rollout: int, job: dict) -> tuple[Rollout, dict]:
        """One rollout on the sampler's side: its weights into the engine, then sample and score."""
        job["started"] = time.perf_counter()
        self.sampler.engine.sync_weights(job.pop("weights"))
        job["synced"] = time.perf_counter()
        result = self.rollout(rollout, job["index"])
        job["sampled"] = time.perf_counter()
        return result

    def batches(self, start_step: int = 0):
        """The optimizer steps' batches from step start_step + 1 on: a resumed run redraws the
        rollout it stopped in (same prompts, same seed) and skips the steps it already took. A
        resumed run with rollout_lag > 0 samples its first rollouts from the restored weights
        (older ones are gone): it continues exactly only with rollout_lag 0."""
        from tunix_lite.data.batches import Batches

        c = self.config
        S = c.steps_per_rollout
        order = Batches(len(self.sampler.prompts), lambda o: {"index": np.asarray(o)},
                        c.batch_size, seed=c.seed, drop_last=True)
        first, skip = divmod(start_step, S)
        self.versions = versions = PolicyVersions(S, self.rollout_lag, start=start_step)
        upcoming = ((k, b["index"]) for k, b in enumerate(order.stream(start=first), start=first))
        waiting = next(upcoming)  # the next rollout whose weights do not exist yet
        producer = RolloutProducer(self._sample_job, threaded=self.asynchronous)
        jobs: dict[int, dict] = {}  # submitted, not yet trained on

        def publish(version: int, needed: int) -> None:
            """The trainer's weights are now `version`: hand a snapshot of them to every rollout
            sampled from it (the only place weights leave the trainer). Rollouts past the run's
            last step are not sampled unless the trainer asks for them (`needed`)."""
            nonlocal waiting
            while versions.version(waiting[0]) <= version and (
                    waiting[0] * S < c.steps or waiting[0] <= needed):
                k, index = waiting
                job = {"rollout": k, "version": versions.version(k), "index": index,
                       "published": time.perf_counter(),
                       "weights": nnx.clone(self.sampler.model)}  # shares the arrays: no copy
                self.timeline.append(job)
                jobs[k] = job
                producer.submit(k, job)
                waiting = next(upcoming)

        version = start_step  # updates the trainer's weights have had
        try:
            for k in itertools.count(first):
                publish(version, k)
                asked = time.perf_counter()
                rollout, extra = producer.result(k)
                jobs.pop(k)["waited"] = time.perf_counter() - asked  # the trainer's side idle
                rows = self.prepare(rollout)
                stats = rollout.stats() | extra | {"policy_version": float(versions.version(k))}
                passes = mini_batches(rows, c.inner_iterations, c.mini_batches, (c.seed, k))
                for i, batch in enumerate(passes):
                    if k == first and i < skip:
                        continue
                    step = k * S + i + 1
                    self._metrics[step] = stats | {"staleness": float(versions.staleness(step))}
                    yield batch
                    version += 1  # the trainer asks for the next batch once it has sent this step
                    publish(version, k + 1)
        finally:
            producer.close()

    def metrics(self, step: int) -> dict:
        return self._metrics.pop(step, {})

    def low_signal_note(self, history: Sequence[Mapping], threshold: float = 0.5) -> str | None:
        """The line a run ends with when most of its groups had all-equal rewards and nothing
        dropped them; None otherwise.

        Such a group's advantages are all 0, so it adds nothing to the gradient, yet an Adam step
        is as long whatever share of the batch made it: each update follows the few groups left.
        On a model that already solves most prompts, that noise flips its least certain greedy
        answers (course/results/09_grpo_drift.md: with 67% of the groups all-equal, the tiny model
        lost 0.11 on one domain; with the same settings and dynamic sampling it lost nothing)."""
        shares = [h["zero_signal_groups"] for h in history if "zero_signal_groups" in h]
        if self.dynamic_sampling or not shares or np.mean(shares) < threshold:
            return None
        share = float(np.mean(shares))
        if share == 1:
            what = "no group had rewards that differ, so only the KL term moved the model"
        else:
            what = (f"{share:.0%} of groups had all-equal rewards (zero advantage), so each update "
                    "followed the other groups alone and can drift on what the model already "
                    "answers")
        return (f"{what}: set dynamic_sampling: true to train on groups with signal only, or use "
                "prompts the model answers right only some of the time")
