"""Graded tests for phase 8 (solutions/08_scaling_exercises.ipynb): scaling arithmetic a learner can do on paper.

Bytes per chip under a (data, fsdp, tensor) mesh, the bytes each device sends per step, the largest batch that
fits, and choosing a mesh. The learner's functions take plain numbers and return plain numbers; references are
the library's own sharding rules (`tunix_lite.sharding.logical_to_spec`) and the closed forms stated in the
notebook, on random problems drawn from `rng` afresh per grading run, so a hard-coded answer fails.
"""

from __future__ import annotations

import math

from jax.sharding import AbstractMesh

from tunix_lite.course.graded import graded

__all__ = [
    "test_bytes_per_chip_matches_the_rules", "test_bytes_per_chip_one_device_holds_everything",
    "test_bytes_per_chip_keeps_indivisible_dimensions_whole", "test_collective_bytes_matches_the_ring_model",
    "test_collective_bytes_one_axis_at_a_time", "test_max_batch_matches_a_search",
    "test_max_batch_edges", "test_choose_mesh_matches_an_exhaustive_search", "test_choose_mesh_scenarios",
]

HINTS = {
    "bytes_per_chip": [
        "Each dimension is looked up in the rules table: its mesh axes multiply into the number of ways it is "
        "split, if that number divides it, and for a fused heads dimension only if it also divides the number of "
        "heads. Axes that a dimension does not use leave it replicated. Sum over the arrays.",
        "For each (shape, axes): per dimension, k = product of mesh[a] for a in MESH_AXES.get(name, ()) (1 for "
        "None); the chip holds dim // k if dim % k == 0 and (name not in heads or heads[name] % k == 0), else dim. "
        "Multiply the per-dimension sizes, times bytes_per_element, and add up.",
        "k = math.prod(mesh[a] for a in MESH_AXES.get(name, ())); split = dim % k == 0 and (heads or {}).get(name, "
        "k) % k == 0; elements *= dim // k if split else dim; total += elements * bytes_per_element",
    ],
    "collective_bytes": [
        "Each axis contributes on its own and they add up. Data and FSDP move weight-sized arrays (a data replica "
        "only its shard of the gradient); tensor parallelism moves activations, which scale with the rows a "
        "device holds, not with the weights. A ring over n devices moves (n - 1)/n of the array per pass.",
        "Ring costs for S bytes over n devices: all-gather and reduce-scatter (n-1)/n·S, all-reduce 2(n-1)/n·S. "
        "data: one all-reduce of W/(f·t); fsdp: three passes of (f-1)/f over W/t; tensor: 4 all-reduces per layer "
        "of (batch/(d·f))·seq·embed·act_bytes.",
        "data = 2 * (d - 1) / d * W / (f * t); fsdp = 3 * (f - 1) / f * W / t; act = batch / (d * f) * seq * "
        "embed * act_bytes; tensor = 4 * layers * 2 * (t - 1) / t * act; return data + fsdp + tensor",
    ],
    "max_batch": [
        "Memory per device is a fixed part (the model state, split over fsdp × tensor) plus a part per row (split "
        "over tensor). What is left after the fixed part buys whole rows per device; the global batch is that "
        "times the number of data-parallel shards.",
        "room = hbm - 16·params/(f·t); rows per device = floor(room / (bytes_per_row / t)), 0 if room <= 0; the "
        "batch is rows × d·f (a multiple of d·f by construction).",
        "room = hbm_bytes - 16 * params / (f * t); rows = math.floor(room / (bytes_per_row / t)) if room > 0 "
        "else 0; return rows * d * f",
    ],
    "choose_mesh": [
        "Try every way to factor the devices into data × fsdp × tensor, drop those that break a rule (whole heads, "
        "whole rows) or do not fit, and keep the cheapest in collective bytes; ties are broken as stated.",
        "for d, f with d·f dividing n: t = n / (d·f); skip if heads % t or batch % (d·f), or if "
        "16·params/(f·t) + batch/(d·f)·bytes_per_row/t > hbm; compare the key (collective_bytes(mesh, 4·params, "
        "layers, batch, seq, embed), t, d) and keep the smallest; None if nothing is left.",
        "key = (collective_bytes(mesh, 4 * params, layers, batch, seq, embed), t, d); if best is None or key < "
        "best[0]: best = (key, mesh); ... return None if best is None else best[1]",
    ],
}

FORBIDDEN = {  # the library's planner and sharding rules compute these
    "bytes_per_chip": ("tunix_lite.planner", "tunix_lite.sharding", "jax.sharding"),
    "collective_bytes": ("tunix_lite.planner", "tunix_lite.sharding"),
    "max_batch": ("tunix_lite.planner", "tunix_lite.sharding"),
    "choose_mesh": ("tunix_lite.planner", "tunix_lite.sharding"),
}

RULES = {"embed": ("fsdp",), "vocab": ("tensor",), "heads": ("tensor",), "kv_heads": ("tensor",),
         "mlp": ("tensor",), "batch": ("data", "fsdp")}
AXES = ("data", "fsdp", "tensor")
NAMES = (None, "embed", "vocab", "heads", "kv_heads", "mlp", "batch")



def _meshes(n: int):
    for d in range(1, n + 1):
        for f in range(1, n // d + 1):
            if n % (d * f) == 0:
                yield {"data": d, "fsdp": f, "tensor": n // (d * f)}


# ----------------------------------------------------------------------------- 1. bytes per chip


def _ref_bytes_per_chip(arrays, mesh, bytes_per_element=4, heads=None) -> int:
    """The library's rules on an abstract mesh of this shape."""
    from tunix_lite.sharding import logical_to_spec

    abstract = AbstractMesh(tuple(mesh[a] for a in AXES), AXES)
    total = 0
    for shape, axes in arrays:
        spec = logical_to_spec(axes, shape, abstract, units=heads)
        split = math.prod(math.prod(mesh[a] for a in ((s,) if isinstance(s, str) else s)) for s in spec if s)
        total += math.prod(shape) // split * bytes_per_element
    return total


def _random_arrays(rng, count=6):
    arrays = []
    for _ in range(count):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(rng.choice([3, 4, 6, 8, 12, 16, 24, 32, 64])) for _ in range(ndim))
        axes = tuple(NAMES[int(rng.integers(len(NAMES)))] for _ in range(ndim))
        arrays.append((shape, axes))
    return arrays


@graded("bytes_per_chip", reference=True)
def test_bytes_per_chip_matches_the_rules(impl, rng):
    """equals the library's sharding rules on random arrays and meshes (FSDP x TP and more)"""
    for i in range(12):
        arrays = _random_arrays(rng)
        mesh = list(_meshes(int(rng.choice([4, 8, 16]))))[int(rng.integers(0, 4))]
        heads = {"heads": int(rng.choice([1, 2, 3, 4, 8, 16])), "kv_heads": int(rng.choice([1, 2, 4]))}
        expected = _ref_bytes_per_chip(arrays, mesh, heads=heads)
        got = impl.bytes_per_chip(arrays, mesh, heads=heads)
        assert got == expected, f"{arrays} on {mesh} with {heads}: got {got}, expected {expected}"
        if i < 3:
            assert impl.bytes_per_chip(arrays, mesh) == _ref_bytes_per_chip(arrays, mesh), "heads=None: no head rule"
    arrays = [((128, 512), ("embed", "mlp"))]
    assert impl.bytes_per_chip(arrays, {"data": 1, "fsdp": 4, "tensor": 2}, 2) == 128 * 512 * 2 // 8, \
        "bytes_per_element: a bfloat16 [128, 512] kernel over fsdp 4 x tensor 2 is 128*512*2/8 bytes per chip"


@graded("bytes_per_chip")
def test_bytes_per_chip_one_device_holds_everything(impl, rng):
    """a 1 x 1 x 1 mesh holds every byte; data parallelism alone replicates every weight"""
    arrays = _random_arrays(rng)
    total = sum(math.prod(shape) * 4 for shape, _ in arrays)
    assert impl.bytes_per_chip(arrays, {"data": 1, "fsdp": 1, "tensor": 1}) == total
    weights = [(s, tuple(a if a != "batch" else None for a in axes)) for s, axes in arrays]
    full = sum(math.prod(shape) * 4 for shape, _ in weights)
    assert impl.bytes_per_chip(weights, {"data": 8, "fsdp": 1, "tensor": 1}) == full, \
        "the data axis splits only the batch: weights are replicated"


@graded("bytes_per_chip")
def test_bytes_per_chip_keeps_indivisible_dimensions_whole(impl, rng):
    """a dimension its mesh axes do not divide stays whole (3 rows over 2 shards); so does a single kv head"""
    mesh = {"data": 2, "fsdp": 2, "tensor": 4}
    assert impl.bytes_per_chip([((3, 16), ("batch", None))], mesh) == 3 * 16 * 4
    assert impl.bytes_per_chip([((8, 16), ("batch", None))], mesh) == 2 * 16 * 4, "8 rows over data x fsdp = 4"
    assert impl.bytes_per_chip([((64, 1), ("embed", "kv_heads"))], mesh) == 32 * 1 * 4
    mqa = [((64, 256), ("embed", "kv_heads"))]  # one kv head of width 256: the 256 divides by 4, the head does not
    assert impl.bytes_per_chip(mqa, mesh) == 32 * 64 * 4
    assert impl.bytes_per_chip(mqa, mesh, heads={"heads": 8, "kv_heads": 1}) == 32 * 256 * 4, \
        "with heads={'kv_heads': 1}, the kv_heads dimension holds one head: it cannot be split over tensor"


# ----------------------------------------------------------------------------- 2. collective volume


def _ref_collective_bytes(mesh, weight_bytes, layers, batch, seq, embed, act_bytes=2) -> float:
    """The ring model, term by term (the same floating-point operations as the solution, so that
    choose_mesh's ties break alike)."""
    d, f, t = (mesh[axis] for axis in AXES)
    gradient_all_reduce = 2 * (d - 1) / d * weight_bytes / (f * t)  # over the data axis
    gather_gather_scatter = 3 * (f - 1) / f * weight_bytes / t  # over the fsdp axis
    local_activations = batch / (d * f) * seq * embed * act_bytes
    per_layer_all_reduces = 4 * layers * 2 * (t - 1) / t * local_activations  # tensor axis
    return gradient_all_reduce + gather_gather_scatter + per_layer_all_reduces


@graded("collective_bytes", reference=True)
def test_collective_bytes_matches_the_ring_model(impl, rng):
    """matches the ring-algorithm volumes on random meshes and models"""
    for _ in range(12):
        mesh = list(_meshes(int(rng.choice([8, 16, 64]))))[int(rng.integers(0, 5))]
        kw = dict(weight_bytes=float(rng.integers(1, 10**6)) * 1e3, layers=int(rng.integers(1, 30)),
                  batch=int(mesh["data"] * mesh["fsdp"] * rng.integers(1, 8)), seq=int(rng.choice([128, 1024])),
                  embed=int(rng.choice([256, 2048])))
        expected = _ref_collective_bytes(mesh, **kw)
        got = impl.collective_bytes(mesh, **kw)
        assert math.isclose(got, expected, rel_tol=1e-6), f"{mesh}, {kw}: got {got}, expected {expected}"


@graded("collective_bytes")
def test_collective_bytes_one_axis_at_a_time(impl, rng):
    """one device sends nothing; DP all-reduces, FSDP sends 3/2 of that, TP ignores the weights"""
    kw = dict(weight_bytes=4e9, layers=16, batch=64, seq=1024, embed=2048)
    assert impl.collective_bytes({"data": 1, "fsdp": 1, "tensor": 1}, **kw) == 0
    dp = impl.collective_bytes({"data": 8, "fsdp": 1, "tensor": 1}, **kw)
    assert math.isclose(dp, 2 * 7 / 8 * 4e9), f"DP over 8: an all-reduce of 4e9 bytes is 2*7/8*4e9, got {dp}"
    fsdp = impl.collective_bytes({"data": 1, "fsdp": 8, "tensor": 1}, **kw)
    assert math.isclose(fsdp / dp, 1.5), f"FSDP/DP should be 3/2, got {fsdp / dp}"
    tp = [impl.collective_bytes({"data": 1, "fsdp": 1, "tensor": 8}, **(kw | {"weight_bytes": w}))
          for w in (1e6, 1e12)]
    assert tp[0] == tp[1] > 0, "tensor parallelism moves activations, not weights"
    assert math.isclose(impl.collective_bytes({"data": 1, "fsdp": 1, "tensor": 8}, act_bytes=4, **kw), 2 * tp[0])


# ----------------------------------------------------------------------------- 3. the batch that fits


@graded("max_batch", reference=True)
def test_max_batch_matches_a_search(impl, rng):
    """the largest multiple of data x fsdp that fits, found by trying every batch"""
    for _ in range(10):
        mesh = list(_meshes(8))[int(rng.integers(0, 10))]
        params, row = float(rng.integers(10**6, 10**9)), float(rng.integers(10**5, 10**8))
        extra_rows = float(rng.integers(0, 40)) + 0.5  # never exactly on a boundary: no float ties
        hbm = 16 * params / (mesh["fsdp"] * mesh["tensor"]) + extra_rows * row / mesh["tensor"]
        shards = mesh["data"] * mesh["fsdp"]
        best = 0
        for batch in range(shards, 64 * shards, shards):
            if 16 * params / (mesh["fsdp"] * mesh["tensor"]) + batch / shards * row / mesh["tensor"] <= hbm:
                best = batch
        got = impl.max_batch(hbm, params, mesh, row)
        assert got == best, f"hbm {hbm:.4g}, params {params:.4g}, {mesh}, row {row:.4g}: got {got}, expected {best}"


@graded("max_batch")
def test_max_batch_edges(impl, rng):
    """0 when the model state alone does not fit; more memory never gives a smaller batch"""
    mesh = {"data": 2, "fsdp": 4, "tensor": 1}
    assert impl.max_batch(15 * 1e9 / 4, 1e9, mesh, 1e6) == 0, "16 B per parameter / 4 shards > 15/4 GB"
    sizes = [impl.max_batch(h * 2**30, 5e8, mesh, 2e8) for h in (2, 4, 8, 16)]
    assert sizes == sorted(sizes) and all(s % 8 == 0 for s in sizes), sizes


# ----------------------------------------------------------------------------- 4. choosing a mesh


def _ref_choose_mesh(n_devices, params, hbm_bytes, batch, seq, embed, layers, heads, bytes_per_row):
    best = None
    for mesh in _meshes(n_devices):
        d, f, t = mesh["data"], mesh["fsdp"], mesh["tensor"]
        if heads % t or batch % (d * f):
            continue
        if 16 * params / (f * t) + batch / (d * f) * bytes_per_row / t > hbm_bytes:
            continue
        key = (_ref_collective_bytes(mesh, 4 * params, layers, batch, seq, embed), t, d)
        if best is None or key < best[0]:
            best = (key, mesh)
    return None if best is None else best[1]


def _problem(rng):
    return dict(n_devices=int(rng.choice([4, 8, 16])), params=float(rng.choice([1e8, 1e9, 4e9, 8e9])),
                hbm_bytes=float(rng.choice([16, 32, 80])) * 2**30, batch=int(rng.choice([2, 4, 8, 32, 128])),
                seq=int(rng.choice([512, 2048])), embed=int(rng.choice([1024, 4096])), layers=int(rng.integers(8, 40)),
                heads=int(rng.choice([4, 8, 16, 32])), bytes_per_row=float(rng.choice([1e8, 1e9, 4e9])))


@graded("choose_mesh", reference=True)
def test_choose_mesh_matches_an_exhaustive_search(impl, rng):
    """the mesh that fits with the fewest collective bytes (ties: less tensor, then less data), or None"""
    for _ in range(16):
        problem = _problem(rng)
        expected = _ref_choose_mesh(**problem)
        got = impl.choose_mesh(**problem)
        assert got == expected, f"{problem}: got {got}, expected {expected}"


@graded("choose_mesh")
def test_choose_mesh_scenarios(impl, rng):
    """small model: data parallel; too big to replicate: the weights get split (FSDP); batch < devices: TP"""
    base = dict(n_devices=8, hbm_bytes=16 * 2**30, seq=1024, embed=2048, layers=16, heads=16, bytes_per_row=2e8)
    assert impl.choose_mesh(params=1e8, batch=64, **base) == {"data": 8, "fsdp": 1, "tensor": 1}
    big = impl.choose_mesh(params=2e9, batch=64, **base)  # 32 GB replicated does not fit 16 GiB
    assert big is not None and big["fsdp"] > 1 and big["data"] < 8, big
    small = impl.choose_mesh(params=2e9, batch=2, **base)
    assert small is not None and small["tensor"] > 1 and small["data"] * small["fsdp"] <= 2, small
    assert impl.choose_mesh(params=1e11, batch=64, **base) is None, "100B parameters do not fit 8 x 16 GiB"
