"""Sharded == unsharded on 8 fake CPU devices (run in a subprocess: the device count is fixed when
jax initialises, and the rest of the suite runs on one device)."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from flax import nnx
    assert jax.device_count() == 8, jax.devices()
    from tunix_lite import sharding
    from tunix_lite.models import Transformer, get_config
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import Trainer, adamw_cosine

    config = get_config("tiny").replace(num_layers=2, vocab_size=256)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, (8, 17)).astype(np.int32)
    batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": np.ones((8, 16), np.float32),
             "positions": np.tile(np.arange(16, dtype=np.int32), (8, 1)), "segment_ids": np.zeros((8, 16), np.int32)}

    def run(mesh):
        model = Transformer(config, rngs=nnx.Rngs(0))
        if mesh is None:
            logits = nnx.jit(lambda m, t: m(t))(model, batch["inputs"])
            trainer = Trainer(model, adamw_cosine(1e-2, 10), lm_loss)
            trainer.step(batch)
            return np.asarray(logits), np.asarray(model.layers[0].mlp.up_proj.kernel[...])
        with jax.set_mesh(mesh):
            sharding.shard_model(model, mesh)
            data = sharding.shard_batch(batch, mesh)
            logits = nnx.jit(lambda m, t: m(t))(model, data["inputs"])
            assert len(logits.sharding.device_set) == 8
            trainer = Trainer(model, adamw_cosine(1e-2, 10), lm_loss)
            trainer.step(data)
            kernel = model.layers[0].mlp.up_proj.kernel[...]
            expected = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("fsdp", "tensor"))
            assert kernel.sharding.is_equivalent_to(expected, 2), kernel.sharding  # still sharded after the update
            return np.asarray(logits), np.asarray(kernel)

    ref_logits, ref_kernel = run(None)
    for shape in [dict(data=2, fsdp=2, tensor=2), dict(data=1, fsdp=8, tensor=1), dict(data=1, fsdp=2, tensor=4)]:
        logits, kernel = run(sharding.make_mesh(**shape))
        np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(kernel, ref_kernel, rtol=1e-4, atol=1e-5)
        print("ok", shape)
""")


@pytest.mark.slow
def test_sharded_forward_and_train_step_equal_unsharded():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("ok") == 3


def test_mesh_errors_and_suggestion():
    from tunix_lite.sharding import make_mesh, suggest_mesh

    assert suggest_mesh(8) == {"data": 1, "fsdp": 8, "tensor": 1}
    with pytest.raises(ValueError, match="needs 6 devices"):
        make_mesh(data=2, fsdp=3, tensor=1)
