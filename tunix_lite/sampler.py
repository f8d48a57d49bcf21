"""Batched generation with a fixed-size KV cache, compiled once per (batch, prompt bucket, length).

Prompts are left-padded to a common length so every row writes its next token into the same cache
slot; a position of -1 marks padding. `prefill` runs the prompt in one pass, then a `lax.while_loop`
samples and decodes one token per step until every row has hit a stop token or the budget.

The sampler is also the RL rollout engine: it always samples from the model's current weights (it
reads them at every call, so training steps, checkpoint restores and adapter changes need no
refresh), and `num_samples=G` draws G completions per prompt from one prefill of that prompt.

On a mesh (`Sampler(..., mesh=mesh)`) the prompts' rows and the KV cache [B, K, S, H] are split over
the data-parallel axes and the cache's kv heads over `tensor` (a single KV head stays whole), by the
same rules as training (tunix_lite.sharding); the samples equal those drawn on one device.

`Sampler(..., weights_dtype="bfloat16")` samples from a bfloat16 copy of the weights, computing in
bfloat16 as `set_training_options(compute_dtype=)` does (norms, attention softmax, logits and
sampling stay float32). The copy is made on the first call after the weights change (one cast per
training update, none per token), and its log-probs differ from float32's (RL recomputes old
log-probs itself). Decode reads every weight once per token, so halving the bytes pays where
matmuls read bfloat16 natively (GPU, TPU); XLA:CPU does not, and there float32 is the faster choice
(benchmarks/RESULTS.md, "bfloat16 sampling weights"; RESULTS_GPU.md).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tunix_lite.chat import stop_ids as chat_stop_ids
from tunix_lite.models.transformer import KVCache, Transformer, set_training_options
from tunix_lite.sharding import (CACHE_BKSH, batch_shards, constrain, model_mesh, shard_batch,
                                 shard_model, to_host, use_mesh)
from tunix_lite.tokenizer import padding_id

_NEG_INF = -jnp.inf


# ----------------------------------------------------------------------------- sampling strategies


def top_k_filter(logits: jax.Array, k: int) -> jax.Array:
    """Keep the k largest logits per row [B, V]; the rest become -inf."""
    kth = jax.lax.top_k(logits, k)[0][..., -1:]
    return jnp.where(logits >= kth, logits, _NEG_INF)


def top_p_filter(logits: jax.Array, p: float | jax.Array) -> jax.Array:
    """Nucleus filter: keep the smallest set of top tokens whose probability mass reaches p
    (p >= 1: all of them)."""
    sorted_logits = jnp.sort(logits, axis=-1)[..., ::-1]
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs  # the top token always has 0 before it
    # p >= 1 keeps every token explicitly: the float32 cumsum can pass 1 before the smallest
    # tail probabilities
    kept = jnp.where((mass_before < p) | (p >= 1), sorted_logits, jnp.inf)
    threshold = jnp.min(kept, axis=-1, keepdims=True)
    return jnp.where(logits >= threshold, logits, _NEG_INF)


def sampling_logits(logits: jax.Array, temperature, *, top_k: int | None = None,
                    top_p=None) -> jax.Array:
    """logits [B, V] -> the logits of the distribution a token is drawn from: divided by the
    temperature, then filtered (-inf outside top-k / the nucleus)."""
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits


def sample_token(rng: jax.Array, logits: jax.Array, temperature, *, greedy: bool,
                 top_k: int | None = None, top_p=None) -> jax.Array:
    """logits [B, V] -> token ids [B]. temperature and top_p are traced; greedy/top_k are static."""
    if greedy:
        return jnp.argmax(logits, axis=-1)
    logits = sampling_logits(logits, temperature, top_k=top_k, top_p=top_p)
    return first_argmax(logits + jax.random.gumbel(rng, logits.shape))  # the Gumbel-max trick


def first_argmax(x: jax.Array) -> jax.Array:
    """jnp.argmax over the last axis (the first index of the maximum), as a max and a min. The draws
    equal `jax.random.categorical`'s (which is argmax(logits + gumbel)), but XLA:CPU runs argmax's
    two-value reduction one element at a time with the Gumbel noise computed inside it, about a
    quarter of a small model's decode step (benchmarks/RESULTS.md, "The decode loop")."""
    iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
    return jnp.min(jnp.where(x == jnp.max(x, axis=-1, keepdims=True), iota, x.shape[-1]), axis=-1)


# ----------------------------------------------------------------------------- the compiled loop


@dataclasses.dataclass(frozen=True)
class Strategy:
    """The static part of a sampling request (changing it recompiles)."""

    greedy: bool
    top_k: int | None
    use_top_p: bool


class DecodeState(NamedTuple):
    """The decode loop's carry, for R rows (prompts x samples) and at most N new tokens."""

    step: jax.Array  # [] tokens generated so far
    logits: jax.Array  # [R, V] the logits the next token is sampled from
    model_state: Any  # what `advance` reads: the KV cache (recomputing: the whole sequence)
    rng: jax.Array
    done: jax.Array  # [R] bool: the row has stopped (a stop token, or its total length)
    tokens: jax.Array  # [R, N] sampled ids, pad after the stop
    logprobs: jax.Array  # [R, N] log p(token) at temperature 1, 0 after the stop
    sampled_logprobs: jax.Array  # [R, N] log q(token), q the distribution drawn from; 0 after
    lengths: jax.Array  # [R] generated tokens, the stop token included


def _decode(advance, logits: jax.Array, model_state, next_pos: jax.Array, rng: jax.Array,
            temperature: jax.Array, top_p: jax.Array, stop_ids: jax.Array,
            total_limit: jax.Array, *, max_new_tokens: int, pad: int, strategy: Strategy):
    """Sample up to N tokens per row in a `lax.while_loop`, until every row is done.

    logits [R, V]: the first new token's; next_pos [R]: its position (each row's prompt length).
    advance(model_state, step, token [R, 1], pos [R, 1]) -> (logits [R, V], model_state): the
    logits of the token after `token`. Returns tokens, logprobs, sampled_logprobs [R, N] and
    lengths [R]: log p at temperature 1 (the policy's), and log q of the distribution each token
    was drawn from (temperature, top-k and top-p applied; 0 when greedy), the behaviour policy an
    importance weight divides by. At temperature 1 with neither filter the two are equal."""
    R, N = logits.shape[0], max_new_tokens
    top_p = top_p if strategy.use_top_p else None

    def token_logprob(logits, token):  # [R, V], [R] -> [R]
        return jnp.take_along_axis(jax.nn.log_softmax(logits), token[:, None], axis=-1)[:, 0]

    def cond(state: DecodeState):
        return (state.step < N) & ~jnp.all(state.done)

    def body(state: DecodeState) -> DecodeState:
        i = state.step
        rng, key = jax.random.split(state.rng)
        token = sample_token(key, state.logits, temperature, greedy=strategy.greedy,
                             top_k=strategy.top_k, top_p=top_p)
        logp = token_logprob(state.logits, token)
        sampled_logp = (jnp.zeros_like(logp) if strategy.greedy else token_logprob(
            sampling_logits(state.logits, temperature, top_k=strategy.top_k, top_p=top_p), token))
        token = jnp.where(state.done, pad, token)
        done = state.done | jnp.isin(token, stop_ids) | (next_pos + i + 1 >= total_limit)
        logits, model_state = advance(state.model_state, i, token[:, None], (next_pos + i)[:, None])

        def record(values, new):  # column i; 0 for rows already stopped
            return values.at[:, i].set(jnp.where(state.done, 0.0, new))

        return DecodeState(step=i + 1, logits=logits, model_state=model_state, rng=rng, done=done,
                           tokens=state.tokens.at[:, i].set(token),
                           logprobs=record(state.logprobs, logp),
                           sampled_logprobs=record(state.sampled_logprobs, sampled_logp),
                           lengths=state.lengths + ~state.done)

    init = DecodeState(step=jnp.zeros((), jnp.int32), logits=logits, model_state=model_state,
                       rng=rng, done=jnp.zeros((R,), bool), tokens=jnp.full((R, N), pad, jnp.int32),
                       logprobs=jnp.zeros((R, N), jnp.float32),
                       sampled_logprobs=jnp.zeros((R, N), jnp.float32),
                       lengths=jnp.zeros((R,), jnp.int32))
    final = jax.lax.while_loop(cond, body, init)
    return final.tokens, final.logprobs, final.sampled_logprobs, final.lengths


def _repeat(x: jax.Array, G: int) -> jax.Array:
    """[B, ...] -> [B*G, ...]: each prompt's row once per sample."""
    return jnp.repeat(x, G, axis=0) if G > 1 else x


def _generate(graphdef, state, prompt: jax.Array, positions: jax.Array, rng: jax.Array,
              temperature: jax.Array, top_p: jax.Array, stop_ids: jax.Array,
              total_limit: jax.Array, *, max_new_tokens: int, num_samples: int, pad: int,
              strategy: Strategy):
    """prompt/positions [B, P] (left-padded, position -1 = pad) -> tokens, logprobs,
    sampled_logprobs [B*G, N], lengths [B*G] (row b*G + g is sample g of prompt b). A row also
    stops once its prompt plus completion reach total_limit. One prefill per prompt fills the KV
    cache; each step then decodes one token against it."""
    # a copy inside the trace: the caller's model is untouched
    model: Transformer = nnx.merge(graphdef, state)
    model.eval()  # no dropout while sampling, whatever mode the caller's model is in
    G = num_samples

    def place(cache: KVCache) -> KVCache:  # on a mesh: rows over data x fsdp, kv heads over tensor
        k, v = (tuple(constrain(x, CACHE_BKSH) for x in kv) for kv in (cache.k, cache.v))
        return cache._replace(k=k, v=v, positions=constrain(cache.positions, ("batch", "sequence")))

    def advance(cache: KVCache, step, token, pos):
        logits, cache = model.decode(token, pos, cache)
        return logits[:, -1], cache

    B, P = prompt.shape
    cache = place(KVCache.init(model.config, B, P + max_new_tokens))
    logits, cache = model.decode(prompt, positions, cache, last_only=True)
    # one prefill per prompt; its KV entries are copied to the prompt's G sample rows
    repeated = jax.tree.map(lambda x: _repeat(x, G), cache._replace(end=None))
    cache = place(repeated._replace(end=cache.end))
    return _decode(advance, _repeat(logits[:, -1], G), cache, _repeat(positions, G)[:, -1] + 1, rng,
                   temperature, top_p, stop_ids, total_limit, max_new_tokens=max_new_tokens,
                   pad=pad, strategy=strategy)


def _generate_recomputing(graphdef, state, prompt: jax.Array, positions: jax.Array,
                          rng: jax.Array, temperature: jax.Array, top_p: jax.Array,
                          stop_ids: jax.Array, total_limit: jax.Array, *, max_new_tokens: int,
                          num_samples: int, pad: int, strategy: Strategy):
    """`_generate` without a KV cache: every step runs the model over the whole sequence, P + N
    slots. The baseline the cache must equal (tests), and the work it saves."""
    model: Transformer = nnx.merge(graphdef, state)
    model.eval()
    N = max_new_tokens
    prompt, positions = _repeat(prompt, num_samples), _repeat(positions, num_samples)
    B, P = prompt.shape
    sequence = jnp.concatenate([prompt, jnp.full((B, N), pad, prompt.dtype)], axis=1)  # [B, P + N]
    sequence_pos = jnp.concatenate([positions, jnp.full((B, N), -1, positions.dtype)], axis=1)

    def advance(buffers, step, token, pos):
        sequence, sequence_pos = buffers
        sequence = jax.lax.dynamic_update_slice(sequence, token, (0, P + step))
        sequence_pos = jax.lax.dynamic_update_slice(sequence_pos, pos, (0, P + step))
        logits = model(sequence, sequence_pos)  # [B, P + N, V]
        next_logits = jax.lax.dynamic_index_in_dim(logits, P + step, axis=1, keepdims=False)
        return next_logits, (sequence, sequence_pos)

    logits = model(sequence, sequence_pos)[:, P - 1]
    return _decode(advance, logits, (sequence, sequence_pos), positions[:, -1] + 1, rng,
                   temperature, top_p, stop_ids, total_limit, max_new_tokens=N, pad=pad,
                   strategy=strategy)


_STATIC = ("graphdef", "max_new_tokens", "num_samples", "pad", "strategy")
_generate_jit = jax.jit(_generate, static_argnames=_STATIC)
_generate_recomputing_jit = jax.jit(_generate_recomputing, static_argnames=_STATIC)


# ------------------------------------------------------------------------- the user-facing sampler


@dataclasses.dataclass
class GenerateOutput:
    """Rows are prompt-major: with G samples per prompt, row b*G + g is sample g of prompt b."""

    texts: list[str]
    tokens: np.ndarray  # [R, N] generated ids, pad after the stop token
    logprobs: np.ndarray  # [R, N] log p(token) under the model at temperature 1, 0 after the stop
    lengths: np.ndarray  # [R] generated tokens per row, the stop token included
    prompt_tokens: np.ndarray  # [R, P] each row's prompt, left-padded
    prompt_lengths: np.ndarray  # [R] each row's prompt length without the padding
    num_samples: int = 1
    # [R, N] log q(token) under the distribution it was drawn from (temperature, top-k, top-p
    # applied; 0 when greedy): the behaviour policy of RL's importance weights. None: as logprobs
    sampled_logprobs: np.ndarray | None = None

    def __post_init__(self):
        if self.sampled_logprobs is None:  # an engine that reports temperature-1 log-probs only
            self.sampled_logprobs = self.logprobs

    @property
    def mask(self) -> np.ndarray:
        """[R, N] 1.0 on generated tokens (the stop token included), 0.0 after: the completion
        mask."""
        return (np.arange(self.tokens.shape[1]) < self.lengths[:, None]).astype(np.float32)

    @property
    def prompts(self) -> list[np.ndarray]:
        """Each row's prompt ids without the left padding."""
        P = self.prompt_tokens.shape[1]
        return [row[P - n:] for row, n in zip(self.prompt_tokens, self.prompt_lengths)]


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int,
             multiple: int = 32) -> tuple[np.ndarray, np.ndarray]:
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


def check_sampling(max_new_tokens, num_samples, temperature, top_k, top_p) -> None:
    """One line naming the bad value, before anything compiles (NaN would otherwise sample garbage
    silently)."""
    problems = []
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        problems.append(f"max_new_tokens={max_new_tokens!r} (need an integer >= 1)")
    if not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        problems.append(f"num_samples={num_samples!r} (need an integer >= 1)")
    if not (np.isfinite(temperature) and temperature >= 0):
        problems.append(f"temperature={temperature} (need a finite number >= 0; 0 is greedy)")
    if top_k is not None and (not isinstance(top_k, (int, np.integer)) or top_k < 1):
        problems.append(f"top_k={top_k!r} (need an integer >= 1, or None)")
    if top_p is not None and not (np.isfinite(top_p) and 0 < top_p <= 1):
        problems.append(f"top_p={top_p} (need 0 < top_p <= 1, or None)")
    if problems:
        raise ValueError("invalid sampling settings: " + "; ".join(problems))


class Sampler:
    """Generate from a model + tokenizer:

        sampler = Sampler(model, tokenizer)
        out = sampler.generate(["The capital of France is"], max_new_tokens=20)
        out.texts[0]

    Stop ids default to the tokenizer's eos and its chat template's end-of-turn
    (`tunix_lite.chat.stop_ids`); padding uses `tunix_lite.tokenizer.padding_id`. The model is read
    at every call, never cached.
    mesh: sample on this mesh; the model is placed on it by the sharding rules (in place, as a
    Trainer does). Default: the mesh the model is on (a trainer's model), else one device. Rows are
    padded to a multiple of the mesh's data-parallel shards.
    weights_dtype: "bfloat16" samples from a bfloat16 copy of the model's weight matrices, computing
    in bfloat16 (see the module docstring); None: the weights as they are.
    """

    def __init__(self, model: Transformer, tokenizer, *, stop_ids: Sequence[int] | None = None,
                 bucket: int = 32, mesh: jax.sharding.Mesh | None = None,
                 weights_dtype: str | None = None):
        self.model, self.tokenizer, self.bucket = model, tokenizer, bucket
        if mesh is not None:
            shard_model(model, mesh)
        self.mesh = mesh  # None: whichever mesh the model is on when generate() runs
        self.stop_ids = tuple(stop_ids) if stop_ids is not None else tuple(chat_stop_ids(tokenizer))
        self.pad_id = padding_id(tokenizer)
        self.weights_dtype = None if weights_dtype is None else jnp.dtype(weights_dtype)
        if self.weights_dtype is not None and not jnp.issubdtype(self.weights_dtype, jnp.floating):
            raise ValueError(f"weights_dtype={weights_dtype!r}: need a floating dtype such as "
                             "'bfloat16', or None")
        # the last copy: (weak refs to the source leaves, graphdef, cast state)
        self._cast: tuple | None = None
        self.casts = 0  # how many copies were made (one per change of the weights)

    def weights(self) -> tuple[nnx.GraphDef, nnx.State]:
        """(graphdef, state) to sample from: the model as it is now, or its weights_dtype copy. The
        copy is remade only when a weight array was replaced since the last call (jax arrays are
        immutable, so identity says it)."""
        graphdef, state = nnx.split(self.model)
        if self.weights_dtype is None:
            return graphdef, state
        leaves = jax.tree.leaves(state)
        if self._cast is not None and len(leaves) == len(self._cast[0]) and all(
                a is ref() for a, ref in zip(leaves, self._cast[0])):
            return self._cast[1], self._cast[2]
        dtype = self.weights_dtype

        def cast_matrix(x):  # matrices only: norm scales are a few KB, and norms compute in float32
            return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) and x.ndim >= 2 else x

        cast = jax.tree.map(cast_matrix, state)
        # a throwaway view, to give the copy a graphdef computing in `dtype`
        model = nnx.merge(graphdef, cast)
        set_training_options(model, compute_dtype=dtype.name)
        graphdef = nnx.split(model)[0]
        # weak references: the arrays an update replaced are freed, not kept alive by this check
        self._cast, self.casts = ([weakref.ref(x) for x in leaves], graphdef, cast), self.casts + 1
        return graphdef, cast

    def encode(self, prompts: Sequence[str] | Sequence[Sequence[int]],
               add_bos: bool = True) -> list[list[int]]:
        return [list(p) if not isinstance(p, str) else self.tokenizer.encode(p, add_bos=add_bos)
                for p in prompts]

    def generate(self, prompts: Sequence[str] | Sequence[Sequence[int]], max_new_tokens: int = 64,
                 *, num_samples: int = 1, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float | None = None, seed: int = 0, use_cache: bool = True,
                 max_total_tokens: int | None = None) -> GenerateOutput:
        """Text prompts get a BOS; token-id prompts (e.g. from `format_chat`) are used as given.
        num_samples=G returns G completions per prompt (rows b*G + g), sampled after one shared
        prefill.
        max_total_tokens: also stop each row once its prompt plus completion hold this many tokens,
        so a batch of prompts of different lengths fits rows of one length (RL's training rows);
        None: no such limit.
        use_cache=False: no KV cache, the whole sequence recomputed at every step (the same samples,
        N times the work): the baseline the cache is checked against."""
        if isinstance(prompts, str):
            prompts = [prompts]
        check_sampling(max_new_tokens, num_samples, temperature, top_k, top_p)
        ids = self.encode(prompts)
        tokens, positions = left_pad(ids, self.pad_id, self.bucket)
        longest = max(len(p) for p in ids)
        limit = self.model.config.max_seq_len
        if longest + max_new_tokens > limit:
            raise ValueError(f"a prompt of {longest} tokens plus max_new_tokens={max_new_tokens} "
                             f"exceeds the model's context of {limit} tokens; shorten the prompt "
                             "or generate fewer tokens")
        if max_total_tokens is not None and max_total_tokens <= longest:
            raise ValueError(f"max_total_tokens={max_total_tokens} leaves no room after a prompt "
                             f"of {longest} tokens")
        strategy = Strategy(greedy=temperature == 0.0, top_k=top_k, use_top_p=top_p is not None)
        generate = _generate_jit if use_cache else _generate_recomputing_jit
        graphdef, state = self.weights()  # the weights as they are now
        rows = {"tokens": tokens, "positions": positions}
        mesh = self.mesh if self.mesh is not None else model_mesh(self.model)
        if mesh is not None:  # whole rows per shard: repeat the last prompt, drop its samples after
            extra = -len(tokens) % batch_shards(mesh)
            rows = shard_batch({k: np.concatenate([v, np.repeat(v[-1:], extra, axis=0)])
                                for k, v in rows.items()}, mesh)
        with use_mesh(mesh):
            out_tokens, logprobs, sampled_logprobs, lengths = generate(
                graphdef, state, jnp.asarray(rows["tokens"]), jnp.asarray(rows["positions"]),
                jax.random.key(seed), jnp.float32(temperature or 1.0), jnp.float32(top_p or 1.0),
                jnp.asarray(self.stop_ids, jnp.int32),
                jnp.int32(max_total_tokens or np.iinfo(np.int32).max),
                max_new_tokens=int(max_new_tokens), num_samples=int(num_samples), pad=self.pad_id,
                strategy=strategy)
        R = len(tokens) * int(num_samples)
        out_tokens, logprobs, sampled_logprobs, lengths = (
            to_host(x)[:R] for x in (out_tokens, logprobs, sampled_logprobs, lengths))
        texts = [self.tokenizer.decode([t for t in row[:n] if t not in self.stop_ids])
                 for row, n in zip(out_tokens, lengths)]
        G = int(num_samples)
        return GenerateOutput(texts, out_tokens, logprobs, lengths, np.repeat(tokens, G, axis=0),
                              np.repeat([len(p) for p in ids], G), G, sampled_logprobs)
