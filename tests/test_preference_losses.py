"""The preference losses on fixed log-probs: closed-form values, and parity with TRL 1.16 (a test-only reference)
in value, metrics and gradient for every loss TRL also implements: DPO sigmoid, IPO, hinge, robust, ORPO's odds-ratio
term, SimPO and KTO. TRL is driven through its own trainer methods on the same log-probs (a stand-in model returns
them), so the comparison covers its masking, length normalisation and reductions, not a re-typed formula."""

import collections
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tunix_lite.preference import losses
from tunix_lite.preference.dpo import PreferenceLoss

B, T = 5, 7
RTOL = 2e-5  # float32 noise: both sides compute in float32


def fixed_inputs(seed=0):
    """Per-token log-probs [B, 2, T] of policy and reference, completion masks of ragged lengths (row 0: prompt)."""
    rng = np.random.default_rng(seed)
    policy = (rng.normal(size=(B, 2, T)) * 0.5 - 1.5).astype(np.float32)
    reference = (policy + rng.normal(size=(B, 2, T)) * 0.3).astype(np.float32)
    weights = np.zeros((B, 2, T), np.float32)
    for b in range(B):
        for j in range(2):
            weights[b, j, rng.integers(1, 3):rng.integers(4, T + 1)] = 1.0
    return policy, reference, weights


def ours(loss_type, policy, reference, weights, label=None, **settings):
    fn = PreferenceLoss(loss_type, **settings)
    counts = jnp.asarray(weights.sum(-1))
    ref_sums = losses.completion_log_probs(jnp.asarray(reference), jnp.asarray(weights))

    def loss(tokens):
        sums = losses.completion_log_probs(tokens, jnp.asarray(weights))
        return fn.loss_from_sums(sums, counts, ref_sums, None if label is None else jnp.asarray(label))

    (value, metrics), grad = jax.jit(jax.value_and_grad(loss, has_aux=True))(jnp.asarray(policy))
    return float(value), {k: float(v) for k, v in metrics.items()}, np.asarray(grad)


# ----------------------------------------------------------------------------- closed forms


def test_policy_equal_to_reference_gives_log2_and_zero_margin():
    policy, _, weights = fixed_inputs()
    value, metrics, _ = ours("sigmoid", policy, policy, weights)
    assert value == pytest.approx(math.log(2), rel=1e-6)
    assert metrics["rewards/margins"] == 0 and metrics["rewards/accuracies"] == 0 and metrics["kl"] == 0
    assert metrics["count"] == B
    ipo_value, _, _ = ours("ipo", policy, policy, weights, beta=0.25)
    assert ipo_value == pytest.approx((1 / (2 * 0.25)) ** 2, rel=1e-6)  # (0 - 1/(2 tau))^2
    hinge_value, _, _ = ours("hinge", policy, policy, weights)
    assert hinge_value == pytest.approx(1.0)


def test_hand_computed_values():
    """One pair, log-probs chosen to make every formula easy to evaluate by hand."""
    one = dict(valid=jnp.ones(1))
    c, r, rc, rr = jnp.array([-3.0]), jnp.array([-5.0]), jnp.array([-4.0]), jnp.array([-4.0])  # h = 1 - (-1) = 2
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert float(losses.sigmoid(c, r, rc, rr, **one, beta=0.5)[0]) == pytest.approx(-math.log(sig(1.0)), rel=1e-6)
    cdpo = -(0.9 * math.log(sig(1.0)) + 0.1 * math.log(sig(-1.0)))
    assert float(losses.sigmoid(c, r, rc, rr, **one, beta=0.5, label_smoothing=0.1)[0]) == pytest.approx(cdpo, rel=1e-6)
    rdpo = (-0.9 * math.log(sig(1.0)) + 0.1 * math.log(sig(-1.0))) / 0.8
    assert float(losses.robust(c, r, rc, rr, **one, beta=0.5, label_smoothing=0.1)[0]) == pytest.approx(rdpo, rel=1e-6)
    assert float(losses.ipo(c, r, rc, rr, **one, beta=0.5)[0]) == pytest.approx((2 - 1) ** 2)
    assert float(losses.hinge(c, r, rc, rr, **one, beta=0.25)[0]) == pytest.approx(0.5)
    assert float(losses.hinge(c, r, rc, rr, **one, beta=1.0)[0]) == 0.0  # ranked with margin >= 1/beta
    # DPOP: chosen above its reference, no penalty (DPO itself); chosen 1 below it, h = -1 - (-3) = 2 shrinks by lambda
    dpop_value = float(losses.dpop(c, r, rc, rr, **one, beta=0.5, lam=50.0)[0])
    assert dpop_value == pytest.approx(-math.log(sig(1.0)), rel=1e-6)
    fell = jnp.array([-5.0]), jnp.array([-7.0]), jnp.array([-4.0]), jnp.array([-4.0])
    loss, metrics = losses.dpop(*fell, **one, beta=0.5, lam=1.5)
    assert metrics["dpop_penalty"] == 1.0 and float(loss) == pytest.approx(-math.log(sig(0.5 * (2 - 1.5))), rel=1e-6)
    # SimPO on per-token means -1 and -2: -log sigmoid(2 * 1 - 0.5)
    assert float(losses.simpo(jnp.array([-1.0]), jnp.array([-2.0]), **one, beta=2.0, gamma=0.5)[0]) == pytest.approx(
        -math.log(sig(1.5)), rel=1e-6)
    # ORPO: P_w = 1/2 and P_l = 1/4 give odds 1 and 1/3: log odds ratio = log 3
    loss, metrics = losses.orpo(jnp.log(jnp.array([0.5])), jnp.log(jnp.array([0.25])), jnp.array([0.7]), **one, lam=0.1)
    assert metrics["log_odds_chosen"] == pytest.approx(math.log(3), rel=1e-6)
    assert float(loss) == pytest.approx(0.7 - 0.1 * math.log(sig(math.log(3))), rel=1e-6)
    # KTO: a desirable example with ratio 1 and z = max(0, mean(-2)) = 0: 1 - sigmoid(beta * 1)
    loss, metrics = losses.kto(jnp.array([-3.0]), jnp.array([-4.0]), jnp.array([-6.0]), jnp.array([-4.0]),
                               jnp.array([1.0]), **one, beta=0.5)
    assert metrics["kl"] == 0.0 and float(loss) == pytest.approx(1 - sig(0.5), rel=1e-6)


def test_dpop_pushes_a_fallen_chosen_completion_up_harder():
    """At equal logits, DPOP's gradient on log π(y_w) is (1 + λ) times DPO's once y_w falls below the reference, and
    DPO's own while it has not; on the rejected side both are the same."""
    ones, beta, lam = jnp.ones(2), 0.5, 3.0
    chosen, rejected = jnp.array([-3.0, -5.0]), jnp.array([-6.0, -6.0])  # pair 0 above its reference, pair 1 below
    ref_chosen, ref_rejected = jnp.array([-4.0, -4.0]), jnp.array([-4.0, -4.0])
    dpop_grad = jax.grad(lambda c, r: losses.dpop(c, r, ref_chosen, ref_rejected, ones, beta=beta, lam=lam)[0],
                         argnums=(0, 1))(chosen, rejected)
    # DPO at DPOP's logits: the same h less the penalty, which shifts the rejected side's log-prob by lam * penalty
    shifted = rejected + lam * jax.nn.relu(ref_chosen - chosen)
    dpo_grad = jax.grad(lambda c, r: losses.sigmoid(c, r, ref_chosen, ref_rejected, ones, beta=beta)[0],
                        argnums=(0, 1))(chosen, shifted)
    np.testing.assert_allclose(dpop_grad[0], dpo_grad[0] * jnp.array([1.0, 1 + lam]), rtol=1e-6)
    np.testing.assert_allclose(dpop_grad[1], dpo_grad[1], rtol=1e-6)


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge", "dpop", "orpo", "simpo", "kto"])
def test_padded_pairs_add_nothing(loss_type):
    """Appending all-padding pairs (no completion tokens) changes neither the loss, the metrics nor the gradient."""
    policy, reference, weights = fixed_inputs(1)
    label = np.array([1, 0, 1, 1, 0], np.float32)
    pad = lambda x, v=0.0: np.concatenate([x, np.full((3, *x.shape[1:]), v, x.dtype)])  # noqa: E731
    value, metrics, grad = ours(loss_type, policy, reference, weights, label=label)
    value_p, metrics_p, grad_p = ours(loss_type, pad(policy, -1.0), pad(reference, -1.0), pad(weights),
                                      label=pad(label, 1.0))
    assert value_p == pytest.approx(value, rel=1e-6) and metrics_p["count"] == metrics["count"] == B
    for key in metrics:
        assert metrics_p[key] == pytest.approx(metrics[key], rel=1e-5, abs=1e-7), key
    np.testing.assert_allclose(grad_p[:B], grad, rtol=1e-5, atol=1e-8)
    assert np.all(grad_p[B:] == 0) and np.all(np.isfinite(grad_p))


# ----------------------------------------------------------------------------- parity with TRL 1.16


class _Accelerator:
    def __init__(self, torch):
        self.device = torch.device("cpu")

    def gather(self, x):
        return x

    gather_for_metrics = gather


def _trl_self(torch, **attrs):
    """The attributes TRL's loss methods read from the trainer, without building one (no model, no dataset)."""
    metrics = collections.defaultdict(lambda: collections.defaultdict(list))
    return types.SimpleNamespace(model=types.SimpleNamespace(training=True), accelerator=_Accelerator(torch),
                                 aux_loss_enabled=False, _metrics=metrics, _total_train_tokens=0, _tp_size=1, **attrs)


def _model_outputs(torch, log_probs):
    """What TRL's fused-lm-head forward returns, with our per-token log-probs."""
    zeros = torch.zeros(log_probs.shape)
    return types.SimpleNamespace(log_probs=log_probs, entropy=zeros, mean_logits=zeros,
                                 is_top1=torch.zeros(log_probs.shape, dtype=torch.bool))


def _trl_rows(torch, x):
    """[B, 2, T] -> TRL's concatenated layout [2B, T]: all chosen rows, then all rejected rows."""
    return torch.tensor(np.concatenate([x[:, 0], x[:, 1]]))


def _prompt_column(torch, mask):
    """TRL's completion_mask covers input_ids, one token longer than the targets: prepend a prompt token."""
    return torch.cat([torch.zeros(mask.shape[0], 1, dtype=mask.dtype), mask], dim=1)


def _from_trl_rows(grad):
    n = grad.shape[0] // 2
    return np.stack([grad[:n], grad[n:]], axis=1)


@pytest.mark.reference
@pytest.mark.parametrize("loss_type,settings", [
    ("sigmoid", dict(beta=0.1)), ("sigmoid", dict(beta=0.7)), ("ipo", dict(beta=0.3)), ("hinge", dict(beta=0.4)),
    ("robust", dict(beta=0.2, label_smoothing=0.2))])
def test_dpo_losses_match_trl(loss_type, settings):
    torch = pytest.importorskip("torch")
    from trl.trainer.dpo_trainer import DPOTrainer

    policy, reference, weights = fixed_inputs(2)
    mask = _trl_rows(torch, weights).long()
    raw = _trl_rows(torch, policy).requires_grad_(True)
    ref_sums = (_trl_rows(torch, reference) * mask).sum(1)
    me = _trl_self(torch, ld_alpha=None, precompute_ref_logps=True, f_divergence_type="reverse_kl",
                   loss_types=[loss_type], loss_weights=[1.0], use_weighting=False,
                   label_smoothing=settings.get("label_smoothing", 0.0), beta=settings["beta"])
    inputs = {"input_ids": torch.ones(2 * B, T + 1, dtype=torch.long), "attention_mask": torch.ones(2 * B, T + 1),
              "completion_mask": _prompt_column(torch, mask), "ref_chosen_logps": ref_sums[:B],
              "ref_rejected_logps": ref_sums[B:]}
    loss = DPOTrainer._compute_loss(me, lambda **kw: _model_outputs(torch, raw * mask), inputs, False)
    loss.backward()
    trl = {k: v[-1] for k, v in me._metrics["train"].items()}

    value, metrics, grad = ours(loss_type, policy, reference, weights, **settings)
    assert value == pytest.approx(loss.item(), rel=RTOL)
    for key in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
                "logps/rejected"):
        assert metrics[key] == pytest.approx(trl[key], rel=RTOL, abs=1e-6), key
    np.testing.assert_allclose(grad, _from_trl_rows(raw.grad.numpy()), rtol=RTOL, atol=1e-7)


def _per_token_mean(torch, x, mask):
    return (x * mask).sum(1) / mask.sum(1)


@pytest.mark.reference
def test_orpo_odds_ratio_and_simpo_match_trl():
    """ORPO's odds-ratio term (ORPOTrainer.odds_ratio_loss) and SimPO (CPOTrainer.cpo_loss, loss_type simpo) on the
    same per-token mean log-probs. Our ORPO NLL is the chosen completion's per-token mean (a documented departure:
    TRL averages over prompt and completion tokens of the batch), so TRL's total is its odds term plus that NLL."""
    torch = pytest.importorskip("torch")
    from trl.experimental.cpo.cpo_trainer import CPOTrainer
    from trl.experimental.orpo.orpo_trainer import ORPOTrainer

    policy, reference, weights = fixed_inputs(3)
    mask = _trl_rows(torch, weights)
    for loss_type, settings in [("orpo", dict(beta=0.25)), ("simpo", dict(beta=2.0, simpo_gamma=0.7)),
                                ("simpo", dict(beta=2.5, simpo_gamma=0.5, label_smoothing=0.1))]:
        raw = _trl_rows(torch, policy).requires_grad_(True)
        avg = _per_token_mean(torch, raw, mask)
        if loss_type == "orpo":
            odds, chosen_r, rejected_r, ratio, log_odds = ORPOTrainer.odds_ratio_loss(
                _trl_self(torch, beta=settings["beta"]), avg[:B], avg[B:])
            loss = -avg[:B].mean() - odds.mean()
            extra = {"log_odds_ratio": ratio.item(), "log_odds_chosen": log_odds.item()}
        else:
            me = _trl_self(torch, beta=settings["beta"], alpha=0.0, loss_type="simpo",
                           simpo_gamma=settings["simpo_gamma"], label_smoothing=settings.get("label_smoothing", 0.0))
            per_pair, chosen_r, rejected_r = CPOTrainer.cpo_loss(me, avg[:B], avg[B:])
            loss, extra = per_pair.mean(), {}
        loss.backward()
        value, metrics, grad = ours(loss_type, policy, reference, weights, **settings)
        assert value == pytest.approx(loss.item(), rel=RTOL), loss_type
        assert metrics["rewards/chosen"] == pytest.approx(chosen_r.mean().item(), rel=RTOL)
        assert metrics["rewards/rejected"] == pytest.approx(rejected_r.mean().item(), rel=RTOL)
        for key, want in extra.items():
            assert metrics[key] == pytest.approx(want, rel=RTOL), key
        np.testing.assert_allclose(grad, _from_trl_rows(raw.grad.numpy()), rtol=RTOL, atol=1e-7)


@pytest.mark.reference
def test_kto_matches_trl():
    """KTO with TRL's KL estimate from mismatched completions: our second row of each example is its mismatched
    completion (TRL's KL_input_ids)."""
    torch = pytest.importorskip("torch")
    from trl.trainer.kto_trainer import KTOTrainer

    policy, reference, weights = fixed_inputs(4)
    label = np.array([1, 0, 0, 1, 1], np.float32)
    beta, wd, wu = 0.3, 1.0, 1.33
    matched = torch.tensor(policy[:, 0]).requires_grad_(True)
    mask, kl_mask = (torch.tensor(weights[:, j]).long() for j in (0, 1))
    ref = torch.tensor((reference * weights).sum(-1))
    inputs = {"input_ids": torch.ones(B, T + 1, dtype=torch.long), "attention_mask": torch.ones(B, T + 1),
              "completion_mask": _prompt_column(torch, mask), "label": torch.tensor(label).bool(),
              "ref_logps": ref[:, 0], "ref_KL_logps": ref[:, 1],
              "KL_input_ids": torch.full((B, T + 1), 2, dtype=torch.long), "KL_attention_mask": torch.ones(B, T + 1),
              "KL_completion_mask": _prompt_column(torch, kl_mask)}

    def model(input_ids, **kw):
        if input_ids is inputs["KL_input_ids"]:
            return _model_outputs(torch, torch.tensor(policy[:, 1]) * kl_mask)
        return _model_outputs(torch, matched * mask)

    me = _trl_self(torch, calculate_KL=True, precompute_ref_logps=True, loss_type="kto", beta=beta,
                   desirable_weight=wd, undesirable_weight=wu)
    me._compute_kl_logps = types.MethodType(KTOTrainer._compute_kl_logps, me)
    loss = KTOTrainer._compute_loss(me, model, inputs, False)
    loss.backward()
    trl = {k: v[-1] for k, v in me._metrics["train"].items()}

    value, metrics, grad = ours("kto", policy, reference, weights, label=label, beta=beta, desirable_weight=wd,
                                undesirable_weight=wu)
    assert value == pytest.approx(loss.item(), rel=RTOL)
    for key in ("kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected"):
        assert metrics[key] == pytest.approx(trl[key], rel=RTOL, abs=1e-6), key
    np.testing.assert_allclose(grad[:, 0], matched.grad.numpy(), rtol=RTOL, atol=1e-7)
    assert np.all(grad[:, 1] == 0)  # the KL estimate is not differentiated
