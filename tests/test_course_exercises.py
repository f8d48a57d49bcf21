"""The exercises grade understanding: plausible wrong answers score what they deserve (issue 17, section 2).

Each case takes the solutions notebook's implementation, swaps one function for a typical mistake, and runs that
exercise's graded tests in-process with the grader's partial-credit rule. Before this change a wrong RoPE
convention scored 3/4, GQA was only tested with one kv head where it mattered, lora_memory was checked against
the library one matrix at a time, "raises" tests passed a function that raised on everything, and the rule
"never form A B" was stated but not graded.
"""

from __future__ import annotations

import functools
import math
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tunix_lite.course import graded, rules
from tunix_lite.course.grading import gate, run_test
from tunix_lite.course.notebook import code_sources, graded_code, load_impl, read

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def solution(phase: str):
    return load_impl(next((ROOT / "solutions").glob(f"{phase}_*.ipynb")))


def score(phase: str, name: str, fn, seed: int = 0) -> tuple[int, int, list[str]]:
    """(passed, total, outcomes) of one exercise with `fn` in place of the solution's function."""
    impl = types.SimpleNamespace(**{k: v for k, v in vars(solution(phase)).items() if not k.startswith("__")})
    setattr(impl, name, fn)
    ex = next(e for e in graded.exercises(phase) if e.name == name)
    results = gate([(t, *run_test(t, impl, graded.test_rng(seed, t))) for t in ex.tests])
    return sum(o == "passed" for _, o, _ in results), len(results), [o for _, o, _ in results]


def rotate_half_rope(x, positions, base=10_000.0, factor=1.0):
    """Gemma's convention, the lesson's code: right invariants, wrong pairs."""
    H = x.shape[-1]
    angles = (positions[..., None] / factor) * base ** (-jnp.arange(0, H, 2) / H)
    sin, cos = jnp.sin(angles)[:, :, None, :], jnp.cos(angles)[:, :, None, :]
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def repeating_gqa(q, k, v, mask, scale, softcap=None):
    groups = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) * scale
    if softcap is not None:
        scores = softcap * jnp.tanh(scores / softcap)
    scores = jnp.where(mask[:, None], scores, -1e30)
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(scores, -1), v)


def merged_lora_forward(x, w, a, b, alpha, dropout=0.0, key=None):
    return x @ (w + (alpha / a.shape[1]) * a @ b)


def looping_accumulate(loss_fn, params, micro_batches):
    k = jax.tree.leaves(micro_batches)[0].shape[0]
    total, loss_sum, grad_sum = 0.0, 0.0, jax.tree.map(jnp.zeros_like, params)
    for i in range(k):
        (loss, n), g = jax.value_and_grad(loss_fn, has_aux=True)(params, jax.tree.map(lambda a: a[i], micro_batches))
        total, loss_sum = total + n, loss_sum + n * loss
        grad_sum = jax.tree.map(lambda s, x: s + n * x, grad_sum, g)
    total = jnp.where(total > 0, total, 1.0)
    return loss_sum / total, jax.tree.map(lambda g: g / total, grad_sum)


def looping_grad_norms(loss_fn, params, xs, ys):
    norms = []
    for x, y in zip(xs, ys):
        g = jax.grad(loss_fn)(params, x, y)
        norms.append(jnp.sqrt(sum(jnp.sum(l * l) for l in jax.tree.leaves(g))))
    return jnp.stack(norms)


def memory_ceil_on_total(shapes, rank):
    right = solution("04").lora_memory(shapes, rank)
    trained = 16 * sum(rank * (i + o) for i, o in shapes)
    return right | {"qlora_nf4": 36 * math.ceil(sum(i * o for i, o in shapes) / 64) + trained}


def always_raises(*args, **kwargs):
    raise ValueError("too long")


def greedy_in_order_pack(examples, seq_len, pad_id=0):
    """The library's packing, by hand: a chat that does not fit closes the row for good."""
    rows, used = [[]], 0
    for ids, mask in examples:
        n = len(ids) - 1
        if n > seq_len:
            raise ValueError("too long")
        if used + n > seq_len:
            rows.append([])
            used = 0
        rows[-1].append((ids, mask))
        used += n
    first_fit = solution("03").pack_examples
    packed = [first_fit(row, seq_len, pad_id) for row in rows]  # one row each: first-fit = in order here
    return {k: np.concatenate([p[k] for p in packed]) for k in packed[0]}


def top_p_then_top_k(logits, top_k=None, top_p=None, min_p=None):
    f = solution("02").filter_logits
    return f(f(logits, top_p=top_p), top_k=top_k, min_p=min_p)


def unstable_dpo(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.1, label_smoothing=0.0):
    """Right formula, log(sigmoid(x)): -inf once beta h is a few hundred."""
    h = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return -(1 - label_smoothing) * jnp.log(jax.nn.sigmoid(h)) - label_smoothing * jnp.log(jax.nn.sigmoid(-h))


def ipo_on_the_difference(policy_chosen, policy_rejected, ref_chosen, ref_rejected, chosen_len, rejected_len,
                          tau=0.1):
    """Normalises the difference by the mean length instead of each completion by its own."""
    h = ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)) / ((chosen_len + rejected_len) / 2)
    return (h - 1 / (2 * tau)) ** 2


def ties_count_zero(policy_logps, ref_logps, valid, beta=0.1):
    """The library's (and TRL's) accuracy: a tie counts as wrong."""
    margin = beta * ((policy_logps[:, 0] - ref_logps[:, 0]) - (policy_logps[:, 1] - ref_logps[:, 1]))
    count = jnp.sum(valid)
    return jnp.sum((margin > 0) * valid) / jnp.where(count > 0, count, 1.0), count


def population_std_advantages(rewards, group_ids, num_groups, kind="grpo"):
    """GRPO with the population standard deviation (divide by n, not n - 1)."""
    def group_sum(x):
        return jax.ops.segment_sum(x, group_ids, num_segments=num_groups)[group_ids]
    n = group_sum(jnp.ones_like(rewards))
    mean = group_sum(rewards) / n
    std = jnp.sqrt(group_sum(jnp.square(rewards - mean)) / n)
    return jnp.where(n > 1, (rewards - mean) / (std + 1e-6), 0.0)


def plain_k3(logp, ref_logp, old_logp):
    """k3 as if the tokens came from pi: no importance weight."""
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


def softened_kl_without_t2(student_logits, teacher_logits, temperature):
    return solution("07").softened_kl(student_logits, teacher_logits, temperature) / temperature ** 2


def all_reduce_as_one_pass(mesh, weight_bytes, layers, batch, seq, embed, act_bytes=2):
    """Counts an all-reduce like an all-gather: (n - 1)/n instead of 2 (n - 1)/n."""
    d, f, t = mesh["data"], mesh["fsdp"], mesh["tensor"]
    activation = batch / (d * f) * seq * embed * act_bytes
    return ((d - 1) / d * weight_bytes / (f * t) + 3 * (f - 1) / f * weight_bytes / t
            + 4 * layers * (t - 1) / t * activation)


CASES = [  # (phase, exercise, wrong function, the most it may score, the tests that must not pass)
    ("02", "rope_interleaved", rotate_half_rope, 0, None),  # was 3/4: the invariants held, the convention did not
    ("02", "gqa_attention", repeating_gqa, 3, "test_gqa_attention_does_not_repeat_kv"),
    ("02", "filter_logits", top_p_then_top_k, 0, None),
    ("04", "lora_forward", merged_lora_forward, 4, "test_lora_forward_never_forms_a_b"),
    ("04", "lora_memory", memory_ceil_on_total, 0, None),
    ("03", "accumulate_grads", looping_accumulate, 3, "test_accumulate_grads_is_one_scan"),
    ("01", "per_example_grad_norms", looping_grad_norms, 2, "test_per_example_grad_norms_one_trace"),
    ("01", "pad_to_bucket", always_raises, 0, None),  # "raises" tests call a valid input first
    ("03", "sft_example", always_raises, 0, None),
    ("03", "pack_examples", greedy_in_order_pack, 2, "test_pack_examples_matches_first_fit"),
    ("05", "dpo_loss", unstable_dpo, 2, "test_dpo_loss_stable_for_large_margins"),
    ("05", "ipo_loss", ipo_on_the_difference, 0, None),
    ("05", "preference_accuracy", ties_count_zero, 0, None),
    ("06", "group_advantages", population_std_advantages, 0, None),
    ("06", "kl_k3_off_policy", plain_k3, 0, None),  # it passes the on-policy test: gated by the closed form
    ("07", "softened_kl", softened_kl_without_t2, 0, None),
    ("08", "collective_bytes", all_reduce_as_one_pass, 0, None),
]


@pytest.mark.parametrize("phase, name, wrong, most, failing", CASES, ids=[f"{c[1]}-{c[2].__name__}" for c in CASES])
def test_a_typical_mistake_scores_what_it_deserves(phase, name, wrong, most, failing):
    passed, total, outcomes = score(phase, name, wrong)
    assert passed <= most, f"{wrong.__name__} scored {passed}/{total}: {outcomes}"
    if failing:
        ex = next(e for e in graded.exercises(phase) if e.name == name)
        assert outcomes[[t.__name__ for t in ex.tests].index(failing)] != "passed"


@pytest.mark.parametrize("phase", graded.phases())
def test_every_exercise_has_tiered_hints_and_a_reference_test(phase):
    for ex in graded.exercises(phase):
        assert len(ex.hints) >= 2, f"{ex.name}: hints start with the concept and get more specific"
        assert any(t.reference for t in ex.tests), f"{ex.name}: no reference test gates its invariants"


CHEATS = [  # (phase, an import the learner adds, a graded cell that calls the library, what the scan reports)
    ("02", "from tunix_lite import sampler as S\n",
     "def filter_logits(logits, top_k=None, top_p=None, min_p=None):\n    return S.top_p_filter(logits, top_p)",
     {"filter_logits": ["tunix_lite.sampler.top_p_filter"]}),
    ("05", "from tunix_lite.preference import losses as L\n",
     "def completion_log_probs(logits, targets, mask, normalize=False):\n"
     "    return L.completion_log_probs(jax.nn.log_softmax(logits), mask, normalize=normalize)",
     {"completion_log_probs": ["tunix_lite.preference.losses.completion_log_probs"]}),
    ("06", "from tunix_lite.rl.advantages import gae\n",
     "def gae_with_dones(rewards, values, dones, gamma, lam):\n    return gae(rewards, values, 1 - dones, gamma, lam)",
     {"gae_with_dones": ["tunix_lite.rl.advantages.gae"]}),
    ("07", "import tunix_lite.distill.losses\n",
     "def softened_kl(student_logits, teacher_logits, temperature):\n"
     "    return tunix_lite.distill.losses.kd_per_token(student_logits, teacher_logits, temperature=temperature)",
     {"softened_kl": ["tunix_lite.distill.losses.kd_per_token"]}),
    ("08", "from tunix_lite import planner\n",
     "def bytes_per_chip(arrays, mesh, bytes_per_element=4, heads=None):\n    return planner.sharded_bytes(arrays, mesh)",
     {"bytes_per_chip": ["tunix_lite.planner.sharded_bytes"]}),
]


@pytest.mark.parametrize("phase, imports, cheat, expected", CHEATS, ids=[c[0] for c in CHEATS])
def test_calling_the_library_is_not_allowed(phase, imports, cheat, expected):
    """The static scan resolves aliases: the library's function under another name is still the library's."""
    nb = read(next((ROOT / "solutions").glob(f"{phase}_*.ipynb")))
    sources = code_sources(nb) + [imports]
    names = [e.name for e in graded.exercises(phase)]
    code = graded_code([*sources, cheat], names)
    others = [s for s in sources if not any(n in s for n in names)]
    forbidden = {e.name: e.forbidden + graded.ALWAYS_FORBIDDEN for e in graded.exercises(phase)}
    assert rules.violations(code.cells, others, forbidden) == expected
    assert rules.violations(code.cells[:-1], others, forbidden) == {}, "the solutions break no rule"
