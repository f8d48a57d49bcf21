"""Will it fit, and how fast could it go? Per-device memory, FLOPs and a roofline for one
training step.

    tunix-lite plan --model gemma3-1b --devices v5e-8 --strategy fsdp --batch 32 --seq 1024
        [--lora 8]

    plan = Plan.make("gemma3-1b", "v5e-8", "fsdp", batch=32, seq=1024, lora_rank=8)
    plan.memory        # bytes per device by category
    plan.report()      # the table the CLI prints

What the numbers are:
- Parameters, gradients and optimizer state are exact: the model is built abstractly
  (`nnx.eval_shape`, no weights) and every variable is split by the SAME rules the trainer uses
  (tunix_lite.sharding) on the strategy's mesh shape, whole heads and indivisible dimensions
  included. Parameters stay float32 (a quantized base at its own size); gradients are float32 for
  what trains; AdamW keeps two float32 moments of it. The step returns new trained parameters and
  moments without donating the old ones, so both exist at its end ("updated copies"). Under FSDP
  each weight is also gathered whole (per tensor shard) and kept from the forward to the backward,
  and the gradients exist whole until they are reduce-scattered: two more terms.
- Activations and logits are estimates from the block's structure (see `activation_bytes`); remat
  keeps only each block's input and recomputes one block at a time. The [B, T, V] logits are float32
  with their softmax; with `logits_chunk` only a [chunk, V] slice of each exists at once (plus the
  [B*T, D] input gradient it keeps).
- FLOPs count matmuls: 6 x parameters in matmuls x tokens for a full step (4x with a frozen base,
  whose weight gradients are skipped), plus the attention scores; remat's extra forward counts as
  hardware work, not model work.
- The roofline takes the slowest of compute (peak bf16 FLOP/s), HBM traffic and collectives over
  the interconnect (ring algorithms), assuming they overlap perfectly: a floor on step time, not a
  forecast. MFU = model FLOPs / (step time x devices x peak). Chip figures are public specifications
  (Google Cloud TPU and NVIDIA data sheets).

Checked against XLA's own `compiled.memory_analysis()` (`against_xla`; tests/test_planner.py,
benchmarks/scaling.py); how close it comes, per strategy and chip: benchmarks/RESULTS.md, "Scaling".

What a compiled step actually sends between devices is read from its HLO (`list_collectives`,
`count_collectives`): the tests use it to catch a sharding rule that silently replicates.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

GiB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One JAX device of an accelerator (a TPU v3 TensorCore; a v4/v5p megacore chip; a GPU)."""

    name: str
    hbm_gib: float  # memory per device
    tflops: float  # dense bf16 peak per device
    hbm_gbps: float  # memory bandwidth per device, GB/s
    # collective bandwidth per device, one direction, GB/s (pod all-reduce bandwidth / chips)
    link_gbps: float
    # how many of the cores a product name counts make one device (v4-8: 8 cores, 4 chips)
    cores_per_device: int = 1


# Public specifications. TPU: Cloud TPU system architecture pages (per chip: bf16 peak, HBM, HBM
# bandwidth; link: the pod's all-reduce bandwidth divided by its chips, or half the bidirectional
# ICI bandwidth). v3 has two TensorCores per chip, each its own JAX device; v4 and v5p present each
# chip as one (megacore) device, though the product name counts cores. GPU: NVIDIA data sheets (SXM,
# dense bf16; link: half the NVLink bandwidth).
CHIPS = {
    "v3": Chip("TPU v3 (per core)", 16, 61.5, 450, 166),
    "v4": Chip("TPU v4", 32, 275, 1200, 268, cores_per_device=2),
    "v5e": Chip("TPU v5e", 16, 197, 819, 200),
    "v5p": Chip("TPU v5p", 95, 459, 2765, 600, cores_per_device=2),
    "v6e": Chip("TPU v6e", 32, 918, 1638, 400),
    "h100": Chip("NVIDIA H100 SXM", 80, 989, 3350, 450),
    "a100": Chip("NVIDIA A100 SXM 80GB", 80, 312, 2039, 300),
    "cpu": Chip("CPU (fake devices)", 0, 0, 0, 0),
}


def parse_devices(spec: str) -> tuple[Chip, int]:
    """'v5e-8' -> (v5e, 8 devices); 'v3-8' -> 8 cores = 8 devices; 'v4-8' -> 8 cores = 4
    devices; 'h100-8'."""
    match = re.fullmatch(r"([a-z0-9]+)-(\d+)", spec.strip().lower())
    if not match or match.group(1) not in CHIPS:
        raise ValueError(f"devices: {spec!r} is not KIND-COUNT with KIND one of "
                         f"{', '.join(CHIPS)} (e.g. v5e-8, v3-8, h100-8)")
    chip, count = CHIPS[match.group(1)], int(match.group(2))
    if count % chip.cores_per_device:
        raise ValueError(f"devices: {spec} counts cores; {match.group(1)} has "
                         f"{chip.cores_per_device} per device")
    return chip, count // chip.cores_per_device


# ----------------------------------------------------------------------------- parameters, exactly


@functools.lru_cache(maxsize=16)
def abstract_model(model, *, lora_rank: int | None = None, quantize: str | None = None):
    """The model as shapes only (nothing allocated), with LoRA / QLoRA applied as training would."""
    from flax import nnx

    from tunix_lite.lora import apply_lora
    from tunix_lite.models import Transformer, get_config

    config = get_config(model) if isinstance(model, str) else model

    def build():
        m = Transformer(config, rngs=nnx.Rngs(0))
        if lora_rank:
            apply_lora(m, rank=lora_rank, alpha=2.0 * lora_rank, quantize=quantize,
                       rngs=nnx.Rngs(1))
        return m

    return nnx.eval_shape(build)


def sharded_bytes(model, mesh_shape: dict[str, int], filter) -> int:
    """Bytes per device of the variables `filter` selects, split by the sharding rules on a mesh of
    this shape."""
    from flax import nnx
    from jax.sharding import AbstractMesh

    from tunix_lite import sharding

    mesh = AbstractMesh(tuple(mesh_shape[a] for a in sharding.MESH_AXES), sharding.MESH_AXES)
    units = sharding.head_units(model)
    total = 0
    for _, var in nnx.to_flat_state(nnx.state(model, filter)):
        value = var.get_value()
        spec = sharding.variable_spec(var, mesh, units)
        split = math.prod(math.prod(mesh_shape[a]
                                    for a in ((axes,) if isinstance(axes, str) else axes))
                          for axes in spec if axes is not None)
        total += value.size * value.dtype.itemsize // split
    return total


# --------------------------------------------------------------------------- activations, estimated


def activation_bytes(config, rows: int, seq: int, *, tensor: int = 1, dtype_bytes: int = 4,
                     remat: bool = False, lora: bool = False) -> int:
    """Activations a training step keeps for its backward pass, per device, for `rows` sequences of
    `seq` tokens.

    Per block, what our Block computes and the backward reads (D model, F mlp, N/K query/kv heads of
    size H): ~8 [T, D] arrays (input, norms, attention and MLP outputs, residuals; +2 with Gemma's
    sandwich norms), 4 [T, F] (gate, up, activation, product), q/k/v before and after RoPE
    (2 (N + 2K) H), the attention output (N H), and the float32 scores and probabilities (2 N T per
    token, queries grouped per kv head). Heads and F split over `tensor`. With remat only each
    block's input survives, plus one block recomputed at a time. Frozen bases (LoRA) keep the same
    activations: the backward still needs them for the input gradients."""
    c = config
    tokens = rows * seq
    heads_split = tensor if c.num_heads % tensor == 0 else 1
    kv_split = tensor if c.num_kv_heads % tensor == 0 else 1
    mlp_split = tensor if c.mlp_dim % tensor == 0 else 1
    d_arrays = 8 + (2 if c.sandwich_norm else 0)
    per_token = (d_arrays * c.embed_dim + 4 * c.mlp_dim / mlp_split
                 + 2 * (c.num_heads / heads_split + 2 * c.num_kv_heads / kv_split) * c.head_dim
                 + c.num_heads / heads_split * c.head_dim) * dtype_bytes
    per_token += 2 * c.num_heads / heads_split * seq * 4  # float32 scores and probabilities
    block = tokens * per_token
    if remat:
        return int(c.num_layers * tokens * c.embed_dim * 4 + block)
    return int(c.num_layers * block + tokens * c.embed_dim * 4)  # + the final norm's input


def logits_bytes(config, rows: int, seq: int, *, tensor: int = 1, chunk: int | None = None) -> int:
    """The float32 [B, T, V] logits with their softmax (what the loss and its gradient hold), per
    device; with `chunk`, one [chunk, V] slice of each at a time plus the [B*T, D] input gradient
    the fused loss keeps."""
    vocab = config.vocab_size / (tensor if config.vocab_size % tensor == 0 else 1)
    if chunk:
        return int(2 * chunk * vocab * 4 + rows * seq * config.embed_dim * 4)
    return int(2 * rows * seq * vocab * 4)


def kv_cache_bytes(config, rows: int, length: int, *, tensor: int = 1, dtype_bytes: int = 4) -> int:
    """The sampler's KV cache: keys and values for every layer, `rows` sequences of `length` slots,
    per device."""
    kv = config.num_kv_heads / (tensor if config.num_kv_heads % tensor == 0 else 1)
    return int(2 * config.num_layers * rows * length * kv * config.head_dim * dtype_bytes)


# --------------------------------------------------------------------------- FLOPs and the roofline


def matmul_params(config) -> int:
    c = config
    per_layer = (c.embed_dim * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
                 + c.num_heads * c.head_dim * c.embed_dim)
    per_layer += 3 * c.embed_dim * c.mlp_dim
    # the lm head is a matmul, the lookup is not
    return c.num_layers * per_layer + c.embed_dim * c.vocab_size


def step_flops(config, batch: int, seq: int, *, frozen_base: bool = False,
               remat: bool = False) -> dict[str, float]:
    """{"model": the work a step needs (what MFU divides), "hardware": what it runs}. A full step
    is the conventional 6 N tokens + attention; a frozen base (LoRA) skips the weight gradients, 4
    N; remat runs one more forward, 2 N, which counts as hardware work only."""
    tokens = batch * seq
    attention = 12 * config.num_layers * config.num_heads * config.head_dim * seq * tokens
    n = matmul_params(config)
    model = (4 if frozen_base else 6) * n * tokens + attention
    hardware = model + (2 * n * tokens + attention / 3 if remat else 0)
    return {"model": float(model), "hardware": float(hardware)}


# ----------------------------------------------------------------------------- the plan


@dataclasses.dataclass
class Plan:
    model: str
    devices: str
    strategy: str
    mesh: dict[str, int]
    batch: int
    seq: int
    lora_rank: int | None
    memory: dict[str, int]  # bytes per device
    flops: dict[str, float]
    times: dict[str, float]  # seconds per step: compute, memory, collectives, roofline
    chip: Chip
    fits: dict[str, bool]  # every strategy on this device count
    # total bytes per device with remat and/or logits chunking, when not already on
    alternatives: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.memory.values())

    @classmethod
    def make(cls, model: str, devices: str, strategy: str = "fsdp", *, batch: int, seq: int,
             lora_rank: int | None = None, quantize: str | None = None, remat: bool = False,
             logits_chunk: int | None = None, compute_dtype: str = "bfloat16",
             micro_batches: int = 1, rollout: tuple[int, int] | None = None,
             tensor: int | None = None) -> "Plan":
        """rollout: (samples per prompt G, tokens generated) to add the sampler's KV cache for
        `batch` prompts of `seq` tokens."""
        from tunix_lite import sharding
        from tunix_lite.models import get_config

        chip, n = parse_devices(devices)
        config = get_config(model) if isinstance(model, str) else model
        memory = plan_memory(config, model, sharding.strategy_shape(strategy, n, tensor),
                             batch=batch, seq=seq, lora_rank=lora_rank, quantize=quantize,
                             remat=remat, logits_chunk=logits_chunk, compute_dtype=compute_dtype,
                             micro_batches=micro_batches, rollout=rollout)
        mesh = sharding.strategy_shape(strategy, n, tensor)
        flops = step_flops(config, batch, seq, frozen_base=bool(lora_rank), remat=remat)
        times = roofline(config, model, chip, mesh, batch=batch, seq=seq, flops=flops,
                         lora_rank=lora_rank, quantize=quantize, compute_dtype=compute_dtype,
                         micro_batches=micro_batches)
        fits = {}
        for name in sharding.STRATEGIES:
            try:
                shape = sharding.strategy_shape(name, n, tensor)
            except ValueError:
                continue
            if batch % (shape["data"] * shape["fsdp"] * micro_batches):
                continue
            used = sum(plan_memory(config, model, shape, batch=batch, seq=seq, lora_rank=lora_rank,
                                   quantize=quantize, remat=remat, logits_chunk=logits_chunk,
                                   compute_dtype=compute_dtype, micro_batches=micro_batches,
                                   rollout=rollout).values())
            fits[name] = chip.hbm_gib == 0 or used <= chip.hbm_gib * GiB
        alternatives = {}
        for name, options in (("--remat", dict(remat=True)),
                              ("--logits-chunk 1024", dict(logits_chunk=1024)),
                              ("both", dict(remat=True, logits_chunk=1024))):
            merged = dict(remat=remat, logits_chunk=logits_chunk) | options
            if merged != dict(remat=remat, logits_chunk=logits_chunk):
                alternatives[name] = sum(plan_memory(
                    config, model, mesh, batch=batch, seq=seq, lora_rank=lora_rank,
                    quantize=quantize, compute_dtype=compute_dtype, micro_batches=micro_batches,
                    rollout=rollout, **merged).values())
        return cls(model, devices, strategy, mesh, batch, seq, lora_rank, memory, flops, times,
                   chip, fits, alternatives)

    def report(self) -> str:
        """The table `tunix-lite plan` prints."""
        lines = [f"{self.model} on {self.devices} ({self.chip.name}), {self.strategy} mesh "
                 f"{self.mesh}, batch {self.batch} x {self.seq} tokens"
                 + (f", LoRA r={self.lora_rank}" if self.lora_rank else ""),
                 "", "memory per device"]
        for key, value in self.memory.items():
            lines.append(f"  {key:<34} {value / GiB:9.3f} GiB")
        lines.append(f"  {'total':<34} {self.total / GiB:9.3f} GiB"
                     + (f"   of {self.chip.hbm_gib:g} GiB" if self.chip.hbm_gib else ""))
        if self.alternatives:
            lines.append("  with " + ", ".join(f"{k}: {v / GiB:.2f} GiB"
                                               for k, v in self.alternatives.items()))
        lines += ["", (f"FLOPs per step: {self.flops['model']:.3g} needed, "
                       f"{self.flops['hardware']:.3g} run")]
        if self.chip.tflops:
            t = self.times
            lines += [f"roofline per step: compute {t['compute'] * 1e3:.1f} ms, "
                      f"HBM {t['memory'] * 1e3:.1f} ms, "
                      f"collectives {t['collectives'] * 1e3:.1f} ms -> {t['step'] * 1e3:.1f} ms "
                      f"({t['bound']}-bound), MFU at best {t['mfu']:.0%}",
                      f"tokens/s at best: {self.batch * self.seq / t['step']:,.0f}"]
        lines += ["", "strategies that fit: "
                  + (", ".join(k for k, v in self.fits.items() if v) or "none")
                  + ("; not: " + ", ".join(k for k, v in self.fits.items() if not v)
                     if not all(self.fits.values()) else "")]
        return "\n".join(lines)


def plan_memory(config, model: str, mesh: dict[str, int], *, batch: int, seq: int, lora_rank=None,
                quantize=None, remat=False, logits_chunk=None, compute_dtype="float32",
                micro_batches=1, rollout=None) -> dict[str, int]:
    """Bytes per device by category for one training step (see the module docstring)."""
    from flax import nnx

    from tunix_lite.quantize import QuantizedWeight

    abstract = abstract_model(model, lora_rank=lora_rank, quantize=quantize)
    trained = nnx.LoRAParam if lora_rank else nnx.Param
    stored = nnx.Any(nnx.Param, QuantizedWeight)
    weights = sharded_bytes(abstract, mesh, stored)
    trained_bytes = sharded_bytes(abstract, mesh, trained)
    rows = batch // (mesh["data"] * mesh["fsdp"]) // micro_batches
    dtype_bytes = 2 if compute_dtype == "bfloat16" else 4
    memory = {
        "parameters": weights,
        "gradients": trained_bytes,
        "optimizer state (AdamW)": 2 * trained_bytes,
        "updated copies (no donation)": 3 * trained_bytes,
        f"activations ({'remat' if remat else 'no remat'})": activation_bytes(
            config, rows, seq, tensor=mesh["tensor"], dtype_bytes=dtype_bytes, remat=remat),
        f"logits [B,T,V] ({'chunk ' + str(logits_chunk) if logits_chunk else 'whole'})":
            logits_bytes(config, rows, seq, tensor=mesh["tensor"], chunk=logits_chunk),
    }
    # each weight is gathered for the forward and kept for the backward, and the gradients exist
    # whole until they are reduce-scattered: the full (per tensor shard) minus the shard already
    # counted
    if mesh["fsdp"] > 1:
        whole = dict(mesh, fsdp=1)
        memory["gathered weights (fsdp)"] = sharded_bytes(abstract, whole, stored) - weights
        memory["gradients before reduce-scatter"] = (sharded_bytes(abstract, whole, trained)
                                                     - trained_bytes)
    if rollout:
        samples, new_tokens = rollout
        memory["rollout KV cache"] = kv_cache_bytes(
            config, batch * samples // (mesh["data"] * mesh["fsdp"]), seq + new_tokens,
            tensor=mesh["tensor"], dtype_bytes=dtype_bytes)
    return memory


def roofline(config, model, chip: Chip, mesh: dict[str, int], *, batch: int, seq: int, flops: dict,
             lora_rank=None, quantize=None, compute_dtype="bfloat16",
             micro_batches=1) -> dict[str, float]:
    """Seconds per step for compute, HBM traffic and collectives; the step is the slowest
    (perfect overlap)."""
    if not chip.tflops:
        return {}
    from flax import nnx

    from tunix_lite.quantize import QuantizedWeight

    n = mesh["data"] * mesh["fsdp"] * mesh["tensor"]
    abstract = abstract_model(model, lora_rank=lora_rank, quantize=quantize)
    weights_all = sharded_bytes(abstract, {"data": 1, "fsdp": 1, "tensor": 1},
                                nnx.Any(nnx.Param, QuantizedWeight))
    trained = sharded_bytes(abstract, mesh, nnx.LoRAParam if lora_rank else nnx.Param)
    trained_all = sharded_bytes(abstract, {"data": 1, "fsdp": 1, "tensor": 1},
                                nnx.LoRAParam if lora_rank else nnx.Param)
    s = 2 if compute_dtype == "bfloat16" else 4
    rows = batch // (mesh["data"] * mesh["fsdp"])
    compute = flops["hardware"] / (n * chip.tflops * 1e12)
    # HBM: the (gathered) weights read forward and twice backward per micro-batch, the optimizer's
    # read-modify-write of parameters, gradients and two moments, and the activations written once
    # and read once.
    weights_seen = weights_all / mesh["tensor"] * s / 4
    traffic = 3 * weights_seen * micro_batches + 7 * trained + 2 * activation_bytes(
        config, rows, seq, tensor=mesh["tensor"], dtype_bytes=s)
    memory = traffic / (chip.hbm_gbps * 1e9)
    # Collectives (ring): FSDP gathers every weight forward and backward and reduce-scatters the
    # gradients; data parallelism all-reduces the gradients; TP all-reduces [B, T, D] activations
    # twice forward and twice backward per block.
    volume = 0.0
    f, d, t = mesh["fsdp"], mesh["data"], mesh["tensor"]
    if f > 1:
        volume += (2 * micro_batches * (f - 1) / f * weights_all / t * s / 4
                   + (f - 1) / f * trained_all / t)
    if d > 1:
        volume += 2 * (d - 1) / d * trained * 1.0
    if t > 1:
        volume += 4 * config.num_layers * 2 * (t - 1) / t * rows * seq * config.embed_dim * s
    collectives = volume / (chip.link_gbps * 1e9)
    step = max(compute, memory, collectives)
    bound = {compute: "compute", memory: "HBM", collectives: "collective"}[step]
    return {"compute": compute, "memory": memory, "collectives": collectives, "step": step,
            "bound": bound, "mfu": flops["model"] / (step * n * chip.tflops * 1e12)}


# ----------------------------------------------------------------------------- what XLA says


def xla_memory(model, *, batch: int, seq: int, lora_rank: int | None = None,
               quantize: str | None = None, remat: bool = False, logits_chunk: int | None = None,
               mesh=None) -> dict[str, int]:
    """XLA's own memory plan for the real training step (AdamW) of `model` (a preset name or
    ModelConfig), per device: {"arguments", "outputs", "temporaries", "peak"} bytes from
    `compiled.memory_analysis()`. Builds the model with random weights: use small shapes."""
    import numpy as np
    import optax
    from flax import nnx

    from tunix_lite.lora import apply_lora
    from tunix_lite.models import Transformer, get_config, set_training_options
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import Trainer

    config = get_config(model) if isinstance(model, str) else model
    m = Transformer(config, rngs=nnx.Rngs(0))
    if lora_rank:
        apply_lora(m, rank=lora_rank, alpha=2.0 * lora_rank, quantize=quantize, rngs=nnx.Rngs(1))
    set_training_options(m, remat=remat, logits_chunk=logits_chunk or 0)
    trainer = Trainer(m, optax.adamw(1e-4), lm_loss, wrt=nnx.LoRAParam if lora_rank else nnx.Param,
                      mesh=mesh)
    tokens = np.zeros((batch, seq + 1), np.int32)
    rows = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
            "weights": np.ones((batch, seq), np.float32),
            "positions": np.tile(np.arange(seq, dtype=np.int32), (batch, 1))}
    stats = trainer.lower(rows).compile().memory_analysis()
    out = {"arguments": stats.argument_size_in_bytes, "outputs": stats.output_size_in_bytes,
           "temporaries": stats.temp_size_in_bytes}
    return out | {"peak": out["arguments"] + out["outputs"] + out["temporaries"]
                          - stats.alias_size_in_bytes}


def against_xla(model, *, batch: int, seq: int, mesh=None, **options) -> dict[str, int]:
    """{"xla": XLA's peak bytes per device for the real step (`xla_memory`), "planned": the plan's
    total for the same step (float32, as it compiles there)}. `mesh`: a jax Mesh, or None for one
    device; `options`: lora_rank, quantize, remat, logits_chunk."""
    from tunix_lite.models import get_config

    config = get_config(model) if isinstance(model, str) else model
    shape = dict(mesh.shape) if mesh is not None else {"data": 1, "fsdp": 1, "tensor": 1}
    planned = sum(plan_memory(config, model, shape, batch=batch, seq=seq, compute_dtype="float32",
                              **options).values())
    return {"xla": xla_memory(model, batch=batch, seq=seq, mesh=mesh, **options)["peak"],
            "planned": planned}


# ------------------------------------------------------------- what XLA sends: a step's collectives

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+) = (.*?) ([a-z][\w\-]*)\((.*)$")


def list_collectives(hlo_text: str) -> list[tuple[str, str]]:
    """(kind, shape) of every array (scalars left out) a collective moves in a compiled module's HLO
    text (`jit(f).lower(...).compile().as_text()`). Arrays, not ops: XLA combines many small
    collectives into one op over a tuple, which would hide how many weights or gradients travel; an
    all-to-all counts once.

    A reduce-scatter is counted also where XLA:CPU spells it as an all-reduce whose result is only
    sliced (a dynamic-slice, possibly inside a fusion); TPU and GPU compilers fuse that pair into
    one reduce-scatter."""
    ops, users, bodies, current = {}, {}, {}, None
    for line in hlo_text.splitlines():
        header = re.match(r"^(?:ENTRY\s+)?%([\w.\-]+) .*\{\s*$", line)
        if header:
            current = header.group(1)
            bodies[current] = []
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, shape, opcode, rest = match.groups()
        ops[name] = (opcode.removesuffix("-start"), shape, rest)
        if current is not None:
            bodies[current].append(opcode)
        for operand in re.findall(r"%([\w.\-]+)", rest.split("metadata=")[0]):
            users.setdefault(operand, []).append(name)

    def is_array(shape: str) -> bool:  # f32[256,64]{1,0} yes, f32[] no
        return re.match(r"^\w+\[[^\]]", shape) is not None

    def only_sliced(name: str) -> bool:
        consumers = users.get(name, [])
        for consumer in consumers:
            opcode, _, rest = ops[consumer]
            called = re.search(r"calls=%([\w.\-]+)", rest)
            fused_slice = (opcode == "fusion" and called
                           and "dynamic-slice" in bodies.get(called.group(1), []))
            if not (opcode == "dynamic-slice" or fused_slice):
                return False
        return bool(consumers)

    found = []
    for name, (opcode, shape, _) in ops.items():
        if opcode not in COLLECTIVES:
            continue
        if opcode == "all-to-all" or not shape.startswith("("):
            elements = [(name, shape)] if is_array(shape) or opcode == "all-to-all" else []
        else:  # a combined op: one array per tuple element, read by get-tuple-element
            elements = [(u, ops[u][1]) for u in users.get(name, [])
                        if ops[u][0] == "get-tuple-element" and is_array(ops[u][1])]
        for element, element_shape in elements:
            kind = "reduce-scatter" if opcode == "all-reduce" and only_sliced(element) else opcode
            found.append((kind, element_shape.split("{")[0]))
    return found


def count_collectives(hlo_text: str) -> dict[str, int]:
    """{kind: arrays moved} over `list_collectives`, every kind present (0 when absent)."""
    counts = dict.fromkeys(COLLECTIVES, 0)
    for kind, _ in list_collectives(hlo_text):
        counts[kind] += 1
    return counts
