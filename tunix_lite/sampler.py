"""Batched generation with a fixed-size KV cache, compiled once per (batch, prompt bucket, length).

Prompts are left-padded to a common length so every row writes its next token into the same cache
slot; a position of -1 marks padding. `prefill` runs the prompt in one pass, then a `lax.while_loop`
samples and decodes one token per step until every row has hit a stop token or the budget.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.models.transformer import KVCache, Transformer

_NEG_INF = -jnp.inf


# ----------------------------------------------------------------------------- sampling strategies


def top_k_filter(logits: jax.Array, k: int) -> jax.Array:
    """Keep the k largest logits per row [B, V]; the rest become -inf."""
    kth = jax.lax.top_k(logits, k)[0][..., -1:]
    return jnp.where(logits >= kth, logits, _NEG_INF)


def top_p_filter(logits: jax.Array, p: float | jax.Array) -> jax.Array:
    """Nucleus filter: keep the smallest set of top tokens whose probability mass reaches p."""
    sorted_logits = jnp.sort(logits, axis=-1)[..., ::-1]
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs  # the top token always has 0 before it
    kept = jnp.where(mass_before < p, sorted_logits, jnp.inf)
    threshold = jnp.min(kept, axis=-1, keepdims=True)
    return jnp.where(logits >= threshold, logits, _NEG_INF)


def sample_token(rng: jax.Array, logits: jax.Array, temperature, *, greedy: bool,
                 top_k: int | None = None, top_p=None) -> jax.Array:
    """logits [B, V] -> token ids [B]. temperature and top_p are traced; greedy/top_k are static."""
    if greedy:
        return jnp.argmax(logits, axis=-1)
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return jax.random.categorical(rng, logits, axis=-1)


# ----------------------------------------------------------------------------- the compiled loop


@dataclasses.dataclass(frozen=True)
class Strategy:
    """The static part of a sampling request (changing it recompiles)."""

    greedy: bool
    top_k: int | None
    use_top_p: bool
    use_cache: bool


def _generate(graphdef, state, prompt: jax.Array, positions: jax.Array, rng: jax.Array,
              temperature: jax.Array, top_p: jax.Array, stop_ids: jax.Array, *,
              max_new_tokens: int, strategy: Strategy):
    """prompt/positions [B, P] (left-padded, position -1 = pad) -> tokens, logprobs [B, N], lengths [B]."""
    model: Transformer = nnx.merge(graphdef, state)
    B, P = prompt.shape
    N = max_new_tokens
    pad = model.config.pad_id

    if strategy.use_cache:
        cache = KVCache.init(model.config, B, P + N)
        logits, cache = model.decode(prompt, positions, cache, last_only=True)
        step_state = cache
    else:  # recompute the whole sequence every step: the baseline the cache is measured against
        buffer = jnp.concatenate([prompt, jnp.full((B, N), pad, prompt.dtype)], axis=1)
        buffer_pos = jnp.concatenate([positions, jnp.full((B, N), -1, positions.dtype)], axis=1)
        logits = model(buffer, buffer_pos)[:, :P]
        step_state = (buffer, buffer_pos)
    next_pos = positions[:, -1] + 1  # [B]

    def cond(carry):
        i, done = carry[0], carry[4]
        return (i < N) & ~jnp.all(done)

    def body(carry):
        i, last_logits, step_state, rng, done, tokens, logprobs, lengths = carry
        rng, key = jax.random.split(rng)
        token = sample_token(key, last_logits, temperature, greedy=strategy.greedy, top_k=strategy.top_k,
                             top_p=top_p if strategy.use_top_p else None)
        logp = jnp.take_along_axis(jax.nn.log_softmax(last_logits), token[:, None], axis=-1)[:, 0]
        token = jnp.where(done, pad, token)
        tokens = tokens.at[:, i].set(token)
        logprobs = logprobs.at[:, i].set(jnp.where(done, 0.0, logp))
        lengths = lengths + ~done
        done = done | jnp.isin(token, stop_ids)
        pos = (next_pos + i)[:, None]
        if strategy.use_cache:
            new_logits, step_state = model.decode(token[:, None], pos, step_state)
            new_logits = new_logits[:, -1]
        else:
            buffer, buffer_pos = step_state
            buffer = jax.lax.dynamic_update_slice(buffer, token[:, None], (0, P + i))
            buffer_pos = jax.lax.dynamic_update_slice(buffer_pos, pos, (0, P + i))
            full = model(buffer, buffer_pos)
            new_logits = jax.lax.dynamic_index_in_dim(full, P + i, axis=1, keepdims=False)
            step_state = (buffer, buffer_pos)
        return i + 1, new_logits, step_state, rng, done, tokens, logprobs, lengths

    init = (jnp.zeros((), jnp.int32), logits[:, -1], step_state, rng, jnp.zeros((B,), bool),
            jnp.full((B, N), pad, jnp.int32), jnp.zeros((B, N), jnp.float32), jnp.zeros((B,), jnp.int32))
    _, _, _, _, _, tokens, logprobs, lengths = jax.lax.while_loop(cond, body, init)
    return tokens, logprobs, lengths


# ----------------------------------------------------------------------------- the user-facing sampler


@dataclasses.dataclass
class GenerateOutput:
    texts: list[str]
    tokens: np.ndarray  # [B, N] generated ids, pad after the stop token
    logprobs: np.ndarray  # [B, N] log p(token) under the model at temperature 1, 0 after the stop
    lengths: np.ndarray  # [B] generated tokens per row, the stop token included
    prompt_tokens: np.ndarray  # [B, P] the left-padded prompts


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int, multiple: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Token lists -> (tokens [B, P], positions [B, P]) left-padded to a multiple of `multiple`
    (bucketing keeps the number of compiled shapes small). Padding gets position -1."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    longest = max(len(p) for p in prompts)
    P = -(-longest // multiple) * multiple
    tokens = np.full((len(prompts), P), pad_id, np.int32)
    positions = np.full((len(prompts), P), -1, np.int32)
    for row, ids in enumerate(prompts):
        tokens[row, P - len(ids):] = ids
        positions[row, P - len(ids):] = np.arange(len(ids))
    return tokens, positions


class Sampler:
    """Generate from a model + tokenizer:

        sampler = Sampler(model, tokenizer)
        out = sampler.generate(["The capital of France is"], max_new_tokens=20)
        out.texts[0]
    """

    def __init__(self, model: Transformer, tokenizer, *, stop_ids: Sequence[int] | None = None,
                 bucket: int = 32):
        self.model, self.tokenizer, self.bucket = model, tokenizer, bucket
        self.graphdef, self.state = nnx.split(model)
        self.stop_ids = tuple(stop_ids) if stop_ids is not None else default_stop_ids(tokenizer)
        self._compiled = jax.jit(functools.partial(_generate, self.graphdef),
                                 static_argnames=("max_new_tokens", "strategy"))

    def refresh(self):
        """Pick up parameter changes after training the model in place."""
        self.state = nnx.state(self.model)

    def encode(self, prompts: Sequence[str] | Sequence[Sequence[int]], add_bos: bool = True) -> list[list[int]]:
        return [list(p) if not isinstance(p, str) else self.tokenizer.encode(p, add_bos=add_bos) for p in prompts]

    def generate(self, prompts: Sequence[str] | Sequence[Sequence[int]], max_new_tokens: int = 64, *,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int = 0, use_cache: bool = True) -> GenerateOutput:
        """Text prompts get a BOS; token-id prompts (e.g. from `format_chat`) are used as given."""
        if isinstance(prompts, str):
            prompts = [prompts]
        if temperature < 0 or (top_p is not None and not 0 < top_p <= 1) or (top_k is not None and top_k < 1):
            raise ValueError(f"need temperature >= 0, 0 < top_p <= 1, top_k >= 1; got "
                             f"temperature={temperature}, top_p={top_p}, top_k={top_k}")
        ids = self.encode(prompts)
        tokens, positions = left_pad(ids, self.model.config.pad_id, self.bucket)
        longest = max(len(p) for p in ids)
        limit = self.model.config.max_seq_len
        if longest + max_new_tokens > limit:
            raise ValueError(f"a prompt of {longest} tokens plus max_new_tokens={max_new_tokens} exceeds the "
                             f"model's context of {limit} tokens; shorten the prompt or generate fewer tokens")
        strategy = Strategy(greedy=temperature == 0.0, top_k=top_k, use_top_p=top_p is not None,
                            use_cache=use_cache)
        out_tokens, logprobs, lengths = self._compiled(
            self.state, jnp.asarray(tokens), jnp.asarray(positions), jax.random.key(seed),
            jnp.float32(temperature or 1.0), jnp.float32(top_p or 1.0), jnp.asarray(self.stop_ids, jnp.int32),
            max_new_tokens=max_new_tokens, strategy=strategy)
        out_tokens, logprobs, lengths = map(np.asarray, (out_tokens, logprobs, lengths))
        texts = [self.tokenizer.decode([t for t in row[:n] if t not in self.stop_ids])
                 for row, n in zip(out_tokens, lengths)]
        return GenerateOutput(texts, out_tokens, logprobs, lengths, tokens)


def default_stop_ids(tokenizer) -> tuple[int, ...]:
    """EOS, plus Gemma's <end_of_turn> when the vocabulary has it (chat models end turns with it)."""
    stops = [tokenizer.eos_id]
    try:
        stops.append(tokenizer.piece_to_id("<end_of_turn>"))
    except (KeyError, ValueError):
        pass
    return tuple(stops)
