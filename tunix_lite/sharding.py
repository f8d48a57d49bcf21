"""Sharding named once: parameters carry logical axes, one rules table maps them onto a device mesh.

Mesh axes: "data" (replicas, each with a batch slice), "fsdp" (parameters and batch split, gathered
per layer by XLA), "tensor" (heads / MLP / vocab split inside each matmul).
"""

from __future__ import annotations

import math

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

# logical axis -> mesh axis (or None: replicated)
RULES: dict[str, str | tuple[str, ...] | None] = {
    "batch": ("data", "fsdp"),
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
}


def make_mesh(data: int = 1, fsdp: int = -1, tensor: int = 1, devices=None) -> jax.sharding.Mesh:
    """A (data, fsdp, tensor) mesh; one size may be -1 to take the remaining devices."""
    devices = devices if devices is not None else jax.devices()
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError("at most one mesh axis may be -1")
    known = math.prod(s for s in sizes if s != -1)
    sizes = [len(devices) // known if s == -1 else s for s in sizes]
    if math.prod(sizes) != len(devices):
        raise ValueError(f"mesh data={sizes[0]} x fsdp={sizes[1]} x tensor={sizes[2]} needs "
                         f"{math.prod(sizes)} devices, have {len(devices)}")
    return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3,
                         devices=devices)


def suggest_mesh(num_devices: int) -> dict[str, int]:
    """FSDP over every device is the simplest layout that fits a model too big for one chip; add
    tensor parallelism only when the per-device batch gets too small (beyond 8 chips here)."""
    tensor = 2 if num_devices > 8 and num_devices % 2 == 0 else 1
    return {"data": 1, "fsdp": num_devices // tensor, "tensor": tensor}


def logical_to_spec(axes: tuple, shape: tuple[int, ...], mesh: jax.sharding.Mesh, rules=None) -> PartitionSpec:
    """Map logical axes to a PartitionSpec, replicating a dimension the mesh axis does not divide."""
    rules = RULES if rules is None else rules
    spec = []
    for name, dim in zip(axes, shape):
        mesh_axes = rules.get(name) if name else None
        size = math.prod(mesh.shape[a] for a in np.atleast_1d(mesh_axes)) if mesh_axes else 1
        spec.append(mesh_axes if mesh_axes and dim % size == 0 else None)
    return PartitionSpec(*spec)


def shard_model(model: nnx.Module, mesh: jax.sharding.Mesh, rules=None) -> nnx.Module:
    """Place every variable of `model` on `mesh` following its `logical_axes` metadata (in place)."""
    state = nnx.state(model)
    flat = nnx.to_flat_state(state)
    for _, var in flat:
        axes = var.get_metadata().get("logical_axes") or (None,) * var[...].ndim
        sharding = NamedSharding(mesh, logical_to_spec(axes, var[...].shape, mesh, rules))
        var.set_value(jax.device_put(var[...], sharding))
    nnx.update(model, nnx.from_flat_state(flat))
    return model


def shard_batch(batch, mesh: jax.sharding.Mesh):
    """Split the leading (batch) dimension of every array over the data and fsdp axes."""
    spec = PartitionSpec(RULES["batch"])
    return jax.tree.map(lambda x: jax.device_put(x, NamedSharding(mesh, spec)), batch)
