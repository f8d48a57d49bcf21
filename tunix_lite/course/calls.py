"""The learner's functions, called from the grader, run in the worker: plain data both ways.

The tests run in the (trusted) grader; `impl.masked_mean(x, mask)` there is a `Remote` that
sends its arguments to the worker (tunix_lite.course.worker), which runs the learner's function and
sends back the result. Only type-tagged JSON crosses (`tunix_lite.rewards.sandbox`'s format): builtins, and
arrays as a dtype from a fixed list, a shape and raw bytes, decoded with `np.frombuffer` (no pickle,
no object of the learner's making). So the comparisons, the references, the hidden tests and the
score stay in the grader: a frame walk, a patched `numpy.testing` or `compile` in the worker reaches
only the worker, and can change only the values it returns.

Tests also transform the learner's function (`jax.jit(impl.f)`, `jax.grad(lambda x: impl.f(x))`):
under a trace, a `Remote` asks the worker for the output's shapes (`jax.eval_shape` there), computes
the values through `jax.pure_callback` and the gradient through the worker's `jax.vjp` (a custom VJP
rule). The worker runs such a call compiled, as the grader's transformation would have (`jax.jit`,
once per shapes and constants): run op by op, every operation compiles anew for each new shape,
which made a phase's small tests take most of a minute. A function a test passes in (a loss) stays
in the grader: the worker calls it back the same way. A Flax module cannot cross: such a test runs
a public helper in the worker (`inside`); a test of how the learner computes reads the program's
operations (`equations`). Anything else that cannot cross is refused with a TypeError.
"""

from __future__ import annotations

import base64
import functools
import importlib
from collections.abc import Callable

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np

from tunix_lite.rewards.sandbox import decode
from tunix_lite.rewards.sandbox_child import to_plain

DTYPES = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "float16", "bfloat16", "float32", "float64", "complex64",
                    "complex128"))
_KEY_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")
# Errors a learner's function may raise on purpose (a test can expect ValueError); any other type
# comes back as a RuntimeError naming it.
ERRORS = {e.__name__: e for e in (NotImplementedError, ValueError, TypeError, KeyError, IndexError,
                                  ZeroDivisionError, AssertionError, ArithmeticError)}


def encode(value, functions: dict | None = None) -> list:
    """`value` as type-tagged JSON: builtins as they are, numpy and jax arrays (and numpy scalars)
    as ["ndarray" | "jax", [dtype, shape, base64 bytes]], shapes as ["spec", [dtype, shape]]; with
    `functions`, a function (a test's loss) as ["function", id], kept there for the worker to call
    back, jitted: a test that counts traces then counts the learner's, not one per call."""

    def leaf(item) -> list:
        if functions is None or not callable(item) or isinstance(item, (jax.Array, np.ndarray)):
            return _array(item)
        name = f"f{len(functions)}"
        functions[name] = _TracedOnce(item)
        return ["function", name]

    return to_plain(value, leaf=leaf)


def _array(value) -> list:
    if isinstance(value, jax.ShapeDtypeStruct):
        return ["spec", [str(value.dtype), list(value.shape)]]
    if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        return ["key", [str(jax.random.key_impl(value)), _array(jax.random.key_data(value))]]
    kind = "jax" if isinstance(value, jax.Array) else "ndarray"
    array = np.asarray(value)
    if array.dtype.name not in DTYPES:
        raise TypeError(f"cannot send a {type(value).__name__} across the grader's boundary")
    data = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()
    return [kind, [array.dtype.name, list(array.shape), data]]


def decode_value(node, functions: Remote | None = None, *, deadline: float | None = None):
    """The inverse of `encode`: arrays built here from their bytes, a function as the `functions`
    attribute that calls it back; ValueError for anything else (tunix_lite.rewards.sandbox.OverLimits past
    its limits), TimeoutError once `deadline` (time.monotonic()) passes."""

    def leaf(kind: str, value):
        if kind == "function" and functions is not None and type(value) is str:
            return getattr(functions, value)
        return _leaf(kind, value)

    return decode(node, leaf, deadline=deadline)


def _leaf(kind: str, value):
    if kind == "key" and type(value) is list and value[0] in _KEY_IMPLS:  # a typed PRNG key
        return jax.random.wrap_key_data(decode_value(value[1]), impl=value[0])
    dtype, shape, *data = value
    if dtype not in DTYPES or type(shape) is not list or not all(type(n) is int for n in shape):
        raise ValueError(f"not an array: {kind!r}")
    if kind == "spec" and not data:
        return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))
    if kind in ("ndarray", "jax") and len(data) == 1 and type(data[0]) is str:
        array = np.frombuffer(base64.b64decode(data[0]), jnp.dtype(dtype)).reshape(shape).copy()
        return jnp.asarray(array) if kind == "jax" else array
    raise ValueError(f"not an array: {kind!r}")


def raise_error(error: list) -> None:
    """Raise what the learner's function raised, as a builtin exception made here."""
    name, message = (str(part)[:2000] for part in error)
    raise ERRORS.get(name, RuntimeError)(message if name in ERRORS else f"{name}: {message}")


def _traced(args: tuple, kwargs: dict) -> tuple[list, object, list[int]]:
    leaves, tree = jax.tree.flatten((args, kwargs))
    return leaves, tree, [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.core.Tracer)]


class Remote:
    """Functions on the other side of the boundary: `impl.<name>(...)` sends a request through
    `ask(request, serve) -> answer` (dicts) and returns what came back. In the grader they are the
    learner's; in the worker, the functions a test passed in, and `serve` answers the worker's calls
    to those while the grader waits. `deadline()` (time.monotonic()) bounds decoding an answer: the
    grader's, so that an answer made to be slow to decode costs its exercise's time, no more."""

    def __init__(self, ask: Callable[[dict, Callable[[dict], dict]], dict],
                 deadline: Callable[[], float] | None = None):
        self._ask, self._functions, self._deadline = ask, {}, deadline

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args, **kwargs):
            return self._call(name, args, kwargs)

        def program(*args, **kwargs):
            return self._request("equations", name, args, kwargs)

        call.__name__, call.equations = name, program
        return call

    def _serve(self, call: dict) -> dict:
        """The other side calls back a function a test passed in: run, shape or differentiate it,
        nothing else (no `inside` or `equations` on this side)."""
        if call.get("op") not in ("call", "shape", "vjp"):
            return {"error": ["ValueError", "not a call back"]}
        return serve(self._functions, call)

    def inside(self, fn: Callable) -> Callable:
        """See `inside`: the worker imports `fn` by name and runs it on its own `impl`."""
        return lambda *args, **kwargs: self._request("inside", f"{fn.__module__}:{fn.__name__}",
                                                     args, kwargs)

    def _request(self, op: str, name: str, args, kwargs, **extra):
        arguments = encode((tuple(args), dict(kwargs)), self._functions)
        request = {"op": op, "name": name, "args": arguments,
                   **{k: encode(v) for k, v in extra.items()}}
        answer = self._ask(request, self._serve)
        if "error" in answer:
            raise_error(answer["error"])
        return decode_value(answer["value"], deadline=self._deadline and self._deadline())

    def _call(self, name: str, args: tuple, kwargs: dict):
        leaves, tree, traced = _traced(args, kwargs)
        if not traced:
            return self._request("call", name, args, kwargs)
        specs = [jax.ShapeDtypeStruct(leaves[i].shape, leaves[i].dtype) for i in traced]
        out_spec = self._request("shape", name, *_with(leaves, tree, traced, specs))
        inexact = [i for i, s in zip(traced, specs) if jnp.issubdtype(s.dtype, jnp.inexact)]

        def host(*values):  # concrete values of the traced arguments, at run time
            out = self._request("call", name, *_with(leaves, tree, traced, values), traced=True)
            return jax.tree.map(lambda o, s: np.asarray(o, s.dtype), out, out_spec)

        def host_vjp(values, cotangents):
            return [np.asarray(g, leaves[i].dtype) for g, i in zip(
                self._request("vjp", name, *_with(leaves, tree, traced, values), traced=True,
                              wrt=inexact, cotangents=list(cotangents)), inexact)]

        @jax.custom_vjp
        def run(*values):
            return jax.pure_callback(host, out_spec, *values, vmap_method="sequential")

        def forward(*values):
            return run(*values), values

        def backward(values, cotangent):
            cots = [c for c, s in zip(jax.tree.leaves(cotangent), jax.tree.leaves(out_spec))
                    if jnp.issubdtype(s.dtype, jnp.inexact)]
            grads = jax.pure_callback(host_vjp, [specs[traced.index(i)] for i in inexact],
                                      values, cots, vmap_method="sequential")
            by_index = dict(zip(inexact, grads))
            return tuple(by_index.get(i) for i in traced)

        run.defvjp(forward, backward)
        return run(*(leaves[i] for i in traced))


def inside(impl, fn: Callable) -> Callable:
    """`fn(impl, *args, **kwargs)` run where the learner's functions are, for what cannot cross the
    boundary (a Flax module that the learner's function updates in place). In the grader, the worker
    imports `fn`, so it must be a function of a module in this package (tunix_lite.course.graded.*:
    public code, never a hidden test); it takes and returns plain data, and the test judges that."""
    return impl.inside(fn) if isinstance(impl, Remote) else functools.partial(fn, impl)


def equations(fn: Callable, *args, **kwargs) -> list[tuple[str, list[tuple[int, ...]]]]:
    """(primitive, output shapes) of every equation of the program `fn(*args, **kwargs)` traces to,
    those of nested jit/scan/cond bodies too: arrays among the arguments are its inputs, anything
    else a constant. For a test that grades how a function computes (one scan, never A @ B): on the
    learner's function, the worker traces it and answers with this list."""
    program = getattr(fn, "equations", None)
    return program(*args, **kwargs) if program else _equations(fn, args, kwargs)


def _equations(fn: Callable, args: tuple, kwargs: dict) -> list:
    leaves, tree = jax.tree.flatten((args, kwargs))
    arrays = [i for i, leaf in enumerate(leaves) if isinstance(leaf, (jax.Array, np.ndarray))]
    closed = jax.make_jaxpr(lambda *v: _apply(fn, _with(leaves, tree, arrays, v)))(
        *(leaves[i] for i in arrays))

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            yield eqn.primitive.name, [tuple(getattr(v.aval, "shape", ())) for v in eqn.outvars]
            for param in eqn.params.values():
                for inner in param if isinstance(param, (list, tuple)) else [param]:
                    if hasattr(inner, "jaxpr"):
                        yield from walk(getattr(inner.jaxpr, "jaxpr", inner.jaxpr))

    return list(walk(closed.jaxpr))


class _TracedOnce:
    """A test's function called from the worker: traced once per argument shapes, then replayed, so
    the worker's calls (one per example under a sequential vmap) do not count as traces."""

    def __init__(self, fn: Callable):
        self._fn, self._programs = fn, {}

    def __call__(self, *args, **kwargs):
        leaves, tree = jax.tree.flatten((args, kwargs))
        key = (tree, tuple((jnp.shape(leaf), jnp.result_type(leaf)) for leaf in leaves))
        if key not in self._programs:
            closed, out = jax.make_jaxpr(lambda *v: _apply(self._fn, jax.tree.unflatten(tree, v)),
                                         return_shape=True)(*leaves)
            run = jax.jit(jax.extend.core.jaxpr_as_fun(closed))
            self._programs[key] = run, jax.tree.structure(out)
        run, out_tree = self._programs[key]
        return jax.tree.unflatten(out_tree, run(*leaves))


def _replaced(leaves: list, positions: list[int], values) -> list:
    """`leaves` with `values` in place of those at `positions`."""
    full = list(leaves)
    for i, value in zip(positions, values):
        full[i] = value
    return full


def _with(leaves: list, tree, positions: list[int], values) -> tuple[tuple, dict]:
    """(args, kwargs) with `values` in place of the leaves at `positions`."""
    return jax.tree.unflatten(tree, _replaced(leaves, positions, values))


def serve(functions, request: dict, callback: Remote | None = None,
          programs: dict | None = None, modules: dict | None = None) -> dict:
    """Answer one request: run `functions[name]` (a mapping or a module) as asked, return plain
    data. `callback` calls back the functions the request passed in. With `programs` (the worker's,
    kept between requests), a call or gradient that the grader asked for under a trace runs as one
    compiled program, kept there for the next call with the same shapes and constants. `modules`
    holds the modules an `inside` helper may come from (the worker's, imported before it banned
    tunix_lite.course); without it they are imported."""
    try:
        op, name = request["op"], request["name"]
        args, kwargs = decode_value(request["args"], callback)
        if type(name) is not str or name.startswith("_"):
            raise ValueError(f"no function {name!r}")
        if op == "inside":
            module, _, function = name.partition(":")
            if not module.startswith(f"{__package__}.graded."):
                raise ValueError(f"{module} is not a module of graded tests")
            found = modules[module] if modules is not None else importlib.import_module(module)
            fn = functools.partial(getattr(found, function), functions)
            return {"value": encode(fn(*args, **kwargs))}
        fn = functions[name] if isinstance(functions, dict) else getattr(functions, name)
        leaves, tree = jax.tree.flatten((args, kwargs))
        if (op in ("call", "vjp") and programs is not None and "traced" in request
                and decode_value(request["traced"]) is True
                and not any(callable(leaf) for leaf in leaves)):
            return {"value": encode(_compiled(programs, op, name, fn, leaves, tree, request))}
        if op == "call":
            return {"value": encode(fn(*args, **kwargs))}
        if op == "equations":
            return {"value": encode(_equations(fn, args, kwargs))}
        if op == "shape":
            spec = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.ShapeDtypeStruct)]
            out = jax.eval_shape(lambda *v: _apply(fn, _with(leaves, tree, spec, v)),
                                 *(leaves[i] for i in spec))
            return {"value": encode(out)}
        wrt, cotangents = decode_value(request["wrt"]), decode_value(request["cotangents"])
        return {"value": encode(_vjp(fn, leaves, tree, wrt, cotangents))}
    except BaseException as e:  # noqa: BLE001 - sys.exit() in learner code fails its call, not us
        return {"error": [type(e).__name__, str(e)[:2000]]}


def _compiled(programs: dict, op: str, name: str, fn: Callable, leaves: list, tree, request: dict):
    """`fn` called (op "call") or differentiated (op "vjp", at the request's `wrt` leaves) as one
    jitted program of the arguments' arrays, its other leaves constants: compiled once per shapes,
    dtypes and constants, then taken from `programs`."""
    arrays = [i for i, leaf in enumerate(leaves) if isinstance(leaf, (jax.Array, np.ndarray))]
    wrt = tuple(decode_value(request["wrt"])) if op == "vjp" else ()
    key = (op, name, tree, wrt, tuple((jnp.shape(leaf), str(jnp.result_type(leaf))) if i in arrays
                                      else (type(leaf).__name__, repr(leaf))
                                      for i, leaf in enumerate(leaves)))
    if key not in programs:
        def call(*values):
            return _apply(fn, _with(leaves, tree, arrays, values))

        def vjp(values, cotangents):
            return _vjp(fn, _replaced(leaves, arrays, values), tree, wrt, cotangents)

        programs[key] = jax.jit(call if op == "call" else vjp)
    values = [leaves[i] for i in arrays]
    if op == "call":
        return programs[key](*values)
    return programs[key](values, decode_value(request["cotangents"]))


def _vjp(fn: Callable, leaves: list, tree, wrt, cotangents) -> list:
    """The cotangents of `fn`'s inexact outputs pulled back to its argument leaves at `wrt`."""
    def inexact_outputs(*values):
        out = jax.tree.leaves(_apply(fn, _with(leaves, tree, wrt, values)))
        return [o for o in out if jnp.issubdtype(o.dtype, jnp.inexact)]

    _, pullback = jax.vjp(inexact_outputs, *(jnp.asarray(leaves[i]) for i in wrt))
    return list(pullback(list(cotangents)))


def _apply(fn: Callable, args_kwargs: tuple[tuple, dict]):
    args, kwargs = args_kwargs
    return fn(*args, **kwargs)
