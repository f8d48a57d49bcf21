"""Hidden tests for phase 8, rotated: the checks of tunix_lite/course/graded/phase08.py with other
numbers (other device counts, shapes, head counts, memory sizes and fixed scenarios), so answers
hard-coded for the public self-check tests fail here. Rotate them again for the next cohort.

    tunix-lite grade solutions/08_scaling_exercises.ipynb --tests course/instructor/hidden  # 9/9
    tunix-lite grade exercises/08_scaling_exercises.ipynb --tests course/instructor/hidden  # 0/9

These run in the grader, never in the learner's worker, so they may import the public module's
references (the library's rules and closed forms): only the inputs and the expected values change.
"""

from __future__ import annotations

import math

from tunix_lite.course.graded import graded
from tunix_lite.course.graded.phase08 import (  # noqa: F401 - HINTS, FORBIDDEN: read by the grader
    FORBIDDEN,
    HINTS,
    NAMES,
    _meshes,
    _ref_bytes_per_chip,
    _ref_choose_mesh,
    _ref_collective_bytes,
)


def _any_mesh(rng, n_devices: int) -> dict:
    meshes = list(_meshes(n_devices))
    return meshes[int(rng.integers(len(meshes)))]


def _random_arrays(rng, count=5):
    arrays = []
    for _ in range(count):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(rng.choice([2, 5, 10, 20, 36, 48, 96, 128])) for _ in range(ndim))
        axes = tuple(NAMES[int(rng.integers(len(NAMES)))] for _ in range(ndim))
        arrays.append((shape, axes))
    return arrays


# ----------------------------------------------------------------------------- 1. bytes per chip


@graded("bytes_per_chip", reference=True)
def test_bytes_per_chip_matches_the_rules(impl, rng):
    """equals the library's sharding rules on random arrays, bf16 and f32, any factorization"""
    for i in range(10):
        arrays, mesh = _random_arrays(rng), _any_mesh(rng, int(rng.choice([2, 12, 32])))
        heads = {"heads": int(rng.choice([2, 6, 12, 24])), "kv_heads": int(rng.choice([1, 3, 6]))}
        expected = _ref_bytes_per_chip(arrays, mesh, 2, heads=heads)
        got = impl.bytes_per_chip(arrays, mesh, 2, heads=heads)
        assert got == expected, f"{arrays} on {mesh} with {heads}, bf16: got {got}, want {expected}"
        if i < 3:
            assert impl.bytes_per_chip(arrays, mesh) == _ref_bytes_per_chip(arrays, mesh), \
                "heads=None: no head rule"
    arrays = [((96, 384), ("embed", "mlp"))]
    assert impl.bytes_per_chip(arrays, {"data": 2, "fsdp": 2, "tensor": 4}) == 96 * 384 * 4 // 8, \
        "a float32 [96, 384] kernel over fsdp 2 x tensor 4 is 96*384*4/8 bytes per chip"


@graded("bytes_per_chip")
def test_bytes_per_chip_one_device_holds_everything(impl, rng):
    """a 1 x 1 x 1 mesh holds every byte; data parallelism alone replicates every weight"""
    arrays = _random_arrays(rng, count=7)
    total = sum(math.prod(shape) * 2 for shape, _ in arrays)
    assert impl.bytes_per_chip(arrays, {"data": 1, "fsdp": 1, "tensor": 1}, 2) == total
    weights = [(s, tuple(a if a != "batch" else None for a in axes)) for s, axes in arrays]
    full = sum(math.prod(shape) * 4 for shape, _ in weights)
    assert impl.bytes_per_chip(weights, {"data": 6, "fsdp": 1, "tensor": 1}) == full, \
        "the data axis splits only the batch: weights are replicated"


@graded("bytes_per_chip")
def test_bytes_per_chip_keeps_indivisible_dimensions_whole(impl, rng):
    """a dimension its mesh axes do not divide stays whole (5 rows over 6 shards), as one kv head"""
    mesh = {"data": 2, "fsdp": 3, "tensor": 2}
    assert impl.bytes_per_chip([((5, 12), ("batch", None))], mesh) == 5 * 12 * 4
    assert impl.bytes_per_chip([((12, 12), ("batch", None))], mesh) == 2 * 12 * 4, \
        "12 rows over data x fsdp = 6"
    assert impl.bytes_per_chip([((48, 1), ("embed", "kv_heads"))], mesh) == 16 * 1 * 4
    mqa = [((48, 128), ("embed", "kv_heads"))]  # one kv head of width 128: 128 splits, the head not
    assert impl.bytes_per_chip(mqa, mesh) == 16 * 64 * 4
    assert impl.bytes_per_chip(mqa, mesh, heads={"heads": 6, "kv_heads": 1}) == 16 * 128 * 4, \
        "with heads={'kv_heads': 1}, the kv_heads dimension holds one head: it cannot be split"


# ----------------------------------------------------------------------------- 2. collective volume


@graded("collective_bytes", reference=True)
def test_collective_bytes_matches_the_ring_model(impl, rng):
    """matches the ring-algorithm volumes on random meshes and models"""
    for _ in range(10):
        mesh = _any_mesh(rng, int(rng.choice([4, 12, 32])))
        kw = dict(weight_bytes=float(rng.integers(1, 10**5)) * 1e4, layers=int(rng.integers(2, 48)),
                  batch=int(mesh["data"] * mesh["fsdp"] * rng.integers(1, 6)),
                  seq=int(rng.choice([256, 512])), embed=int(rng.choice([512, 1536])),
                  act_bytes=int(rng.choice([2, 4])))
        expected = _ref_collective_bytes(mesh, **kw)
        got = impl.collective_bytes(mesh, **kw)
        assert math.isclose(got, expected, rel_tol=1e-6), f"{mesh}, {kw}: {got}, want {expected}"


@graded("collective_bytes")
def test_collective_bytes_one_axis_at_a_time(impl, rng):
    """one device sends nothing; DP all-reduces, FSDP sends 3/2 of that, TP ignores the weights"""
    kw = dict(weight_bytes=6e9, layers=12, batch=48, seq=512, embed=1024)
    assert impl.collective_bytes({"data": 1, "fsdp": 1, "tensor": 1}, **kw) == 0
    dp = impl.collective_bytes({"data": 4, "fsdp": 1, "tensor": 1}, **kw)
    assert math.isclose(dp, 2 * 3 / 4 * 6e9), f"DP over 4: all-reducing 6e9 B is 2*3/4*6e9: {dp}"
    fsdp = impl.collective_bytes({"data": 1, "fsdp": 4, "tensor": 1}, **kw)
    assert math.isclose(fsdp / dp, 1.5), f"FSDP/DP should be 3/2, got {fsdp / dp}"
    tp = [impl.collective_bytes({"data": 1, "fsdp": 1, "tensor": 4}, **(kw | {"weight_bytes": w}))
          for w in (3e5, 3e11)]
    assert tp[0] == tp[1] > 0, "tensor parallelism moves activations, not weights"
    one_byte = impl.collective_bytes({"data": 1, "fsdp": 1, "tensor": 4}, act_bytes=1, **kw)
    assert math.isclose(one_byte, tp[0] / 2), "activations of 1 byte move half of 2 bytes"


# ------------------------------------------------------------------------- 3. the batch that fits


@graded("max_batch", reference=True)
def test_max_batch_matches_a_search(impl, rng):
    """the largest multiple of data x fsdp that fits, found by trying every batch"""
    for _ in range(10):
        mesh = _any_mesh(rng, 16)
        params, row = float(rng.integers(10**7, 10**10)), float(rng.integers(10**6, 10**9))
        extra_rows = float(rng.integers(0, 30)) + 0.25  # never exactly on a boundary: no float ties
        state = 16 * params / (mesh["fsdp"] * mesh["tensor"])
        hbm = state + extra_rows * row / mesh["tensor"]
        shards = mesh["data"] * mesh["fsdp"]
        best = 0
        for batch in range(shards, 48 * shards, shards):
            if state + batch / shards * row / mesh["tensor"] <= hbm:
                best = batch
        got = impl.max_batch(hbm, params, mesh, row)
        assert got == best, (f"hbm {hbm:.4g}, params {params:.4g}, {mesh}, row {row:.4g}: "
                             f"got {got}, expected {best}")


@graded("max_batch")
def test_max_batch_edges(impl, rng):
    """0 when the model state alone does not fit; more memory never gives a smaller batch"""
    mesh = {"data": 4, "fsdp": 2, "tensor": 2}
    assert impl.max_batch(7e9, 2e9, mesh, 1e6) == 0, "16 B per parameter / 4 shards = 8 GB > 7 GB"
    sizes = [impl.max_batch(h * 2**30, 2.5e8, mesh, 1e8) for h in (3, 6, 12, 24)]
    assert sizes == sorted(sizes) and all(s % 8 == 0 for s in sizes), sizes


# ----------------------------------------------------------------------------- 4. choosing a mesh


def _problem(rng):
    return dict(n_devices=int(rng.choice([2, 6, 12, 32])),
                params=float(rng.choice([5e8, 2e9, 7e9])),
                hbm_bytes=float(rng.choice([24, 40, 96])) * 2**30,
                batch=int(rng.choice([3, 6, 12, 48, 96])), seq=int(rng.choice([1024, 4096])),
                embed=int(rng.choice([768, 3072])), layers=int(rng.integers(6, 48)),
                heads=int(rng.choice([6, 12, 24, 48])),
                bytes_per_row=float(rng.choice([5e7, 5e8, 2e9])))


@graded("choose_mesh", reference=True)
def test_choose_mesh_matches_an_exhaustive_search(impl, rng):
    """the mesh that fits with the fewest collective bytes (ties: less tensor, less data) or None"""
    for _ in range(16):
        problem = _problem(rng)
        expected = _ref_choose_mesh(**problem)
        got = impl.choose_mesh(**problem)
        assert got == expected, f"{problem}: got {got}, expected {expected}"


@graded("choose_mesh")
def test_choose_mesh_scenarios(impl, rng):
    """small model: data parallel; too big to replicate: weights get split; batch < devices: TP"""
    base = dict(n_devices=16, hbm_bytes=24 * 2**30, seq=2048, embed=1536, layers=24, heads=24,
                bytes_per_row=1e8)
    assert impl.choose_mesh(params=5e7, batch=128, **base) == {"data": 16, "fsdp": 1, "tensor": 1}
    big = impl.choose_mesh(params=3e9, batch=128, **base)  # 48 GB replicated does not fit 24 GiB
    assert big is not None and big["fsdp"] * big["tensor"] > 1 and big["data"] < 16, big
    small = impl.choose_mesh(params=3e9, batch=2, **base)
    assert small is not None and small["tensor"] > 1 and small["data"] * small["fsdp"] <= 2, small
    assert impl.choose_mesh(params=3e11, batch=128, **base) is None, \
        "300B parameters do not fit 16 x 24 GiB"
