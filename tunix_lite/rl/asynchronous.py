"""Rollouts sampled ahead of training: which weights sample each rollout, and the thread that
samples while the trainer steps.

    versions = PolicyVersions(steps_per_rollout=1, max_staleness=2)
    versions.version(5)       # 3: rollout 5 is sampled from the weights after 3 updates
    versions.staleness(6)     # 2: step 6 updates weights 2 updates newer than its samples'

    producer = RolloutProducer(sample, threaded=True)
    producer.submit(5, job)   # sample(5, job) starts on the producer's thread ...
    producer.result(5)        # ... and the trainer takes its result when it needs it
    producer.close()

Synchronous RL alternates: sample from the newest weights, then update on those samples, so the
rollout devices wait while the trainer steps, and the other way round. Asynchronous RL samples
rollout k from weights a few updates old while the trainer still steps on rollout k - 1 (as
AReaL and google-tunix's asynchronous rollout orchestrator do, among others). The samples are then
off-policy by that many updates: the staleness each step logs, measured by the mismatch metrics
and corrected by `rollout_correction` (tunix_lite.rl.losses).

Determinism: which weights sample a rollout is fixed by `PolicyVersions`, never by timing, and the
producer samples rollouts one after another in order with the seeds a synchronous run uses; so a
run gives the same numbers whether its rollouts were sampled on the thread or in line, and with
max_staleness 0 the same bits as the synchronous loop.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class PolicyVersions:
    """Which weights each rollout is sampled from: the one rule that decides when the trainer's
    weights move to the sampler, and so every rollout's policy version and every step's staleness.

    A policy version counts the optimizer updates its weights have had. Rollout k feeds steps
    k S + 1 ... (k + 1) S (S = inner_iterations x mini_batches) and is sampled from version

        v_k = max(start, k S - max_staleness)

    `start`: the version the run starts (or resumes) from; older weights are gone. With
    max_staleness 0, v_k = k S: the weights right before the rollout's first step (rollouts and
    updates alternate). With M > 0 the weights M updates older, so rollout k can be sampled while
    the trainer still steps on earlier rollouts. A step's staleness is the number of updates between
    the weights that sampled its rollout and the weights it updates: step - 1 - v_k, at most
    M + S - 1 (the S - 1 are the inner steps' own lag, which the old log-probs correct for)."""

    def __init__(self, steps_per_rollout: int, max_staleness: int = 0, start: int = 0):
        if max_staleness < 0:
            raise ValueError(f"max_staleness: {max_staleness} updates; a rollout cannot be "
                             "sampled from weights newer than the step that trains on it")
        self.steps_per_rollout, self.max_staleness, self.start = (steps_per_rollout,
                                                                   max_staleness, start)

    def version(self, rollout: int) -> int:
        """v_k: the policy version rollout k is sampled from."""
        return max(self.start, rollout * self.steps_per_rollout - self.max_staleness)

    def rollout_of(self, step: int) -> int:
        """The rollout whose samples step `step` (counted from 1) trains on."""
        return (step - 1) // self.steps_per_rollout

    def staleness(self, step: int) -> int:
        """Updates between the weights that sampled step `step`'s rollout and the weights the step
        updates."""
        return step - 1 - self.version(self.rollout_of(step))


_STOP = object()


class RolloutProducer:
    """Samples rollouts in the order they are submitted: on a thread of its own (`threaded`), so
    sampling runs while the trainer steps, or in line, when `result` asks for one.

    sample(rollout, job) -> result: the work of one rollout (weights in place, generate, rewards);
    `job` holds what it needs (the prompts, a snapshot of the weights). An exception in the thread
    is raised again by `result`. JAX releases the GIL while a device computes, so the thread and
    the trainer's host loop both make progress; on devices of their own (`rollout_mesh:`), their
    computations run at the same time."""

    def __init__(self, sample: Callable[[int, Any], Any], *, threaded: bool):
        self.sample, self.threaded = sample, threaded
        self._jobs: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._inline: dict[int, Any] = {}
        self._thread = None
        if threaded:
            self._thread = threading.Thread(target=self._work, name="rollout-producer",
                                            daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while (item := self._jobs.get()) is not _STOP:
            rollout, job = item
            try:
                self._results.put((rollout, self.sample(rollout, job), None))
            except BaseException as error:  # handed to the trainer's thread, which raises it
                self._results.put((rollout, None, error))
                return

    def submit(self, rollout: int, job: Any) -> None:
        """Sample `rollout` from `job`: now, on the thread, or when `result` asks for it."""
        if self.threaded:
            self._jobs.put((rollout, job))
        else:
            self._inline[rollout] = job

    def result(self, rollout: int) -> Any:
        """The sampled rollout (the next one submitted), waiting for it if need be."""
        if not self.threaded:
            return self.sample(rollout, self._inline.pop(rollout))
        done, result, error = self._results.get()
        if error is not None:
            raise error
        if done != rollout:
            raise RuntimeError(f"rollout {done} came back where rollout {rollout} was expected")
        return result

    def close(self) -> None:
        """Stop the thread after the rollout it is sampling (later ones are dropped)."""
        if self._thread is None:
            return
        while True:  # drop what has not started
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        self._jobs.put(_STOP)
        self._thread.join()
        self._thread = None
