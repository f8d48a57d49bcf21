"""One process of the 2-process CPU run behind tests/test_sharding.py (JAX's own runtime, gloo collectives):

    python tests/multiprocess_checks.py PROCESS_ID NUM_PROCESSES PORT WORKDIR [MODEL]

Each process has 2 CPU devices; together they form one 4-device mesh. Process 0 also computes the single-process
reference on its own first device. Results go to WORKDIR/process_<id>.json. MODEL (default tiny): what the run
harness part trains.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

process_id, num_processes, port, workdir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
harness_model = sys.argv[5] if len(sys.argv) > 5 else "tiny"
os.environ.update(JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES=str(num_processes),
                  JAX_PROCESS_ID=str(process_id))

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 2)

from tunix_lite import sharding  # noqa: E402

assert sharding.initialize_distributed()

import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from tunix_lite.models import Transformer, get_config  # noqa: E402
from tunix_lite.training.checkpoint import Checkpoints  # noqa: E402
from tunix_lite.training.losses import lm_loss  # noqa: E402
from tunix_lite.training.trainer import Trainer  # noqa: E402

CONFIG = get_config("tiny").replace(num_layers=1, vocab_size=256, embed_dim=128, num_heads=4, head_dim=32, mlp_dim=256)
tokens = np.random.default_rng(0).integers(0, 256, (8, 17)).astype(np.int32)
BATCH = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": np.ones((8, 16), np.float32),
         "positions": np.tile(np.arange(16, dtype=np.int32), (8, 1))}  # every process passes the same global batch
results: dict = {"process_count": jax.process_count(), "devices": jax.device_count(),
                 "local_devices": jax.local_device_count()}


def trainer_on(mesh, tx=None):
    return Trainer(Transformer(CONFIG, rngs=nnx.Rngs(0)), tx or optax.adamw(1e-2), lm_loss, mesh=mesh)


def params(trainer) -> dict:
    """Every parameter gathered from all processes (each process joins)."""
    return {".".join(map(str, p)): sharding.to_host(v.get_value())
            for p, v in nnx.to_flat_state(nnx.state(trainer.model, nnx.Param))}


try:
    mesh = sharding.make_mesh(data=2, fsdp=2)  # rows over all 4 devices, weights split over each process's pair
    trainer = trainer_on(mesh)
    results["kernel_spec"] = str(trainer.model.layers[0].mlp.up_proj.kernel.get_value().sharding.spec)
    results["loss"] = float(trainer.step(BATCH)["loss"])
    after = params(trainer)
    checkpoints = Checkpoints(f"{workdir}/checkpoints", every=1)
    trainer.save(checkpoints, force=True)
    checkpoints.wait()
    # restore onto another mesh shape: weights split 4 ways, across the processes
    other = trainer_on(sharding.make_mesh(fsdp=4))
    meta = other.restore(checkpoints)
    restored = params(other)
    results["restored_step"] = meta["step"]
    results["restore_error"] = max(float(np.max(np.abs(restored[k] - after[k]))) for k in after)
    results["second_loss"] = float(trainer.step(BATCH)["loss"])
    results["second_loss_restored"] = float(other.step(BATCH)["loss"])
    # the same SGD step (an update equal to -lr x gradient) on the 4 devices and, in process 0, on one device alone
    sgd = trainer_on(mesh, optax.sgd(0.5))
    results["sgd_loss"] = float(sgd.step(BATCH)["loss"])
    after = params(sgd)
    if process_id == 0:
        single = trainer_on(None, optax.sgd(0.5))
        results["reference_loss"] = float(single.step(BATCH)["loss"])
        reference = params(single)
        results["param_error"] = max(float(np.max(np.abs(reference[k] - after[k]))) for k in after)
        results["param_scale"] = max(float(np.max(np.abs(v))) for v in reference.values())
except Exception:
    results["error"] = traceback.format_exc()

try:  # the run harness: every process runs the same config; process 0 alone prints, logs and exports
    import contextlib
    import io

    from tunix_lite.training.sft import SFTConfig, run_sft

    config = SFTConfig(model=harness_model, mesh="fsdp", steps=2, warmup_steps=0, batch_size=4, n_train=16, n_validation=4,
                       seq_len=64, truncation="truncate", n_accuracy=0, eval_every=0, log_every=1, checkpoint_every=1,
                       output_dir=f"{workdir}/run")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = run_sft(config)
    results["harness"] = {"printed": printed.getvalue(), "steps": len(result.history),
                          "loss": [h["loss"] for h in result.history], "after": result.after}
except Exception:
    results["harness_error"] = traceback.format_exc()

with open(f"{workdir}/process_{process_id}.json", "w") as f:
    json.dump(results, f)
jax.distributed.shutdown()
