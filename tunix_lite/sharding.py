"""Sharding named once: parameters and activations carry logical axes, one rules table maps them
onto a mesh.

    mesh = make_mesh(fsdp=4, tensor=2)
        # or strategy_mesh("fsdp_tp"), choose_mesh(), resolve_mesh(config.mesh)
    Trainer(model, tx, loss_fn, mesh=mesh)
        # shards model, frozen models, optimizer state and every batch
    Sampler(model, tokenizer, mesh=mesh)
        # prompts and the KV cache sharded over the same mesh

Mesh axes: "data" (replicas, each with a slice of the batch), "fsdp" (the batch is split and so is
every weight, gathered layer by layer by XLA: ZeRO-3), "tensor" (heads, MLP columns and the
vocabulary split inside each matmul, Megatron style). The rules never change: a strategy (DP, FSDP,
TP, FSDP + TP) only chooses which mesh axes have more than one device, and an axis of size 1 shards
nothing. A dimension is split only when its mesh axes divide it, and a fused heads x head_dim weight
dimension only along whole heads (Gemma's single KV head stays replicated under TP), so every model
runs on every mesh.

Activations are constrained at block boundaries (`constrain`, a no-op outside `jax.set_mesh`):
[B, T, D] with rows over data x fsdp and D whole, q/k/v with their heads over tensor. XLA
propagates the rest.

Also here: multi-process start-up (`initialize_distributed`). Moving weights to a rollout engine's
mesh is `tunix_lite.rl.engine` (`WeightSync`); counting a compiled step's collectives is
`tunix_lite.planner` (`count_collectives`).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

# THE rules table: logical axis -> mesh axis (or axes; None: replicated).
RULES: dict[str, str | tuple[str, ...] | None] = {
    # parameters: FSDP splits the model dimension, TP the heads / MLP / vocabulary dimension
    "embed": "fsdp",
    "vocab": "tensor",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    # activations (and the KV cache): rows over every data-parallel axis; D stays whole
    # between blocks
    "batch": ("data", "fsdp"),
    "sequence": None,
    "act_embed": None,
}

# Activation layouts at block boundaries, as Flax's Gemma example names them (act_btd, ...).
ACT_BTD = ("batch", "sequence", "act_embed")  # the residual stream [B, T, D]
ACT_BTNH = ("batch", "sequence", "heads", None)  # queries [B, T, N, H]
ACT_BTKH = ("batch", "sequence", "kv_heads", None)  # keys and values [B, T, K, H]
CACHE_BKSH = ("batch", "kv_heads", "sequence", None)  # the KV cache [B, K, S, H]

# Strategy presets: which mesh axes get the devices. tensor=None in fsdp_tp: 2, or 4 from 32
# devices up.
STRATEGIES = {
    "dp": "data parallel: weights replicated, batch split, gradients all-reduced",
    "fsdp": "fully sharded data parallel (ZeRO-3): weights, gradients, optimizer state and batch "
            "split",
    "tp": "tensor parallel (Megatron): heads, MLP and vocabulary split inside each matmul",
    "fsdp_tp": "FSDP over most devices x TP over a few: large models on many chips",
}


# ----------------------------------------------------------------------------- meshes


def make_mesh(data: int = 1, fsdp: int = -1, tensor: int = 1, devices=None) -> jax.sharding.Mesh:
    """A (data, fsdp, tensor) mesh; one size may be -1 to take the remaining devices."""
    devices = list(devices) if devices is not None else jax.devices()
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError("at most one mesh axis may be -1")
    if any(s == 0 or s < -1 for s in sizes):
        raise ValueError(f"mesh sizes must be >= 1 (or one -1), got data={data} fsdp={fsdp} "
                         f"tensor={tensor}")
    known = math.prod(s for s in sizes if s != -1)
    sizes = [len(devices) // known if s == -1 else s for s in sizes]
    if math.prod(sizes) != len(devices):
        raise ValueError(f"mesh data={sizes[0]} x fsdp={sizes[1]} x tensor={sizes[2]} needs "
                         f"{math.prod(sizes)} devices, have {len(devices)}")
    return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3,
                         devices=devices)


def strategy_shape(strategy: str, num_devices: int, tensor: int | None = None) -> dict[str, int]:
    """The mesh shape of a named strategy over `num_devices`."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    n = num_devices
    if strategy == "dp":
        return {"data": n, "fsdp": 1, "tensor": 1}
    if strategy == "fsdp":
        return {"data": 1, "fsdp": n, "tensor": 1}
    if strategy == "tp":
        return {"data": 1, "fsdp": 1, "tensor": n}
    tensor = tensor or (4 if n >= 32 else 2)
    if n % tensor or n == tensor:
        raise ValueError(f"fsdp_tp needs a device count that is a multiple of tensor={tensor} and "
                         f"larger, got {n}")
    return {"data": 1, "fsdp": n // tensor, "tensor": tensor}


def suggest_mesh(num_devices: int, kind: str = "cpu", num_processes: int = 1) -> dict[str, int]:
    """The default mesh shape for a device count and kind (`auto`).

    TPU and CPU: FSDP over every device (TPU chips talk over a fast interconnect across the whole
    slice, so sharding the weights costs little and frees the most memory; fake CPU devices show the
    same layout).
    GPU: FSDP inside each host (NVLink) and data parallel across hosts, whose network is
    much slower."""
    if kind == "gpu" and num_processes > 1:
        return {"data": num_processes, "fsdp": num_devices // num_processes, "tensor": 1}
    return {"data": 1, "fsdp": num_devices, "tensor": 1}


def device_kind(device=None) -> str:
    """'tpu', 'gpu' or 'cpu'."""
    platform = (device or jax.devices()[0]).platform
    return {"cuda": "gpu", "rocm": "gpu"}.get(platform, platform)


def choose_mesh(devices=None) -> jax.sharding.Mesh:
    """`suggest_mesh` over `devices` (default: every device)."""
    devices = list(devices) if devices is not None else jax.devices()
    return make_mesh(**suggest_mesh(len(devices), device_kind(devices[0]), jax.process_count()),
                     devices=devices)


def resolve_mesh(spec, devices=None) -> jax.sharding.Mesh | None:
    """A config's `mesh:` value -> a Mesh: None (one device), "auto", a strategy name, a {data,
    fsdp, tensor} mapping (one size may be -1), or a Mesh (returned as is)."""
    if spec is None or isinstance(spec, jax.sharding.Mesh):
        return spec
    devices = list(devices) if devices is not None else jax.devices()
    if spec == "auto":
        return choose_mesh(devices)
    if isinstance(spec, str):
        return make_mesh(**strategy_shape(spec, len(devices)), devices=devices)
    if isinstance(spec, Mapping):
        unknown = set(spec) - set(MESH_AXES)
        if unknown:
            raise ValueError(f"mesh axes {sorted(unknown)} are unknown; use {', '.join(MESH_AXES)}")
        return make_mesh(**{"fsdp": 1} | dict(spec), devices=devices)
    raise TypeError("mesh: expected None, 'auto', a strategy name or a mapping of axis sizes, "
                    f"got {spec!r}")


def batch_shards(mesh: jax.sharding.Mesh | None) -> int:
    """How many ways a batch's rows are split on `mesh` (1 without one)."""
    if mesh is None:
        return 1
    return math.prod(mesh.shape[a] for a in np.atleast_1d(RULES["batch"]))


def model_mesh(tree) -> jax.sharding.Mesh | None:
    """The mesh a model (or pytree of modules and arrays) was placed on with these axes, or None."""
    leaves = jax.tree.leaves(nnx.state(tree) if isinstance(tree, nnx.Module) else tree,
                             is_leaf=lambda x: isinstance(x, nnx.Module))
    for leaf in leaves:
        if isinstance(leaf, nnx.Module):
            found = model_mesh(leaf)
            if found is not None:
                return found
        elif (isinstance(getattr(leaf, "sharding", None), NamedSharding)
              and leaf.sharding.mesh.axis_names == MESH_AXES):
            return leaf.sharding.mesh
    return None


def use_mesh(mesh: jax.sharding.Mesh | None):
    """`jax.set_mesh(mesh)`, or nothing when mesh is None: the context under which
    `constrain` acts."""
    return jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext()


# -------------------------------------------------------------------- logical axes -> PartitionSpec


def logical_to_spec(axes: tuple, shape: tuple[int, ...], mesh, rules=None,
                    units: Mapping[str, int] | None = None) -> PartitionSpec:
    """Map logical axes to a PartitionSpec, replicating a dimension its mesh axes do not divide.

    units: logical axis -> how many indivisible units that dimension holds (a fused heads x head_dim
    weight dimension holds `num_heads` units): it is split only along whole units."""
    rules = RULES if rules is None else rules
    units = units or {}
    spec = []
    for name, dim in zip(axes, shape):
        mesh_axes = rules.get(name) if name else None
        if mesh_axes is not None:  # axes of size 1 shard nothing: leave them out of the spec
            mesh_axes = tuple(str(a) for a in np.atleast_1d(mesh_axes)
                              if mesh.shape.get(str(a), 1) > 1) or None
        size = math.prod(mesh.shape[a] for a in mesh_axes) if mesh_axes else 1
        ok = mesh_axes and dim % size == 0 and units.get(name, size) % size == 0
        spec.append((mesh_axes[0] if len(mesh_axes) == 1 else mesh_axes) if ok else None)
    # the canonical form jit gives its outputs, so step 2 reuses step 1's compile
    while spec and spec[-1] is None:
        spec.pop()
    return PartitionSpec(*spec)


def constrain(x: jax.Array, axes: tuple) -> jax.Array:
    """Pin an activation's layout to its logical axes under the current mesh (`jax.set_mesh`);
    outside one, or on a mesh without our axes, return x unchanged."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not set(MESH_AXES) <= set(mesh.axis_names):
        return x
    return jax.lax.with_sharding_constraint(x, logical_to_spec(axes, x.shape, mesh))


def head_units(tree) -> dict[str, int]:
    """{"heads": N, "kv_heads": K} from the first model config found in `tree`'s modules."""
    for module in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, nnx.Module)):
        if not isinstance(module, nnx.Module):
            continue
        for _, sub in nnx.iter_modules(module):
            config = getattr(sub, "config", None)
            if hasattr(config, "num_kv_heads"):
                return {"heads": config.num_heads, "kv_heads": config.num_kv_heads}
    return {}


def variable_spec(var: nnx.Variable, mesh, units: Mapping[str, int] | None = None) -> PartitionSpec:
    """What the rules say a variable's PartitionSpec is (no logical_axes metadata: replicated)."""
    value = var.get_value()
    axes = var.get_metadata().get("logical_axes") or (None,) * value.ndim
    return logical_to_spec(axes, value.shape, mesh, units=units)


def param_shardings(model, mesh, filter=...) -> dict:
    """{dotted path: the NamedSharding the rules give that variable} for the variables of `model`
    that `filter` selects."""
    units = head_units(model)
    return {".".join(map(str, path)): NamedSharding(mesh, variable_spec(var, mesh, units))
            for path, var in nnx.to_flat_state(nnx.state(model, filter))}


def place(x, sharding: NamedSharding):
    """x on `sharding`, also when the mesh spans several processes (each process must pass the
    same x)."""
    if isinstance(x, jax.Array) and x.sharding == sharding:
        return x
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    if isinstance(x, jax.Array) and not x.is_fully_addressable:  # global -> global: XLA moves it
        return jax.jit(lambda a: a, out_shardings=sharding)(x)
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def shard_model(tree, mesh: jax.sharding.Mesh):
    """Place every variable of a module (or of a pytree of modules, e.g. a trainer's `frozen`, or an
    nnx.Optimizer, whose moments carry their parameter's logical axes) on `mesh` following its
    logical_axes metadata, in place; plain arrays in the pytree are replicated. Returns `tree`.

    An array shared by several variables (a LoRA reference view and the model it came from) is
    placed once and stays shared."""
    placed: dict[int, jax.Array] = {}
    units = head_units(tree)

    def place_once(value, sharding):
        key = id(value)
        if key not in placed:
            placed[key] = place(value, sharding)
        return placed[key]

    for module in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, nnx.Pytree)):
        if not isinstance(module, nnx.Pytree):  # a Module, or e.g. an nnx.Optimizer
            continue
        flat = nnx.to_flat_state(nnx.state(module))
        for _, var in flat:
            sharding = NamedSharding(mesh, variable_spec(var, mesh, units))
            var.set_value(place_once(var.get_value(), sharding))
        nnx.update(module, nnx.from_flat_state(flat))
    replicated = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(
        lambda x: place_once(x, replicated) if isinstance(x, (jax.Array, np.ndarray)) else x, tree,
        is_leaf=lambda x: isinstance(x, nnx.Pytree))


def shard_batch(batch: dict, mesh: jax.sharding.Mesh) -> dict:
    """Split the leading (row) dimension of every array over the batch axes (data x fsdp). Each
    process places only the rows of its own devices, so with several processes every one passes the
    same global batch."""
    shards = batch_shards(mesh)
    for key, x in batch.items():
        if np.shape(x)[0] % shards:
            raise ValueError(f"batch[{key!r}] has {np.shape(x)[0]} rows, which the mesh's {shards} "
                             "data x fsdp shards cannot split evenly; use a batch size that is a "
                             f"multiple of {shards}")
    return {key: place(x, NamedSharding(mesh, logical_to_spec(("batch",), np.shape(x)[:1], mesh)))
            for key, x in batch.items()}


# ----------------------------------------------------------------------------- several processes


def initialize_distributed() -> bool:
    """Start JAX's multi-process runtime when this process is one of several; returns whether it is.

    Explicit: JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and
    JAX_PROCESS_ID. Detected by JAX itself: Cloud TPU pod slices (several TPU workers), SLURM and
    Open MPI jobs. Must run before anything touches a device. Every process then sees every device
    in `jax.devices()` and runs the same program."""
    if jax.distributed.is_initialized():
        return True
    env = os.environ
    if "JAX_COORDINATOR_ADDRESS" in env:
        jax.distributed.initialize(env["JAX_COORDINATOR_ADDRESS"],
                                   int(env.get("JAX_NUM_PROCESSES", "1")),
                                   int(env.get("JAX_PROCESS_ID", "0")))
        return True
    several_tpu_workers = "," in env.get("TPU_WORKER_HOSTNAMES", "")
    if (several_tpu_workers or int(env.get("SLURM_NTASKS", "1")) > 1
            or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1):
        jax.distributed.initialize()
        return True
    return False


def is_main_process() -> bool:
    """True on process 0, the one that logs and writes files."""
    return jax.process_index() == 0


def to_host(x) -> np.ndarray:
    """A numpy copy of the whole of x, also of an array spread over several processes' devices
    (every process must call it: the pieces are exchanged)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def replicated(tree, mesh: jax.sharding.Mesh):
    """Every array of `tree` fully replicated on `mesh` (readable by every process with
    np.asarray)."""
    sharding = NamedSharding(mesh, PartitionSpec())
    return jax.tree.map(lambda x: place(x, sharding) if isinstance(x, jax.Array) else x, tree)
