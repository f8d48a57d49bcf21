"""The rollout engine seam: where an RL trainer gets its completions, and where its new weights go.

    engine = SamplerEngine(model, tokenizer, prompt_len=P)
    for each rollout:
        engine.sync_weights(model)                                        # push the weights of the last update
        out = engine.generate(prompt_ids, max_new_tokens=N, num_samples=G, temperature=1.0, seed=s)
        ...                                                                # rewards, advantages, optimizer steps

An engine is anything with these two methods (`RolloutEngine`). The trainer only ever reads a `GenerateOutput`
(token ids, sampled log-probs, lengths, the prompts as padded), so a different engine changes where tokens are
made, never the loss.

**The built-in engine** is `tunix_lite.sampler.Sampler`, in one of two placements (`sharding.WeightSync`):
- colocated (the default): on the trainer's own model, the same devices, the same arrays. It reads the model's
  current weights at every call, so `sync_weights` has nothing to copy.
- split (`mesh=` a rollout mesh on devices the trainer does not use; GRPO's `rollout_mesh:`): on a copy of the
  model laid out on that mesh by the sharding rules. `sync_weights` sends the trained variables (`wrt`: only the
  adapters with LoRA, whose base both sides hold) from the trainer's layout to the rollout's, in bounded chunks.
All prompts are left-padded to one length P and every call asks for the same number of prompts, so one rollout
program is compiled per run.

**An external engine (vLLM, or SGLang-JAX on TPU)** runs the policy in its own server or process group, usually
on devices of its own: a rollout mesh beside the trainer's mesh (e.g. 4 chips sampling, 4 training), or the same
chips time-shared. What changes, and what an implementation of this interface has to do:

- `generate`: send the prompt ids and sampling settings to the engine; return its token ids and per-token
  log-probs as a `GenerateOutput` (prompt-major rows, the same padding conventions). Its log-probs come from a
  different kernel (often bf16, paged attention), so with more than one optimizer step per rollout the trainer
  recomputes old log-probs itself (`rollouts.score`) instead of trusting the engine's.
- `sync_weights(model)`: after each update, move the new weights onto the engine's devices in the engine's
  layout: `jax.device_put(state, rollout_shardings)` between two meshes of one JAX program (what google-tunix's
  `rl/reshard.py` does for its vanilla and SGLang-JAX rollouts), or, for vLLM in another process, a copy through
  host memory or a collective into its `load_weights`. With LoRA only the adapters move (kilobytes to
  megabytes) and the engine keeps the base. Cast to the engine's dtype here, once per update, not per call
  (the built-in engine's `weights_dtype="bfloat16"` casts on the first call after an update).
- The sampled tokens are then off-policy by the staleness of the engine's weights: zero steps when syncing after
  every update (what `SamplerEngine` gives), one or more when rollout and training overlap asynchronously.

Neither vLLM nor SGLang-JAX is a dependency of tunix_lite, and no stand-in pretends to be one: on a machine with
them installed, an engine is a ~50-line class implementing this protocol.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import jax
from flax import nnx

from tunix_lite.sampler import GenerateOutput, Sampler
from tunix_lite.sharding import WeightSync


class RolloutEngine(Protocol):
    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, num_samples: int,
                 temperature: float, top_k: int | None, top_p: float | None, seed: int,
                 max_total_tokens: int | None) -> GenerateOutput:
        """num_samples completions of each prompt (token ids), rows b * num_samples + g; a row also stops once its
        prompt plus completion hold max_total_tokens (None: no such limit)."""

    def sync_weights(self, model: nnx.Module) -> None:
        """Make the next `generate` sample from `model`'s current weights."""


class SamplerEngine:
    """The built-in engine: the KV-cache sampler, prompts left-padded to `prompt_len`, on the trainer's own model
    (mesh None) or on a copy of it on `mesh`, kept in step by sending the `wrt` variables at each `sync_weights`
    (`self.weights.last`: what the last sync moved). weights_dtype: "float32" (or None) samples the weights as they
    are; "bfloat16" samples a bfloat16 copy, remade after each update (`Sampler`'s weights_dtype)."""

    def __init__(self, model: nnx.Module, tokenizer, *, prompt_len: int, mesh: jax.sharding.Mesh | None = None,
                 wrt=nnx.Param, weights_dtype: str | None = None):
        self.model = model
        self.weights = WeightSync(model, mesh, wrt=wrt)  # colocated: .model is `model` itself and nothing moves
        self.sampler = Sampler(self.weights.model, tokenizer, bucket=prompt_len, mesh=mesh,
                               weights_dtype=None if weights_dtype == "float32" else weights_dtype)

    def generate(self, prompts, *, max_new_tokens, num_samples, temperature=1.0, top_k=None, top_p=None,
                 seed=0, max_total_tokens=None) -> GenerateOutput:
        return self.sampler.generate(prompts, max_new_tokens, num_samples=num_samples, temperature=temperature,
                                     top_k=top_k, top_p=top_p, seed=seed, max_total_tokens=max_total_tokens)

    def sync_weights(self, model: nnx.Module) -> None:
        if model is not self.model:
            raise ValueError("SamplerEngine samples the model it was built on; build a new engine for another one")
        self.weights()  # colocated: nothing to copy, the sampler reads the model's live weights at every call
