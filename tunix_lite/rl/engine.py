"""The rollout engine seam: where an RL trainer gets its completions, and where its new weights go.

    engine = SamplerEngine(model, tokenizer, prompt_len=P)
    for each rollout:
        engine.sync_weights(model)                     # push the weights of the last update
        out = engine.generate(prompt_ids, max_new_tokens=N, num_samples=G, temperature=1.0, seed=s)
        ...                                            # rewards, advantages, optimizer steps

An engine is anything with these two methods (`RolloutEngine`). The trainer only ever reads a
`GenerateOutput` (token ids, sampled log-probs, lengths, the prompts as padded), so a different
engine changes where tokens are made, never the loss.

**The built-in engine** is `tunix_lite.sampler.Sampler`, in one of two placements (`WeightSync`):
- colocated (the default): on the trainer's own model, the same devices, the same arrays. It reads
  the model's current weights at every call, so `sync_weights` has nothing to copy.
- split (`mesh=` a rollout mesh on devices the trainer does not use; the RL configs'
  `rollout_mesh:`): on a copy of the model laid out on that mesh by the sharding rules.
  `sync_weights` sends the trained variables (`wrt`: only the adapters with LoRA, whose base both
  sides hold) from the trainer's layout to the rollout's, in bounded chunks (`reshard`).
All prompts are left-padded to one length P and every call asks for the same number of prompts, so
one rollout program is compiled per run.

**An external engine (vLLM, or SGLang-JAX on TPU)** runs the policy in its own server or process
group, usually on devices of its own: a rollout mesh beside the trainer's mesh (e.g. 4 chips
sampling, 4 training), or the same chips time-shared. What changes, and what an implementation of
this interface has to do:

- `generate`: send the prompt ids and sampling settings to the engine; return its token ids and
  per-token log-probs as a `GenerateOutput` (prompt-major rows, the same padding conventions). Its
  log-probs come from a different kernel (often bf16, paged attention), so with more than one
  optimizer step per rollout the trainer recomputes old log-probs itself (`rollouts.score`) instead
  of trusting the engine's.
- `sync_weights(model)`: after each update, move the new weights onto the engine's devices in the
  engine's layout: `jax.device_put(state, rollout_shardings)` between two meshes of one JAX program
  (what google-tunix's `rl/reshard.py` does for its vanilla and SGLang-JAX rollouts), or, for vLLM
  in another process, a copy through host memory or a collective into its `load_weights`. With LoRA
  only the adapters move (kilobytes to megabytes) and the engine keeps the base. Cast to the
  engine's dtype here, once per update, not per call (the built-in engine's
  `weights_dtype="bfloat16"` casts on the first call after an update).
- The sampled tokens are then off-policy by the staleness of the engine's weights: zero steps when
  syncing after every update, one or more when rollout and training overlap asynchronously (the
  RL configs' `max_staleness:`; `tunix_lite.rl.asynchronous`). Then `sync_weights` is called with
  a snapshot of the trainer's model taken at an earlier update (`nnx.clone`: the same arrays,
  which later updates replace rather than change), and the engine samples that.
- Report the log-probs of the distribution each token was drawn from (`sampled_logprobs`: after
  temperature and top-k / top-p) if the engine can: GRPO measures the sampler-trainer mismatch on
  them and can correct for it (`rollout_correction`, `tunix_lite.rl.losses.correction_weights`).

Neither vLLM nor SGLang-JAX is a dependency of tunix_lite, and no stand-in pretends to be one: on a
machine with them installed, an engine is a ~50-line class implementing this protocol.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import jax
from flax import nnx

from tunix_lite.sampler import GenerateOutput, Sampler
from tunix_lite.sharding import param_shardings, place


class RolloutEngine(Protocol):
    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, num_samples: int,
                 temperature: float, top_k: int | None, top_p: float | None, seed: int,
                 max_total_tokens: int | None) -> GenerateOutput:
        """num_samples completions of each prompt (token ids), in rows b * num_samples + g.

        A row also stops once its prompt plus completion hold max_total_tokens (None: no limit)."""

    def sync_weights(self, model: nnx.Module) -> None:
        """Make the next `generate` sample from `model`'s current weights.

        `model`: the trainer's model, or a snapshot of it taken at an earlier update."""


class SamplerEngine:
    """The built-in engine: the KV-cache sampler, prompts left-padded to `prompt_len`, on the
    trainer's own model (mesh None) or on a copy of it on `mesh`, kept in step by sending the `wrt`
    variables at each `sync_weights` (`self.weights.last`: what the last sync moved). Colocated,
    `sync_weights(snapshot)` points the sampler at the snapshot: nothing is copied.
    weights_dtype: "float32" (or None) samples the weights as they are; "bfloat16" samples a
    bfloat16 copy, remade after each update (`Sampler`'s weights_dtype)."""

    def __init__(self, model: nnx.Module, tokenizer, *, prompt_len: int,
                 mesh: jax.sharding.Mesh | None = None, wrt=nnx.Param,
                 weights_dtype: str | None = None):
        self.model = model
        # read once, here: an asynchronous producer syncs on its own thread, while the trainer
        # may be inside a jitted update of `model` (reading its graph then races that update)
        self.graphdef = nnx.graphdef(model)
        # colocated: .model is `model` itself and nothing moves
        self.weights = WeightSync(model, mesh, wrt=wrt)
        self.sampler = Sampler(self.weights.model, tokenizer, bucket=prompt_len, mesh=mesh,
                               weights_dtype=None if weights_dtype == "float32" else weights_dtype)

    def generate(self, prompts, *, max_new_tokens, num_samples, temperature=1.0, top_k=None,
                 top_p=None, seed=0, max_total_tokens=None) -> GenerateOutput:
        return self.sampler.generate(prompts, max_new_tokens, num_samples=num_samples,
                                     temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                     max_total_tokens=max_total_tokens)

    def sync_weights(self, model: nnx.Module) -> None:
        if model is not self.model and nnx.graphdef(model) != self.graphdef:
            raise ValueError("SamplerEngine samples the model it was built on (or a snapshot of "
                             "it, nnx.clone); build a new engine for another one")
        self.weights(model)
        self.sampler.model = self.weights.model  # colocated: `model` itself, read where it is


# -------------------------------------------------------------------- moving weights between meshes


def _nbytes(x) -> int:
    return x.size * x.dtype.itemsize


def reshard(tree, shardings, *, max_bytes: int | None = None):
    """Copy every array of `tree` to the sharding at the same place in `shardings` (same tree
    structure, e.g. a State of NamedShardings on another mesh). Arrays move in chunks of at most
    `max_bytes` (one array larger than that moves alone), each chunk finished before the next
    starts, so the memory in flight stays bounded.
    Returns (new tree, {"bytes": moved, "chunks": n, "largest_chunk": bytes})."""
    leaves, treedef = jax.tree.flatten(tree)
    targets = treedef.flatten_up_to(shardings)
    out, chunk, chunk_bytes, stats = [], [], 0, {"bytes": 0, "chunks": 0, "largest_chunk": 0}

    def finish():
        nonlocal chunk, chunk_bytes
        if chunk:
            jax.block_until_ready(chunk)
            stats["chunks"] += 1
            stats["largest_chunk"] = max(stats["largest_chunk"], chunk_bytes)
        chunk, chunk_bytes = [], 0

    for x, sharding in zip(leaves, targets):
        if max_bytes is not None and chunk and chunk_bytes + _nbytes(x) > max_bytes:
            finish()
        moved = place(x, sharding)
        out.append(moved)
        chunk.append(moved)
        chunk_bytes += _nbytes(x)
        stats["bytes"] += _nbytes(x)
    finish()
    return jax.tree.unflatten(treedef, out), stats


class WeightSync:
    """A rollout engine's copy of the trainer's model, kept in step after each update.

    Split (`mesh` given): the rollout model is a copy laid out by the rules on `mesh` (e.g. 4 of 8
    devices while the trainer has the other 4), made once in chunks; each call sends only the `wrt`
    variables (the adapters with LoRA, whose frozen base both sides already hold; every parameter
    for full fine-tuning), resharded from the trainer's layout to the rollout's in chunks of at most
    `max_bytes`.
    Colocated (`mesh=None`): the rollout model IS the trainer's model (one set of weights, read live
    by the sampler), or the snapshot of it a call names; a call sends nothing.

        sync = WeightSync(trainer.model, rollout_mesh, wrt=trainer.wrt)
        sampler = Sampler(sync.model, tokenizer, mesh=rollout_mesh)
        ... trainer.step(batch); sync(); sampler.generate(...)
    """

    def __init__(self, source: nnx.Module, mesh: jax.sharding.Mesh | None = None, *, wrt=nnx.Param,
                 max_bytes: int | None = 256 * 2**20):
        self.source, self.mesh, self.wrt, self.max_bytes = source, mesh, wrt, max_bytes
        self.last = {"bytes": 0, "chunks": 0, "largest_chunk": 0}
        if mesh is None:
            self.model = source
            return
        # the module tree; every array is replaced by its copy on `mesh` below
        self.model = nnx.clone(source)
        self.last = self._send(...)

    def _send(self, filter, source_model: nnx.Module | None = None) -> dict:
        targets = param_shardings(self.model, self.mesh, filter)
        source_model = self.source if source_model is None else source_model
        source = {".".join(map(str, path)): var.get_value()
                  for path, var in nnx.to_flat_state(nnx.state(source_model, filter))}
        moved, stats = reshard(source, targets, max_bytes=self.max_bytes)
        flat = nnx.to_flat_state(nnx.state(self.model, filter))
        for path, var in flat:
            var.set_value(moved[".".join(map(str, path))])
        nnx.update(self.model, nnx.from_flat_state(flat))
        return stats

    def __call__(self, source: nnx.Module | None = None) -> dict:
        """Send the trained variables of `source` to the rollout copy: the trainer's model as it is
        now (None), or a snapshot of it taken at an earlier update (`nnx.clone`, sharing its
        arrays: asynchronous rollouts). Colocated, the rollout model becomes `source` itself.
        Returns {"bytes", "chunks", "largest_chunk"} of what moved."""
        if self.mesh is None:
            self.model = self.source if source is None else source
        else:
            self.last = self._send(self.wrt, source)
        return self.last
