"""Graded tests for phase 1 (solutions/01_jax_nnx_exercises.ipynb): JAX and Flax NNX fundamentals.

Every input comes from `rng` (a fresh seed per grading run); references are numpy in float64 or closed forms.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from tunix_lite.course.calls import inside
from tunix_lite.course.graded import graded

__all__ = [
    "test_masked_mean_matches_numpy", "test_masked_mean_under_jit", "test_masked_mean_empty_selection_is_zero",
    "test_masked_mean_gradient", "test_clip_by_global_norm_matches_numpy", "test_clip_by_global_norm_keeps_direction",
    "test_clip_by_global_norm_jit_and_nnx_state", "test_pad_to_bucket_values", "test_pad_to_bucket_few_shapes",
    "test_pad_to_bucket_too_long", "test_per_example_grad_norms_match_a_loop",
    "test_per_example_grad_norms_one_trace", "test_per_example_grad_norms_invariants",
    "test_train_step_matches_closed_form", "test_train_step_no_decay_is_plain_mse",
    "test_train_step_trains_only_wrt", "test_train_step_reduces_loss",
]

HINTS = {
    "masked_mean": [
        "Under jit the mask is a tracer: x[mask] would have a shape that depends on data, so it cannot compile. "
        "Think of the mean as a sum divided by a count, both of which have fixed shapes.",
        "sum(x * mask) / count(mask), over the given axis (keepdims=False). When nothing is selected the count is "
        "0: guard the division so the answer is 0.0, not NaN, and so is its gradient.",
        "m = mask.astype(x.dtype); jnp.sum(x * m, axis) / jnp.maximum(jnp.sum(m, axis), 1.0)",
    ],
    "clip_by_global_norm": [
        "The global norm treats every array of the pytree as one long vector. Clipping rescales the whole tree "
        "by one number, so the update keeps its direction.",
        "norm = sqrt(sum over leaves of sum(leaf**2)); the factor is min(1, max_norm / norm), guarded for a zero "
        "tree; jax.tree.map applies it to every leaf. No Python `if` on the norm: it is a tracer under jit.",
        "leaves = jax.tree.leaves(tree); norm = jnp.sqrt(sum(jnp.sum(l * l) for l in leaves)); "
        "factor = jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-12)); "
        "return jax.tree.map(lambda l: l * factor, tree), norm",
    ],
    "pad_to_bucket": [
        "Few distinct shapes mean few compiles: every batch must be padded to one of the bucket lengths, the "
        "smallest one that fits the longest sequence.",
        "Start from an array full of pad_id of shape (len(seqs), bucket) and a False mask; copy each sequence "
        "into the left of its row. Raise ValueError only when no bucket fits.",
        "fits = [b for b in sorted(buckets) if b >= longest]; tokens = np.full((len(seqs), fits[0]), pad_id, "
        "np.int32); tokens[row, :len(seq)] = seq; mask[row, :len(seq)] = True",
    ],
    "per_example_grad_norms": [
        "jax.grad of a one-example loss gives one example's gradient; jax.vmap maps that function over the "
        "batch axis of xs and ys while params stay shared. Then reduce each gradient pytree to one number.",
        "grads = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(params, xs, ys): every leaf gains a leading "
        "[B] axis. Sum the squares of each leaf over all but that axis, add the leaves, take the square root.",
        "sq = [jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1) for g in jax.tree.leaves(grads)]; "
        "return jnp.sqrt(sum(sq))",
    ],
    "train_step": [
        "The loss is a function of the model; the penalty belongs inside it, so its gradient flows too. "
        "Only the weight matrices (variables named `kernel`) are penalised, and only what the optimizer was "
        "built for (`optimizer.wrt`) is updated.",
        "In loss_fn(model): mse plus weight_decay * the sum of squares of every `kernel` "
        "(nnx.state(model, nnx.PathContains('kernel')) selects them). Differentiate with "
        "nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, optimizer.wrt)), update, return the loss.",
        "kernels = jax.tree.leaves(nnx.state(model, nnx.PathContains('kernel'))); loss = "
        "jnp.mean((model(x) - y) ** 2) + weight_decay * sum(jnp.sum(k ** 2) for k in kernels)",
    ],
}

FORBIDDEN = {
    "clip_by_global_norm": ("optax.clip_by_global_norm", "optax.global_norm", "optax.tree_utils", "optax.tree",
                            "optax.transforms", "optax._src"),
    "pad_to_bucket": ("tunix_lite.sampler.left_pad", "tunix_lite.data"),
    "train_step": ("optax.add_decayed_weights", "optax.adamw", "tunix_lite.training"),
}


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31))


def _ragged_mask(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A prefix of each last-axis row is selected, of random length (some rows empty)."""
    lengths = rng.integers(0, shape[-1] + 1, size=shape[:-1])
    return np.arange(shape[-1]) < lengths[..., None]


def _masked_mean_ref(x: np.ndarray, mask: np.ndarray, axis) -> np.ndarray:
    m = mask.astype(np.float64)
    total, count = np.sum(x * m, axis=axis), np.sum(m, axis=axis)
    return np.where(count > 0, total / np.maximum(count, 1.0), 0.0)


@graded("masked_mean", reference=True)
def test_masked_mean_matches_numpy(impl, rng):
    """matches a numpy reference over all positions and along an axis (bool and 0/1 masks)"""
    for shape, axis in [((int(rng.integers(2, 6)), int(rng.integers(3, 9))), None), ((3, 5, 6), -1), ((4, 7), 0),
                        ((2, 3, 8), 1)]:
        x = rng.normal(size=shape).astype(np.float32)
        mask = _ragged_mask(rng, shape)
        mask.flat[0] = True  # at least one position everywhere
        for m in (mask, mask.astype(np.float32)):
            got = np.asarray(impl.masked_mean(jnp.asarray(x), jnp.asarray(m), axis=axis))
            want = _masked_mean_ref(x.astype(np.float64), mask, axis)
            assert got.shape == want.shape, f"axis={axis}: shape {got.shape}, expected {want.shape}"
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"shape {shape}, axis={axis}")


@graded("masked_mean")
def test_masked_mean_under_jit(impl, rng):
    """works inside jax.jit with a mask that changes between calls"""
    for axis in (None, -1):
        fn = jax.jit(functools.partial(impl.masked_mean, axis=axis))
        x = rng.normal(size=(6, 9)).astype(np.float32)
        for _ in range(3):
            mask = _ragged_mask(rng, (6, 9))
            np.testing.assert_allclose(np.asarray(fn(x, mask)), _masked_mean_ref(x.astype(np.float64), mask, axis),
                                       rtol=1e-5, atol=1e-6)


@graded("masked_mean")
def test_masked_mean_empty_selection_is_zero(impl, rng):
    """returns 0.0 (not NaN) where nothing is selected: the whole array, or one row along the axis"""
    x = jnp.asarray(rng.normal(size=(3, 4)), jnp.float32)
    got = float(jax.jit(impl.masked_mean)(x, jnp.zeros((3, 4), bool)))
    assert got == 0.0, f"expected 0.0 for an all-False mask, got {got}"
    mask = np.ones((3, 4), bool)
    mask[int(rng.integers(3))] = False
    rows = np.asarray(jax.jit(functools.partial(impl.masked_mean, axis=-1))(x, mask))
    np.testing.assert_allclose(rows, _masked_mean_ref(np.asarray(x, np.float64), mask, -1), rtol=1e-5, atol=1e-6,
                               err_msg="a row with nothing selected has mean 0.0")


@graded("masked_mean")
def test_masked_mean_gradient(impl, rng):
    """d sum(row means) / dx = mask / (the row's count): zero on masked-out positions, no NaN on empty rows"""
    x = rng.normal(size=(4, 8)).astype(np.float32)
    mask = _ragged_mask(rng, (4, 8))
    mask[0] = False
    grad = jax.grad(lambda x: jnp.sum(impl.masked_mean(x, mask, axis=-1)))(jnp.asarray(x))
    want = mask / np.maximum(mask.sum(-1, keepdims=True), 1)
    np.testing.assert_allclose(np.asarray(grad), want, rtol=1e-5, atol=1e-7)


def _random_tree(rng: np.random.Generator, scale: float = 1.0):
    def arr(*shape):
        return jnp.asarray((scale * rng.normal(size=shape)).astype(np.float32))

    return {"w": arr(3, 4), "layers": [arr(5), (arr(2, 2), arr(1))], "head": {"b": arr(int(rng.integers(1, 9)))}}


def _norm_ref(tree) -> float:
    return float(np.sqrt(sum(np.sum(np.asarray(leaf, np.float64) ** 2) for leaf in jax.tree.leaves(tree))))


def _check_clip(got, tree, max_norm, where):
    assert isinstance(got, tuple) and len(got) == 2, f"{where}: return (clipped_tree, norm)"
    clipped, norm = got
    assert jax.tree.structure(clipped) == jax.tree.structure(tree), f"{where}: the clipped tree has another structure"
    want_norm = _norm_ref(tree)
    np.testing.assert_allclose(float(norm), want_norm, rtol=1e-5, err_msg=f"{where}: the global norm before clipping")
    factor = min(1.0, max_norm / want_norm) if want_norm > 0 else 1.0
    for a, b in zip(jax.tree.leaves(clipped), jax.tree.leaves(tree)):
        np.testing.assert_allclose(np.asarray(a), factor * np.asarray(b, np.float64), rtol=1e-5, atol=1e-7,
                                   err_msg=f"{where}: every leaf scaled by min(1, max_norm / norm) = {factor:.4g}")


@graded("clip_by_global_norm", reference=True)
def test_clip_by_global_norm_matches_numpy(impl, rng):
    """returns the global norm and the tree scaled by min(1, max_norm / norm), for norms above and below"""
    for scale in (0.1, 3.0):
        tree = _random_tree(rng, scale)
        max_norm = float(rng.uniform(0.5, 2.0))
        _check_clip(impl.clip_by_global_norm(tree, max_norm), tree, max_norm, f"norm {_norm_ref(tree):.3g}")


@graded("clip_by_global_norm")
def test_clip_by_global_norm_keeps_direction(impl, rng):
    """the clipped tree has norm min(norm, max_norm) and points the same way; a zero tree stays zero"""
    tree = _random_tree(rng, 2.0)
    max_norm = float(rng.uniform(0.2, 1.0))
    clipped, _ = impl.clip_by_global_norm(tree, max_norm)
    np.testing.assert_allclose(_norm_ref(clipped), min(_norm_ref(tree), max_norm), rtol=1e-5)
    ratios = np.concatenate([np.ravel(np.asarray(a) / np.asarray(b)) for a, b in
                             zip(jax.tree.leaves(clipped), jax.tree.leaves(tree))])
    np.testing.assert_allclose(ratios, ratios[0], rtol=1e-4, err_msg="one factor for every number in the tree")
    zeros = jax.tree.map(jnp.zeros_like, tree)
    clipped, norm = impl.clip_by_global_norm(zeros, max_norm)
    assert float(norm) == 0.0 and all(np.all(np.asarray(a) == 0) for a in jax.tree.leaves(clipped)), \
        "a zero tree must stay zero (no NaN from 0 / 0)"


@graded("clip_by_global_norm")
def test_clip_by_global_norm_jit_and_nnx_state(impl, rng):
    """works under jit with max_norm traced, and on the parameter state of an NNX module"""
    sizes = [int(rng.integers(2, 6)), 3]
    params = _params(_model(sizes, _seed(rng)))
    for max_norm in (0.5 * _norm_ref(params), 2.0 * _norm_ref(params)):
        got = inside(impl, clip_state)(sizes, params, max_norm)
        _check_clip(got, params, max_norm, f"NNX state, max_norm {max_norm:.3g}")


def clip_state(impl, sizes: list[int], params: dict, max_norm: float):
    """Where the learner's function runs (calls.inside: an nnx.State cannot cross to the grader):
    jit(impl.clip_by_global_norm) on `_model(sizes)`'s parameter state holding `params`; the clipped
    state as a pure dict (or as it came back, when it is no state) and the norm."""
    state = nnx.state(_model(sizes, 0), nnx.Param)
    nnx.replace_by_pure_dict(state, params)
    clipped, norm = jax.jit(impl.clip_by_global_norm)(state, jnp.float32(max_norm))
    same = jax.tree.structure(clipped) == jax.tree.structure(state)
    return (nnx.to_pure_dict(clipped) if same else clipped), norm


BUCKETS = (8, 16, 32, 64)


def _random_batch(rng: np.random.Generator, max_len: int) -> list[list[int]]:
    lengths = rng.integers(1, max_len + 1, size=rng.integers(2, 6))
    lengths[rng.integers(len(lengths))] = max_len
    return [rng.integers(1, 100, size=n).tolist() for n in lengths]


@graded("pad_to_bucket", reference=True)
def test_pad_to_bucket_values(impl, rng):
    """right-pads to the smallest bucket that fits, with a matching mask"""
    pad_id = int(rng.integers(-9, 0))
    for max_len in (int(rng.integers(1, 9)), 8, 9, int(rng.integers(33, 65))):
        seqs = _random_batch(rng, max_len)
        tokens, mask = (np.asarray(a) for a in impl.pad_to_bucket(seqs, buckets=BUCKETS, pad_id=pad_id))
        width = min(b for b in BUCKETS if b >= max_len)
        assert tokens.shape == mask.shape == (len(seqs), width), f"shape {tokens.shape}, expected {(len(seqs), width)}"
        assert tokens.dtype == np.int32 and mask.dtype == bool, f"dtypes {tokens.dtype}, {mask.dtype}: int32, bool"
        for row, seq in enumerate(seqs):
            np.testing.assert_array_equal(tokens[row, :len(seq)], seq)
            np.testing.assert_array_equal(tokens[row, len(seq):], pad_id)
            np.testing.assert_array_equal(mask[row], np.arange(width) < len(seq))


@graded("pad_to_bucket")
def test_pad_to_bucket_few_shapes(impl, rng):
    """fifty ragged batches produce only bucket widths, unsorted buckets included"""
    buckets = tuple(rng.permutation(BUCKETS).tolist())
    widths = {np.asarray(impl.pad_to_bucket(_random_batch(rng, int(rng.integers(1, 65))), buckets=buckets)[0]).shape[1]
              for _ in range(50)}
    assert widths <= set(BUCKETS), f"widths {sorted(widths)} are not all buckets {BUCKETS}"


@graded("pad_to_bucket")
def test_pad_to_bucket_too_long(impl, rng):
    """a sequence as long as the largest bucket fits; one token more raises ValueError"""
    fits = impl.pad_to_bucket([rng.integers(1, 9, size=64).tolist()], buckets=BUCKETS)
    assert np.asarray(fits[0]).shape == (1, 64), "a 64-token sequence fits the 64 bucket exactly"
    try:
        impl.pad_to_bucket([[1] * 65, [2, 3]], buckets=BUCKETS)
    except ValueError:
        return
    raise AssertionError("expected ValueError for a 65-token sequence with buckets up to 64")


def _mlp_params(rng: np.random.Generator, din: int, hidden: int):
    return {"hidden": {"w": jnp.asarray(rng.normal(size=(din, hidden)), jnp.float32) * din ** -0.5,
                       "b": jnp.asarray(rng.normal(size=hidden), jnp.float32)},
            "out": jnp.asarray(rng.normal(size=hidden), jnp.float32)}


def _mlp_loss(params, x, y):
    """One example: x [D], y scalar."""
    h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    return (h @ params["out"] - y) ** 2


def _grad_norm_loop(loss_fn, params, xs, ys) -> np.ndarray:
    grad = jax.jit(jax.grad(loss_fn))
    return np.array([_norm_ref(grad(params, x, y)) for x, y in zip(xs, ys)])


@graded("per_example_grad_norms", reference=True)
def test_per_example_grad_norms_match_a_loop(impl, rng):
    """equal the norm of jax.grad on each example alone, for an MLP's nested params and a linear model"""
    batch, din = int(rng.integers(3, 9)), int(rng.integers(2, 6))
    params = _mlp_params(rng, din, int(rng.integers(3, 7)))
    xs = jnp.asarray(rng.normal(size=(batch, din)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=batch), jnp.float32)
    got = np.asarray(jax.jit(impl.per_example_grad_norms, static_argnums=0)(_mlp_loss, params, xs, ys))
    assert got.shape == (batch,), f"shape {got.shape}, expected ({batch},): one norm per example"
    np.testing.assert_allclose(got, _grad_norm_loop(_mlp_loss, params, xs, ys), rtol=1e-4, atol=1e-6)

    def linear(w, x, y):
        return 0.5 * (x @ w - y) ** 2

    w = jnp.asarray(rng.normal(size=din), jnp.float32)
    got = np.asarray(impl.per_example_grad_norms(linear, w, xs, ys))  # closed form: |x.w - y| * |x|
    want = np.abs(np.asarray(xs) @ np.asarray(w) - np.asarray(ys)) * np.linalg.norm(np.asarray(xs), axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg="a bare array as params")


@graded("per_example_grad_norms")
def test_per_example_grad_norms_one_trace(impl, rng):
    """vectorised: the loss function is traced once for the whole batch, not once per example"""
    calls = []

    def counting_loss(params, x, y):
        calls.append(1)
        return _mlp_loss(params, x, y)

    batch = int(rng.integers(6, 12))
    params = _mlp_params(rng, 3, 4)
    xs = jnp.asarray(rng.normal(size=(batch, 3)), jnp.float32)
    ys = jnp.asarray(rng.normal(size=batch), jnp.float32)
    got = np.asarray(jax.jit(impl.per_example_grad_norms, static_argnums=0)(counting_loss, params, xs, ys))
    assert len(calls) <= 2, f"the loss ran {len(calls)} times for {batch} examples: use jax.vmap, not a Python loop"
    np.testing.assert_allclose(got, _grad_norm_loop(_mlp_loss, params, xs, ys), rtol=1e-4, atol=1e-6)


@graded("per_example_grad_norms")
def test_per_example_grad_norms_invariants(impl, rng):
    """scaling the loss by c scales every norm by |c|; a perfectly fit example has norm 0"""
    params = _mlp_params(rng, 3, 5)
    xs = jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)
    ys = np.asarray(rng.normal(size=5), np.float32)
    ys[2] = float(jnp.tanh(xs[2] @ params["hidden"]["w"] + params["hidden"]["b"]) @ params["out"])  # zero residual
    base = np.asarray(impl.per_example_grad_norms(_mlp_loss, params, xs, jnp.asarray(ys)))
    c = float(rng.choice([-3.0, 0.5, 2.0]))
    scaled = np.asarray(impl.per_example_grad_norms(lambda p, x, y: c * _mlp_loss(p, x, y), params, xs,
                                                    jnp.asarray(ys)))
    np.testing.assert_allclose(scaled, abs(c) * base, rtol=1e-4, atol=1e-6)
    assert base[2] < 1e-4 * max(base.max(), 1e-6), f"an example the model fits exactly has norm {base[2]:.3g}, not 0"


def _regression(rng: np.random.Generator, n: int = 16, din: int = 3, dout: int = 2):
    x = rng.normal(size=(n, din)).astype(np.float32)
    y = rng.normal(size=(n, dout)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y)


def _closed_form_step(x, y, w, b, lr, decay):
    """(loss, new w, new b) of one SGD step on mean((x w + b - y)^2) + decay * |w|^2 (the bias is not decayed)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    err = x @ w + b - y  # [N, O]
    scale = 2.0 / err.size  # d/dpred of mean((pred - y)^2)
    loss = np.mean(err ** 2) + decay * np.sum(w ** 2)
    return loss, w - lr * (scale * x.T @ err + 2 * decay * w), b - lr * scale * err.sum(0)


def _model(sizes: list[int], seed: int):
    """One Linear for two sizes; Linear, relu, Linear for three."""
    rngs = nnx.Rngs(seed)
    layers = [nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes, sizes[1:])]
    return layers[0] if len(layers) == 1 else nnx.Sequential(layers[0], nnx.relu, layers[1])


def _params(model) -> dict:
    return jax.tree.map(np.asarray, nnx.to_pure_dict(nnx.state(model, nnx.Param)))


def train(impl, sizes: list[int], params: dict, optimizer: str, lr: float, only_last: bool, x, y,
          decays: list[float], jit: bool) -> tuple[list[float], dict]:
    """Where the learner's train_step runs (calls.inside: it updates a module in place, which cannot
    cross to the grader): `_model(sizes)` holding `params`, one impl.train_step per decay; (the
    losses, the parameters after). The test judges both against what it sent."""
    model = _model(sizes, 0)
    state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(model, state)
    wrt = nnx.All(nnx.Param, nnx.PathContains(2)) if only_last else nnx.Param
    opt = nnx.Optimizer(model, {"sgd": optax.sgd, "adam": optax.adam}[optimizer](lr), wrt=wrt)
    step = nnx.jit(impl.train_step) if jit else impl.train_step
    losses = [float(step(model, opt, x, y, jnp.float32(d) if jit else d)) for d in decays]
    return losses, _params(model)


@graded("train_step", reference=True)
def test_train_step_matches_closed_form(impl, rng):
    """one SGD step equals the closed form of MSE + weight_decay * |kernel|^2, and returns that loss before the step"""
    x, y = _regression(rng)
    before = _params(_model([3, 2], _seed(rng)))
    w, b = np.asarray(before["kernel"], np.float64), np.asarray(before["bias"], np.float64)
    lr, decay = float(rng.uniform(0.05, 0.2)), float(rng.uniform(0.05, 0.5))
    (loss,), after = inside(impl, train)([3, 2], before, "sgd", lr, False, x, y, [decay], False)
    want_loss, want_w, want_b = _closed_form_step(x, y, w, b, lr, decay)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, err_msg="the returned loss: MSE + penalty, before the step")
    np.testing.assert_allclose(np.asarray(after["kernel"]), want_w, rtol=1e-5, atol=1e-6, err_msg="kernel")
    np.testing.assert_allclose(np.asarray(after["bias"]), want_b, rtol=1e-5, atol=1e-6,
                               err_msg="bias (not decayed)")


@graded("train_step")
def test_train_step_no_decay_is_plain_mse(impl, rng):
    """with weight_decay = 0 it is the plain MSE step, under jit with a traced weight_decay"""
    x, y = _regression(rng, din=4, dout=3)
    before = _params(_model([4, 3], _seed(rng)))
    w, b = np.asarray(before["kernel"], np.float64), np.asarray(before["bias"], np.float64)
    (loss,), after = inside(impl, train)([4, 3], before, "sgd", 0.1, False, x, y, [0.0], True)
    want_loss, want_w, want_b = _closed_form_step(x, y, w, b, 0.1, 0.0)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(after["kernel"]), want_w, rtol=1e-5, atol=1e-6)


@graded("train_step")
def test_train_step_trains_only_wrt(impl, rng):
    """an optimizer built for the last layer only: the first layer stays exactly as it was, the last takes the
    closed-form step, and the loss still penalises both kernels"""
    x, y = _regression(rng, din=4, dout=1)
    before = _params(_model([4, 8, 1], _seed(rng)))
    first, last = before["layers"][0], before["layers"][2]
    w1 = np.asarray(first["kernel"], np.float64)
    w2, b2 = np.asarray(last["kernel"], np.float64), np.asarray(last["bias"], np.float64)
    h = np.maximum(np.asarray(x, np.float64) @ w1 + first["bias"], 0.0)  # [N, 8], what the last layer sees
    lr, decay = 0.1, float(rng.uniform(0.05, 0.5))
    (loss,), after = inside(impl, train)([4, 8, 1], before, "sgd", lr, True, x, y, [decay], False)
    for key in ("kernel", "bias"):
        np.testing.assert_array_equal(first[key], np.asarray(after["layers"][0][key]),
                                      err_msg="a layer the optimizer does not train changed")
    want_loss, want_w2, want_b2 = _closed_form_step(h, y, w2, b2, lr, decay)
    np.testing.assert_allclose(loss, want_loss + decay * np.sum(w1 ** 2), rtol=1e-5,
                               err_msg="the loss penalises every kernel, trained or not")
    np.testing.assert_allclose(np.asarray(after["layers"][2]["kernel"]), want_w2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(after["layers"][2]["bias"]), want_b2, rtol=1e-5, atol=1e-6)


@graded("train_step")
def test_train_step_reduces_loss(impl, rng):
    """twenty Adam steps on a two-layer MLP lower the loss and update every parameter"""
    x, y = _regression(rng, din=4, dout=1)
    before = _params(_model([4, 8, 1], _seed(rng)))
    losses, after = inside(impl, train)([4, 8, 1], before, "adam", 1e-2, False, x, y, [1e-3] * 20, True)
    assert losses[-1] < 0.9 * losses[0], f"loss went {losses[0]:.4f} -> {losses[-1]:.4f}"
    pairs = zip(jax.tree_util.tree_leaves_with_path(before), jax.tree.leaves(after))
    unchanged = [jax.tree_util.keystr(path) for (path, a), b in pairs if np.array_equal(a, np.asarray(b))]
    assert not unchanged, f"parameters not updated: {unchanged}"
