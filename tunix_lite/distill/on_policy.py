"""On-policy distillation (GKD): the student learns on its own samples, scored token by token by the
teacher.

Agarwal et al. 2024 ("On-Policy Distillation of Language Models: Learning from Self-Generated
Mistakes", algorithm 1): with probability lambda a step's sequences are sampled from the current
student, otherwise they come from the fixed dataset; either way the loss is a divergence between the
teacher's and the student's next-token distributions at every generated (or completion) token.
Training on its own samples shows the student the states its mistakes lead to, which a fixed dataset
never contains (the train/inference mismatch of offline KD).

Departures: lambda is drawn per step (seeded by the step, so a resumed run makes the same choices),
not per batch element; prompts of sampled steps are drawn from the training prompts with a seeded
generator; samples are drawn at temperature 1 from the full vocabulary, as in the paper.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from tunix_lite.data.batches import Batches
from tunix_lite.data.rollouts import rollout_rows
from tunix_lite.sampler import Sampler


class OnPolicyBatches:
    """Step s's batch: with probability `ratio` the student's own completions of `batch_size`
    training prompts (rows from `rollout_rows`, weights on the generated tokens, labelled 0: no CE
    term on them), otherwise the next dataset batch (labelled 1). Both kinds have the same keys and
    shapes, so the step compiles once.

    prompts: every training example's prompt as token ids (chat-formatted, ending where the reply
    starts).
    """

    def __init__(self, offline: Batches, sampler: Sampler, prompts: Sequence[Sequence[int]], *,
                 ratio: float, max_new_tokens: int, seq_len: int, seed: int = 0):
        longest = max(len(p) for p in prompts)
        if longest + max_new_tokens - 1 > seq_len:
            raise ValueError(f"a prompt of {longest} tokens and {max_new_tokens} sampled tokens "
                             f"need seq_len >= {longest + max_new_tokens - 1}, got {seq_len}")
        self.offline, self.sampler, self.prompts = offline, sampler, [list(p) for p in prompts]
        self.ratio, self.max_new_tokens, self.seq_len, self.seed = (
            ratio, max_new_tokens, seq_len, seed)

    def is_on_policy(self, step: int) -> bool:
        return bool(np.random.default_rng([self.seed, step, 1]).random() < self.ratio)

    def sampled(self, step: int) -> dict[str, np.ndarray]:
        """The student's completions of batch_size prompts drawn for this step, as training rows."""
        rng = np.random.default_rng([self.seed, step, 2])
        chosen = rng.choice(len(self.prompts), size=self.offline.batch_size, replace=False)
        out = self.sampler.generate([self.prompts[i] for i in chosen], self.max_new_tokens,
                                    temperature=1.0, seed=int(rng.integers(2**31)))
        rows = rollout_rows(out, self.seq_len, self.sampler.pad_id)
        return rows | {"labelled": np.zeros(len(chosen), np.float32)}

    def stream(self, start: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """Batches from step `start` on (each step's kind and samples depend only on the seed, the
        step and the student's weights at that step, so a resumed run continues exactly)."""
        for step, batch in enumerate(self.offline.stream(start), start):
            if self.is_on_policy(step):
                yield self.sampled(step)
            else:
                yield batch | {"labelled": np.ones(len(batch["inputs"]), np.float32)}
