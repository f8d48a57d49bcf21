"""Graded tests for phase 5 (solutions/05_preference_exercises.ipynb): the arithmetic of preference tuning.

Each a step past the lesson: masked log-probs with empty rows, DPO with label smoothing (cDPO), IPO on
per-completion means, ORPO's odds without overflow, an accuracy that scores ties fairly and adds up across
batches. References are numpy in float64; the learner's float32 results must match to ~1e-5 relative. Shapes:
B pairs, T tokens, V vocabulary. Every input comes from `rng`, drawn afresh per grading run.
Then a skill, graded on behaviour: preference pairs built from scored samples, against a reference and the rules
the exercise states (scores on a grid of quarters, so that margins compare exactly).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tunix_lite.course.graded import graded

__all__ = [
    "test_completion_log_probs_matches_numpy", "test_completion_log_probs_empty_rows",
    "test_completion_log_probs_stable_for_large_logits", "test_dpo_loss_matches_numpy",
    "test_dpo_loss_stable_for_large_margins", "test_dpo_loss_policy_equals_reference",
    "test_ipo_loss_matches_numpy", "test_ipo_loss_minimum_at_the_target",
    "test_orpo_log_odds_ratio_matches_float64", "test_orpo_log_odds_ratio_stable_near_certainty",
    "test_preference_accuracy_matches_reference", "test_preference_accuracy_combines_batches_exactly",
    "test_pairs_from_scored_matches_reference", "test_pairs_from_scored_stays_within_a_prompt",
    "test_pairs_from_scored_ties_duplicates_and_lone_samples",
    "test_pairs_from_scored_follows_first_appearance",
]

HINTS = {
    "completion_log_probs": [
        "log π(y|x) is a sum of per-token log-probabilities of the targets, taken from a normalised distribution "
        "over the vocabulary; the mask picks the completion's tokens. The mean divides by how many there are, and a "
        "row with none must not divide by zero, in value or in gradient.",
        "log p = jax.nn.log_softmax(logits) [B, T, V] (stable for large logits, unlike log(softmax)); pick each "
        "target with jnp.take_along_axis -> [B, T]; sum log p * mask over T. For the mean divide by sum(mask), "
        "replaced by 1 where it is 0 (jnp.where) so an empty row gives 0 and a zero gradient.",
        "picked = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), targets[..., None], -1)[..., 0]; "
        "total = (picked * mask).sum(-1); n = mask.sum(-1); return total / jnp.where(n > 0, n, 1.0) if normalize "
        "else total",
    ],
    "dpo_loss": [
        "If a fraction ε of the labels are flipped, the pair's loss mixes the loss of the label as given (weight "
        "1 - ε) with the loss of the opposite label (weight ε). The opposite label turns the margin's sign. Never "
        "take log(sigmoid(x)): it is -inf long before the loss is.",
        "h = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected); loss = -(1 - ε) log σ(β h) "
        "- ε log σ(-β h), with jax.nn.log_sigmoid for log σ.",
        "z = beta * ((pc - rc) - (pr - rr)); return -(1 - label_smoothing) * jax.nn.log_sigmoid(z) "
        "- label_smoothing * jax.nn.log_sigmoid(-z)",
    ],
    "ipo_loss": [
        "Length normalisation happens per completion, before the two are compared: each completion's log-ratio "
        "(policy minus reference) becomes a per-token mean over its own length. Then IPO regresses the difference "
        "to the target 1/(2τ).",
        "chosen: (policy_chosen - ref_chosen) / chosen_len; rejected: (policy_rejected - ref_rejected) / "
        "rejected_len; h = chosen - rejected; loss = (h - 1 / (2 τ))².",
        "h = (pc - rc) / chosen_len - (pr - rr) / rejected_len; return (h - 1 / (2 * tau)) ** 2",
    ],
    "orpo_log_odds_ratio": [
        "odds = P / (1 - P) with log P given, so log odds = log P - log(1 - exp(log P)). The hard part is "
        "log(1 - exp(x)): two formulas, each accurate on one side of x = -log 2, and jnp.where differentiates "
        "both branches everywhere.",
        "log(1 - exp(x)) = log(-expm1(x)) for x >= -log 2, log1p(-exp(x)) below. Choose with jnp.where(x < -log 2, "
        "...), and clamp each branch's input to its own side (jnp.minimum / jnp.maximum with -log 2) so the branch "
        "not taken never sees a value that makes inf or NaN.",
        "s = -jnp.log(2.0); l1m = lambda x: jnp.where(x < s, jnp.log1p(-jnp.exp(jnp.minimum(x, s))), "
        "jnp.log(-jnp.expm1(jnp.maximum(x, s)))); return (chosen - l1m(chosen)) - (rejected - l1m(rejected))",
    ],
    "preference_accuracy": [
        "The implicit reward margin is β times the difference of the two log-ratios (policy minus reference); its "
        "sign says whether the pair is ranked right. A tie is a coin flip, and a padded pair is not a pair. "
        "Returning the count lets batches combine.",
        "margin = β ((pc - rc) - (pr - rr)) from column 0 (chosen) and 1 (rejected); score 1 where margin > 0, "
        "0.5 where it is 0, 0 below; accuracy = sum(score * valid) / sum(valid), with 0 when no pair is valid.",
        "m = beta * ((p[:, 0] - r[:, 0]) - (p[:, 1] - r[:, 1])); s = jnp.where(m > 0, 1.0, jnp.where(m == 0, 0.5, "
        "0.0)); n = valid.sum(); return (s * valid).sum() / jnp.where(n > 0, n, 1.0), n",
    ],
    "pairs_from_scored": [
        "Group the samples by prompt, keeping the order in which prompts first appear. Within a "
        "group, the chosen side is the best score and the rejected side the worst among the "
        "other texts; ties go to the earlier sample. Emit a pair only when the gap reaches the "
        "margin.",
        "A dict of lists, groups.setdefault(prompt, []).append(sample), keeps insertion order. "
        "max(group, key=score) and min(..., key=score) return the first of equal scores. Filter "
        "the group to completions != best['completion'] before min; skip the prompt if none is "
        "left or best - worst < margin.",
        "for prompt, group in groups.items(): best = max(group, key=lambda s: s['score']); "
        "others = [s for s in group if s['completion'] != best['completion']]; if not others: "
        "continue; worst = min(others, key=lambda s: s['score']); if best['score'] - "
        "worst['score'] >= margin: pairs.append({'prompt': prompt, 'chosen': "
        "best['completion'], 'rejected': worst['completion']})",
    ],
}

FORBIDDEN = {  # the library's own preference losses and scoring, and one-call log-prob shortcuts
    "completion_log_probs": ("tunix_lite.preference", "tunix_lite.training", "tunix_lite.rl",
                             "optax.softmax_cross_entropy_with_integer_labels", "optax.losses"),
    "dpo_loss": ("tunix_lite.preference",),
    "ipo_loss": ("tunix_lite.preference",),
    "orpo_log_odds_ratio": ("tunix_lite.preference",),
    "preference_accuracy": ("tunix_lite.preference",),
    "pairs_from_scored": ("tunix_lite.preference",),
}


def _f32(a) -> jnp.ndarray:
    return jnp.asarray(np.asarray(a, np.float32))


def _close(got, want, what: str, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol, err_msg=what)


# ----------------------------------------------------------------------------- completion log-probs


def _completion_ref(logits, targets, mask, normalize):
    x = np.asarray(logits, np.float64)
    top = x.max(-1, keepdims=True)
    log_p = x - (top + np.log(np.exp(x - top).sum(-1, keepdims=True)))
    picked = np.take_along_axis(log_p, np.asarray(targets)[..., None], -1)[..., 0]
    total = (picked * mask).sum(-1)
    if not normalize:
        return total
    n = mask.sum(-1)
    return np.where(n > 0, total / np.where(n > 0, n, 1), 0.0)


def _completion_inputs(rng, B=4, T=9, V=13, scale=2.0):
    logits = (rng.normal(size=(B, T, V)) * scale).astype(np.float32)
    targets = rng.integers(0, V, size=(B, T)).astype(np.int32)
    start = rng.integers(1, T // 2, size=B)
    end = rng.integers(T // 2, T + 1, size=B)
    t = np.arange(T)[None]
    return logits, targets, ((t >= start[:, None]) & (t < end[:, None])).astype(np.float32)


@graded("completion_log_probs", reference=True)
def test_completion_log_probs_matches_numpy(impl, rng):
    """summed and per-token-mean log-probs of the masked targets match a numpy reference, under jit, [B]"""
    fn = jax.jit(impl.completion_log_probs, static_argnames="normalize")
    for shape in [(4, 9, 13), (int(rng.integers(2, 6)), int(rng.integers(5, 12)), int(rng.integers(5, 40)))]:
        logits, targets, mask = _completion_inputs(rng, *shape)
        for normalize in (False, True):
            got = fn(_f32(logits), jnp.asarray(targets), jnp.asarray(mask), normalize=normalize)
            assert np.shape(got) == (shape[0],), f"return one value per row, shape ({shape[0]},); got {np.shape(got)}"
            _close(got, _completion_ref(logits, targets, mask, normalize),
                   f"normalize={normalize}: sum (or mean) of log p(target) where mask is 1")


@graded("completion_log_probs")
def test_completion_log_probs_empty_rows(impl, rng):
    """a row with no completion token gives 0 for both forms, and a zero (not NaN) gradient"""
    logits, targets, mask = _completion_inputs(rng)
    mask[1] = 0.0
    for normalize in (False, True):
        fn = lambda x: impl.completion_log_probs(x, jnp.asarray(targets), jnp.asarray(mask), normalize=normalize)  # noqa: E731
        got = np.asarray(jax.jit(fn)(_f32(logits)))
        assert got[1] == 0.0, f"normalize={normalize}: an empty row must give 0.0, got {got[1]}"
        grad = np.asarray(jax.jit(jax.grad(lambda x: fn(x).sum()))(_f32(logits)))
        assert np.all(np.isfinite(grad)), f"normalize={normalize}: the gradient has NaN or inf"
        assert np.all(grad[1] == 0.0), f"normalize={normalize}: an empty row must get a zero gradient"


@graded("completion_log_probs")
def test_completion_log_probs_stable_for_large_logits(impl, rng):
    """stays finite and correct for logits in the thousands (a stable log-softmax)"""
    logits, targets, mask = _completion_inputs(rng, scale=400.0)
    logits += 3_000.0
    got = jax.jit(impl.completion_log_probs, static_argnames="normalize")(
        _f32(logits), jnp.asarray(targets), jnp.asarray(mask), normalize=True)
    assert np.all(np.isfinite(np.asarray(got))), "log(softmax(x)) overflows: use jax.nn.log_softmax"
    _close(got, _completion_ref(logits, targets, mask, True), "large logits", rtol=1e-4)


# ----------------------------------------------------------------------------- DPO with label smoothing


def _logsig(x):
    return -np.logaddexp(0.0, -x)


def _dpo_ref(pc, pr, rc, rr, beta, eps):
    h = beta * ((np.float64(pc) - rc) - (np.float64(pr) - rr))
    return -(1 - eps) * _logsig(h) - eps * _logsig(-h)


def _pairs(rng, B=6, scale=5.0):
    return [(rng.normal(size=B) * scale - 20).astype(np.float32) for _ in range(4)]


@graded("dpo_loss", reference=True)
def test_dpo_loss_matches_numpy(impl, rng):
    """per-pair losses -(1-eps) log σ(β h) - eps log σ(-β h) and their gradient match numpy, under jit"""
    fn = jax.jit(impl.dpo_loss, static_argnames=("beta", "label_smoothing"))
    for beta, eps in [(0.1, 0.0), (float(rng.uniform(0.2, 1.0)), float(rng.uniform(0.05, 0.2))),
                      (2.0, float(rng.uniform(0.2, 0.4)))]:
        pc, pr, rc, rr = _pairs(rng)
        got = fn(*map(_f32, (pc, pr, rc, rr)), beta=beta, label_smoothing=eps)
        assert np.shape(got) == pc.shape, f"return one loss per pair, shape {pc.shape}; got {np.shape(got)}"
        _close(got, _dpo_ref(pc, pr, rc, rr, beta, eps), f"beta={beta}, label_smoothing={eps}")
        grad = jax.grad(lambda x: impl.dpo_loss(x, _f32(pr), _f32(rc), _f32(rr), beta=beta,
                                                label_smoothing=eps).sum())(_f32(pc))
        h = beta * ((np.float64(pc) - rc) - (np.float64(pr) - rr))
        sig = 1 / (1 + np.exp(-h))
        _close(grad, beta * (-(1 - eps) * (1 - sig) + eps * sig), "d loss / d policy_chosen", rtol=1e-4)


@graded("dpo_loss")
def test_dpo_loss_stable_for_large_margins(impl, rng):
    """finite losses and gradients when β h is ±200 (log σ computed without log(σ))"""
    pc = _f32(rng.normal(size=4) * 0.1 - 5)
    big = _f32([400.0, -400.0, 300.0, -300.0])
    fn = lambda x: impl.dpo_loss(x + big, _f32(np.full(4, -5.0)), pc, _f32(np.full(4, -5.0)), beta=0.5,  # noqa: E731
                                 label_smoothing=0.1)
    got = np.asarray(jax.jit(fn)(pc))
    assert np.all(np.isfinite(got)), f"losses must stay finite for large margins, got {got}"
    _close(got, _dpo_ref(np.asarray(pc) + np.asarray(big), -5.0, np.asarray(pc), -5.0, 0.5, 0.1), "large margins",
           rtol=1e-4)
    assert np.all(np.isfinite(np.asarray(jax.grad(lambda x: fn(x).sum())(pc)))), "the gradient must stay finite"


@graded("dpo_loss")
def test_dpo_loss_policy_equals_reference(impl, rng):
    """policy == reference gives log 2 for every pair, whatever β and the smoothing"""
    pc, pr, _, _ = _pairs(rng)
    for beta, eps in [(0.1, 0.0), (3.0, 0.2)]:
        got = impl.dpo_loss(_f32(pc), _f32(pr), _f32(pc), _f32(pr), beta=beta, label_smoothing=eps)
        _close(got, np.full(pc.shape, np.log(2)), "policy == reference")


# ----------------------------------------------------------------------------- IPO with length normalisation


def _ipo_ref(pc, pr, rc, rr, nc, nr, tau):
    h = (np.float64(pc) - rc) / nc - (np.float64(pr) - rr) / nr
    return (h - 1 / (2 * tau)) ** 2


@graded("ipo_loss", reference=True)
def test_ipo_loss_matches_numpy(impl, rng):
    """(h - 1/(2τ))² on per-token-mean log-ratios (each completion divided by its own length), under jit"""
    fn = jax.jit(impl.ipo_loss, static_argnames="tau")
    for tau in (0.1, float(rng.uniform(0.3, 2.0))):
        pc, pr, rc, rr = _pairs(rng)
        nc, nr = (rng.integers(1, 40, size=pc.shape).astype(np.float32) for _ in range(2))
        got = fn(*map(_f32, (pc, pr, rc, rr, nc, nr)), tau=tau)
        assert np.shape(got) == pc.shape, f"return one loss per pair, shape {pc.shape}; got {np.shape(got)}"
        _close(got, _ipo_ref(pc, pr, rc, rr, nc, nr, tau), f"tau={tau}: divide chosen by chosen_len, rejected "
                                                           "by rejected_len, before the difference", rtol=1e-4)


@graded("ipo_loss")
def test_ipo_loss_minimum_at_the_target(impl, rng):
    """the loss and its gradient are 0 where the mean log-ratio difference equals 1/(2τ)"""
    tau, n = 0.25, np.float32(rng.integers(2, 9))
    rc, rr, pr = (np.float32(rng.normal() - 10) for _ in range(3))
    pc = rc + n * (pr - rr) / n + n * 1 / (2 * tau)  # h = 1/(2τ) exactly
    fn = lambda x: impl.ipo_loss(x, _f32([pr]), _f32([rc]), _f32([rr]), _f32([n]), _f32([n]), tau=tau).sum()  # noqa: E731
    assert abs(float(fn(_f32([pc])))) < 1e-5, "the loss must vanish at h = 1/(2τ)"
    assert abs(float(jax.grad(fn)(_f32([pc]))[0])) < 1e-4, "the gradient must vanish at h = 1/(2τ)"


# ----------------------------------------------------------------------------- ORPO's log odds ratio


def _log_odds_ref(c, r):
    c, r = np.float64(c), np.float64(r)
    return (c - np.log(-np.expm1(c))) - (r - np.log(-np.expm1(r)))


@graded("orpo_log_odds_ratio", reference=True)
def test_orpo_log_odds_ratio_matches_float64(impl, rng):
    """log(odds(y_w) / odds(y_l)) from per-token mean log-probs matches a float64 reference, under jit"""
    c = -rng.uniform(0.05, 6.0, size=12).astype(np.float32)
    r = -rng.uniform(0.05, 6.0, size=12).astype(np.float32)
    got = jax.jit(impl.orpo_log_odds_ratio)(_f32(c), _f32(r))
    assert np.shape(got) == c.shape, f"return one value per pair, shape {c.shape}; got {np.shape(got)}"
    _close(got, _log_odds_ref(c, r), "log odds = log p - log(1 - p), p = exp(mean log-prob)", rtol=1e-4)
    swapped = jax.jit(impl.orpo_log_odds_ratio)(_f32(r), _f32(c))
    _close(swapped, -_log_odds_ref(c, r), "swapping the pair flips the sign", rtol=1e-4)


@graded("orpo_log_odds_ratio")
def test_orpo_log_odds_ratio_stable_near_certainty(impl, rng):
    """accurate and with finite gradients for mean log-probs near 0 (p ≈ 1) and very negative (p ≈ 0)"""
    c = _f32(-np.array([1e-4, 2e-3, 0.6931, 0.7, 30.0, 80.0]) * rng.uniform(0.9, 1.1, size=6))
    r = _f32(-np.array([50.0, 0.3, 1e-3, 5.0, 1e-4, 0.01]) * rng.uniform(0.9, 1.1, size=6))
    got = np.asarray(jax.jit(impl.orpo_log_odds_ratio)(c, r))
    _close(got, _log_odds_ref(np.asarray(c), np.asarray(r)), "near p = 1 use log(-expm1(x)); near p = 0 "
                                                            "log1p(-exp(x))", rtol=2e-3, atol=1e-3)
    grad = np.asarray(jax.grad(lambda x: impl.orpo_log_odds_ratio(x, r).sum())(c))
    assert np.all(np.isfinite(grad)), f"the gradient must be finite everywhere (a jnp.where branch makes NaN): {grad}"


# ----------------------------------------------------------------------------- preference accuracy


def _accuracy_ref(policy, reference, valid):
    margin = (np.float64(policy[:, 0]) - reference[:, 0]) - (np.float64(policy[:, 1]) - reference[:, 1])
    score = np.where(margin > 0, 1.0, np.where(margin == 0, 0.5, 0.0))
    n = valid.sum()
    return (score * valid).sum() / n if n else 0.0, n


def _accuracy_inputs(rng, B=10):
    policy = np.round(rng.normal(size=(B, 2)) * 4 - 20, 1).astype(np.float32)
    reference = np.round(rng.normal(size=(B, 2)) * 4 - 20, 1).astype(np.float32)
    reference[:3] = policy[:3]  # three ties: the policy has not moved on them
    valid = (rng.random(B) < 0.7).astype(np.float32)
    valid[0] = 1.0
    return policy, reference, valid


@graded("preference_accuracy", reference=True)
def test_preference_accuracy_matches_reference(impl, rng):
    """the implicit reward ranks the pair right (1), ties (0.5), wrong (0), over real pairs only; (accuracy, count)"""
    for B in (10, int(rng.integers(4, 20))):
        policy, reference, valid = _accuracy_inputs(rng, B)
        out = jax.jit(impl.preference_accuracy, static_argnames="beta")(_f32(policy), _f32(reference), _f32(valid),
                                                                          beta=0.1)
        assert isinstance(out, tuple) and len(out) == 2, "return a tuple (accuracy, count)"
        want, n = _accuracy_ref(policy, reference, valid)
        _close(out[1], n, "count is the number of real pairs (valid == 1)")
        _close(out[0], want, "ties count 0.5, padded pairs nothing")
    none = impl.preference_accuracy(_f32(policy), _f32(reference), _f32(np.zeros(len(valid))), beta=0.1)
    assert float(none[0]) == 0.0 and float(none[1]) == 0.0, "no real pair: (0.0, 0)"


@graded("preference_accuracy")
def test_preference_accuracy_combines_batches_exactly(impl, rng):
    """count-weighted accuracies of two batches equal the accuracy of both together (any β > 0)"""
    policy, reference, valid = _accuracy_inputs(rng, B=14)
    whole, _ = impl.preference_accuracy(_f32(policy), _f32(reference), _f32(valid), beta=2.0)
    parts = [impl.preference_accuracy(_f32(policy[s]), _f32(reference[s]), _f32(valid[s]), beta=2.0)
             for s in (slice(0, 5), slice(5, None))]
    combined = sum(float(a) * float(n) for a, n in parts) / sum(float(n) for _, n in parts)
    _close(combined, float(whole), "accuracy * count adds up across batches")


# ----------------------------------------------------------- preference pairs from scored samples


def _pairs_from_scored_ref(samples, margin):
    groups = {}
    for sample in samples:
        groups.setdefault(sample["prompt"], []).append(sample)
    pairs = []
    for prompt, group in groups.items():
        best = max(group, key=lambda s: s["score"])
        others = [s for s in group if s["completion"] != best["completion"]]
        if not others:
            continue
        worst = min(others, key=lambda s: s["score"])
        if best["score"] - worst["score"] >= margin:
            pairs.append({"prompt": prompt, "chosen": best["completion"],
                          "rejected": worst["completion"]})
    return pairs


def _sample(prompt: str, completion: str, score: float) -> dict:
    return {"prompt": prompt, "completion": completion, "score": score}


def _scored_samples(rng, num_prompts: int) -> list[dict]:
    """Several prompts with 1-6 samples each, scores on a grid of quarters (ties are common), some
    texts repeated, shuffled."""
    samples = []
    for p in range(num_prompts):
        prompt = f"prompt {p}: {int(rng.integers(1000))} + {int(rng.integers(1000))} ="
        for _ in range(int(rng.integers(1, 7))):
            text = f"answer {int(rng.integers(0, 5))}"
            samples.append(_sample(prompt, text, float(rng.integers(0, 5)) / 4))
    return [samples[i] for i in rng.permutation(len(samples))]


def _built_pairs(impl, samples, margin):
    out = impl.pairs_from_scored([dict(s) for s in samples], margin)
    assert isinstance(out, list), f"return a list of pairs, got {type(out).__name__}"
    return out


@graded("pairs_from_scored", reference=True)
def test_pairs_from_scored_matches_reference(impl, rng):
    """the same pairs, in the same order, as a reference, on shuffled samples of several prompts
    with ties and repeated texts, for several margins"""
    for margin in (0.25, 0.5, float(rng.integers(1, 5)) / 4):
        samples = _scored_samples(rng, int(rng.integers(3, 8)))
        got, want = _built_pairs(impl, samples, margin), _pairs_from_scored_ref(samples, margin)
        assert got == want, f"margin {margin}, samples {samples}: expected {want}, got {got}"


def _scores_by_text(samples) -> dict:
    return {(s["prompt"], s["completion"]): s["score"] for s in samples}


@graded("pairs_from_scored")
def test_pairs_from_scored_stays_within_a_prompt(impl, rng):
    """a prompt's pair uses only its own completions (never the best of another prompt), its
    score gap is at least the margin, and a gap exactly equal to the margin makes a pair"""
    margin = float(rng.integers(1, 4)) / 4
    low, high = float(rng.integers(0, 4)) / 4, 2.0 + float(rng.integers(0, 4)) / 4
    samples = [_sample("easy", "easy right", high + margin), _sample("easy", "easy wrong", high),
               _sample("hard", "hard right", low + margin), _sample("hard", "hard wrong", low),
               _sample("close", "close right", low + margin / 2), _sample("close", "close wrong", low)]
    samples = [samples[i] for i in rng.permutation(len(samples))]
    got = _built_pairs(impl, samples, margin)
    scores = _scores_by_text(samples)
    for pair in got:
        prompt = pair["prompt"]
        assert (prompt, pair["chosen"]) in scores and (prompt, pair["rejected"]) in scores, (
            f"pair {pair}: chosen and rejected must both be completions of its own prompt")
        gap = scores[prompt, pair["chosen"]] - scores[prompt, pair["rejected"]]
        assert gap >= margin, f"pair {pair}: score gap {gap} is below the margin {margin}"
    paired = sorted(pair["prompt"] for pair in got)
    assert paired == ["easy", "hard"], (
        f"margin {margin}: gaps equal to the margin make a pair, a smaller gap none; "
        f"expected pairs for easy and hard, got {paired}")


@graded("pairs_from_scored")
def test_pairs_from_scored_ties_duplicates_and_lone_samples(impl, rng):
    """equal scores go to the first sample (chosen and rejected alike); the chosen text is never
    the rejected one; a prompt with one sample, one text or equal scores gives no pair"""
    top, bottom = 1.0 + float(rng.integers(0, 4)) / 4, float(rng.integers(0, 4)) / 4
    samples = [_sample("ties", "first best", top), _sample("ties", "first worst", bottom),
               _sample("ties", "middle", (top + bottom) / 2), _sample("ties", "second best", top),
               _sample("ties", "second worst", bottom),
               _sample("repeat", "same text", top), _sample("repeat", "same text", bottom),
               _sample("repeat", "other text", top - 0.25),
               _sample("alone", "only one", top),
               _sample("one text", "again", top), _sample("one text", "again", bottom),
               _sample("flat", "flat a", top), _sample("flat", "flat b", top)]
    got = _built_pairs(impl, samples, 0.25)
    want = [{"prompt": "ties", "chosen": "first best", "rejected": "first worst"},
            {"prompt": "repeat", "chosen": "same text", "rejected": "other text"}]
    assert got == want, (f"expected {want} (ties: the first sample; the rejected text differs "
                         f"from the chosen one; no pair for alone, one text, flat), got {got}")


@graded("pairs_from_scored")
def test_pairs_from_scored_follows_first_appearance(impl, rng):
    """pairs come in the order in which their prompts first appear in the samples; no samples give
    no pairs"""
    samples = _scored_samples(rng, 6)
    samples += [_sample(s["prompt"], "a late best", 5.0) for s in samples[:2]]
    order = list(dict.fromkeys(s["prompt"] for s in samples))
    got = [pair["prompt"] for pair in _built_pairs(impl, samples, 0.25)]
    assert got == [p for p in order if p in got], f"prompts in order {order}, pairs in {got}"
    assert _built_pairs(impl, [], 0.25) == [], "no samples: no pairs"
