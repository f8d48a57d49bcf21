"""Packing, the next-token loss, and the trainer core's basic contract (a fuller suite arrives with SFT)."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lite.data.packing import pack_documents
from tunix_lite.models import Transformer
from tunix_lite.training.losses import lm_loss, next_token_loss
from tunix_lite.training.trainer import Trainer, adamw_cosine, check_batch

from test_model import small_config


def test_packing_rows_segments_and_boundary_weights():
    docs = [[2, 10, 11, 1], [2, 20, 1], [2, 30, 31, 32, 1]]
    (batch,) = list(pack_documents(docs, seq_len=5, batch_size=2))
    assert batch["inputs"].shape == (2, 5)
    assert batch["inputs"][0].tolist() == [2, 10, 11, 1, 2] and batch["targets"][0].tolist() == [10, 11, 1, 2, 20]
    # the target "2" starts a new document: not predicted from the previous one
    assert batch["weights"][0].tolist() == [1, 1, 1, 0, 1]
    assert batch["positions"][0].tolist() == [0, 1, 2, 3, 0]
    assert batch["segment_ids"][0].tolist() == [1, 1, 1, 1, 2]  # 0 is padding everywhere in tunix_lite.data
    assert batch["inputs"][1, 0] == batch["targets"][0, -1]  # rows continue the stream without a gap


def test_next_token_loss_closed_form():
    logits = jnp.log(jnp.array([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]]))
    loss, metrics = next_token_loss(logits, jnp.array([[0, 1]]), jnp.array([[1.0, 0.0]]))
    assert float(loss) == pytest.approx(np.log(2), rel=1e-6)  # the masked position does not count
    assert float(metrics["count"]) == 1.0


def test_trainer_lowers_the_loss_on_a_memorisable_batch():
    model = Transformer(small_config(), rngs=nnx.Rngs(0))
    tokens = np.random.default_rng(0).integers(0, 97, (4, 17)).astype(np.int32)
    batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:], "weights": np.ones((4, 16), np.float32),
             "positions": np.tile(np.arange(16, dtype=np.int32), (4, 1))}
    trainer = Trainer(model, adamw_cosine(1e-2, 30, warmup_steps=3), lm_loss)
    history = trainer.fit(iter([batch] * 30), 30)
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]


def test_strings_never_reach_jit():
    with pytest.raises(TypeError, match=r"batch\['text'\] has dtype <U5"):
        check_batch({"inputs": np.zeros((2, 4), np.int32), "text": np.array(["hello", "world"])})
    with pytest.raises(TypeError, match=r"batch\['inputs'\] has dtype object.*pad ragged rows"):
        check_batch({"inputs": np.array([[1, 2], [3]], dtype=object)})
    with pytest.raises(ValueError, match=r"batch\['targets'\] has shape \(3, 4\): 3 rows, expected 2"):
        check_batch({"inputs": np.zeros((2, 4), np.int32), "targets": np.zeros((3, 4), np.int32)})
    # per-row keys (a DPO pair's reference log-prob, a GRPO advantage) sit beside per-token ones
    check_batch({"inputs": np.zeros((2, 4), np.int32), "advantages": np.zeros(2, np.float32)})
