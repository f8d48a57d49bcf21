"""GRPO's loss against TRL's own implementation (trl 1.16, test-only): on the same fixed log-probs, advantages and
masks, `grpo_objective` gives the same value and the same gradient with respect to the policy's log-probs, for
each aggregation TRL implements (grpo, bnpo, dapo, dr_grpo), with GSPO's sequence-level ratio, clip-higher and
the k3 KL.

TRL's `GRPOTrainer._compute_loss` runs unmodified; only the model call is replaced by the fixed log-probs (a
stand-in object provides the attributes the method reads), so no model or tokenizer is needed."""

from collections import defaultdict
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tunix_lite.rl.losses import grpo_objective

torch = pytest.importorskip("torch")
trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")

pytestmark = pytest.mark.reference

# TRL loss_type -> our aggregation
AGGREGATION = {"grpo": "sequence-mean-token-mean", "bnpo": "token-mean", "dapo": "token-mean",
               "dr_grpo": "sequence-mean-token-sum-norm"}


class _TRLStandIn:
    """The attributes GRPOTrainer._compute_loss reads, for one process without gradient accumulation."""

    def __init__(self, logps, *, loss_type, level, beta, eps_low, eps_high, max_len):
        self._logps = logps
        self.loss_type, self.importance_sampling_level, self.beta = loss_type, level, beta
        self.epsilon_low, self.epsilon_high, self.max_completion_length = eps_low, eps_high, max_len
        self.args = SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1)
        self.top_entropy_quantile, self.off_policy_mask_threshold = 1.0, None
        self.use_vllm = self.vllm_importance_sampling_correction = False
        self.model = SimpleNamespace(training=True)
        self.current_gradient_accumulation_steps = 1
        self.accelerator = SimpleNamespace(num_processes=1, gather=lambda x: x, reduce=lambda x, reduction: x,
                                           gather_for_metrics=lambda x: x)
        self._entropy_bonus_enabled = self.aux_loss_enabled = False
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return self._logps, torch.zeros_like(self._logps), None


def _inputs(seed):
    """B = 6 completions of up to C = 7 tokens (ragged), log-probs with the policy moved away from the old one so
    that both clip bounds act, a reference further away still."""
    rng = np.random.default_rng(seed)
    B, C = 6, 7
    lengths = rng.integers(1, C + 1, size=B)
    mask = (np.arange(C)[None] < lengths[:, None]).astype(np.float32)
    old = (rng.normal(size=(B, C)) - 2.0).astype(np.float32)
    logp = (old + rng.normal(size=(B, C)) * 0.4).astype(np.float32)
    ref = (old + rng.normal(size=(B, C)) * 0.6).astype(np.float32)
    advantages = rng.normal(size=B).astype(np.float32)
    return logp, old, ref, advantages, mask


def _trl(logp, old, ref, advantages, mask, *, loss_type, level, beta, eps_low, eps_high):
    logps = torch.tensor(logp, requires_grad=True)
    stand_in = _TRLStandIn(logps, loss_type=loss_type, level=level, beta=beta, eps_low=eps_low, eps_high=eps_high,
                           max_len=mask.shape[1])
    B, C = mask.shape
    inputs = {"prompt_ids": torch.ones((B, 2), dtype=torch.long), "prompt_mask": torch.ones((B, 2)),
              "completion_ids": torch.ones((B, C), dtype=torch.long), "completion_mask": torch.tensor(mask),
              "advantages": torch.tensor(advantages), "old_per_token_logps": torch.tensor(old),
              "ref_per_token_logps": torch.tensor(ref), "num_items_in_batch": torch.tensor(mask.sum())}
    loss = trl_grpo.GRPOTrainer._compute_loss(stand_in, None, inputs)
    loss.backward()
    return float(loss.detach()), logps.grad.numpy()


def _ours(logp, old, ref, advantages, mask, *, loss_type, level, beta, eps_low, eps_high):
    def loss(lp):
        return grpo_objective(lp, jnp.asarray(old), jnp.asarray(ref), jnp.asarray(advantages), jnp.asarray(mask),
                              epsilon_low=eps_low, epsilon_high=eps_high, beta=beta, kl_estimator="k3",
                              aggregation=AGGREGATION[loss_type], ratio_level=level, max_tokens=mask.shape[1])[0]
    value, grad = jax.value_and_grad(loss)(jnp.asarray(logp))
    return float(value), np.asarray(grad)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", sorted(AGGREGATION))
def test_grpo_loss_value_and_gradient_match_trl(loss_type, beta, level):
    arrays = _inputs(seed=sorted(AGGREGATION).index(loss_type) * 4 + int(beta > 0) * 2 + (level == "sequence"))
    options = dict(loss_type=loss_type, level=level, beta=beta, eps_low=0.2, eps_high=0.28)
    trl_value, trl_grad = _trl(*arrays, **options)
    value, grad = _ours(*arrays, **options)
    assert value == pytest.approx(trl_value, rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(grad, trl_grad, rtol=1e-4, atol=1e-7)
    assert np.any(grad != 0)


def test_the_comparison_is_sensitive():
    """Changing the aggregation or the clip bound moves the value away from TRL's: the parity above is not vacuous."""
    arrays = _inputs(seed=3)
    trl_value, _ = _trl(*arrays, loss_type="grpo", level="token", beta=0.04, eps_low=0.2, eps_high=0.28)
    for change in ({"loss_type": "bnpo"}, {"eps_high": 0.2}):
        options = dict(loss_type="grpo", level="token", beta=0.04, eps_low=0.2, eps_high=0.28) | change
        assert _ours(*arrays, **options)[0] != pytest.approx(trl_value, rel=1e-4)
