"""Preference pairs from the model's own replies, judged by the one judge: on-policy DPO data.

    pairs, counts = on_policy_pairs(model, tokenizer, records, greedy=False, samples=8,
                                    max_new_tokens=96)
    counts  # {"prompts": 512, "pairs": 201, "sampled": 201, "all_right": 240, "all_wrong": 71, ...}

For each prompt the model samples `samples` replies, and the task's own reward
(`tunix_lite.rewards.judge`: a reasoning-gym task's scorer, else exact match of the tagged answer)
marks each right or wrong, as it would in training and in evaluation. A prompt with at least one of
each gives one pair: chosen = a right reply, rejected = a wrong one, both written by the model that
DPO then starts from. Synthetic pairs teach the policy to prefer a reference answer over a planted
flaw it may never write; these move probability from the mistakes it does make to answers it can
write (Xu et al. 2024, "Is DPO Superior to PPO for LLM Alignment?", find DPO much weaker on pairs
from another model than on the policy's own samples; Tajwar et al. 2024, "Preference fine-tuning of
LLMs should leverage suboptimal, on-policy data").

A prompt whose samples are all right or all wrong gives no pair: like a GRPO group with equal
rewards, it carries no preference. `counts` says how many of each there were.

Given pairs rather than prompts (a DPO config's `on_policy_rejected` / `on_policy_samples`), the
same function rewrites them: a pair whose prompt gets both a right and a wrong sample becomes those
two, and with `greedy` a pair whose greedy answer is wrong rejects that answer; the others keep
their own sides. Where the model only guesses (the tiny model's arithmetic: pass@8 at chance), its
own wrong answer differs from the chosen one in the reasoning too, so such a pair pushes down
reasoning tokens at random; a synthetic flaw differs in the answer alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tunix_lite.evaluation.accuracy import TaskEval
from tunix_lite.rewards.judge import verdict_for
from tunix_lite.training.config import ConfigError


def pairs_from_verdicts(records: Sequence[Mapping], completions: Sequence[str],
                        right: np.ndarray) -> tuple[list[dict], dict[str, int]]:
    """(pairs, counts) from `right` [P, S] (bool: sample s of record p is right) and the P * S
    `completions`, record after record. A pair takes the first right and the first wrong sample:
    the samples are independent draws, so the first of each is a random one."""
    right = np.asarray(right, bool)
    if right.ndim != 2 or right.shape[0] != len(records) or right.size != len(completions):
        raise ValueError(f"right {right.shape} must be [records, samples] for {len(records)} "
                         f"records and {len(completions)} completions")
    samples = right.shape[1]
    pairs = []
    for p, (record, verdicts) in enumerate(zip(records, right)):
        if verdicts.all() or not verdicts.any():
            continue
        chosen, rejected = int(np.argmax(verdicts)), int(np.argmin(verdicts))
        pairs.append({"prompt": record["prompt"],
                      "chosen": completions[p * samples + chosen],
                      "rejected": completions[p * samples + rejected]})
    counts = {"prompts": len(records), "pairs": len(pairs),
              "all_right": int(right.all(axis=1).sum()),
              "all_wrong": int((~right).all(axis=1).sum())}
    return pairs, counts


def on_policy_pairs(model, tokenizer, records: Sequence[Mapping], *, greedy: bool = True,
                    samples: int = 0, temperature: float = 1.0,
                    domains: Sequence[str] | None = None, template: str | None = None,
                    max_new_tokens: int | None = None, batch_size: int = 64, seed: int = 0,
                    reward_fn=None) -> tuple[list[dict], dict[str, int]]:
    """(pairs, counts) made of `model`'s own replies to `records`, each reply judged by the one
    judge (`reward_fn`, default: the records' own, `tunix_lite.rewards.judge.reward_for`).

    records: pairs ({"prompt", "chosen", "rejected", "answer"[, "domain", "entry"]}) to rewrite, or
    prompts ({"prompt", "answer"[, "entry"]}) to make pairs from.
    greedy (pairs only): each prompt is answered greedily, and where that answer is wrong (and not
    empty, nor the chosen side) it replaces the pair's rejected side.
    samples: each prompt also gets this many replies at `temperature`; where one is right and
    another wrong, the pair becomes (the first right, the first wrong): both sides the model's own
    (`pairs_from_verdicts`), overriding the greedy replacement. A pair without such samples keeps
    its own sides; a prompt without them gives no pair.
    domains (pairs only): only records of these domains are answered; the rest keep their pairs.

    counts: {"prompts" (answered), "pairs" (returned), "sampled" (pairs of two samples),
    "rejected" (pairs whose rejected side is the greedy answer), "all_right", "all_wrong" (prompts
    whose samples were all right, or none)}.
    """
    rows = list(records)
    if not rows or "answer" not in rows[0] or not isinstance(rows[0].get("prompt"), str):
        raise ConfigError("on_policy_rejected / on_policy_samples: need records with a text prompt "
                          "and an answer column to judge the model's replies (the synthetic pairs "
                          f"have them); got columns {sorted(rows[0]) if rows else 'none'}")
    paired = "chosen" in rows[0]
    if domains is not None and "domain" not in rows[0]:
        raise ConfigError("on_policy_domains: the pairs have no domain column; remove the key")
    answered = [i for i, r in enumerate(rows) if domains is None or r["domain"] in domains]
    if not answered:
        raise ConfigError(f"on_policy_domains: {list(domains)} matches no training pair; the "
                          f"pairs' domains are {sorted({r['domain'] for r in rows})}")
    asked = [rows[i] | ({"completion": rows[i]["chosen"]} if paired else {}) for i in answered]
    task = TaskEval(model, tokenizer, asked, template=template, max_new_tokens=max_new_tokens,
                    batch_size=min(batch_size, len(answered)))
    pairs, kind = (list(rows) if paired else []), {}
    if greedy and paired:
        texts = task.completions()
        for i, text, right in zip(answered, texts, verdict_for(asked, texts, reward_fn),
                                  strict=True):
            if text.strip() and not right and text != rows[i]["chosen"]:
                pairs[i], kind[i] = rows[i] | {"rejected": text}, "rejected"
    counts = {"prompts": len(answered), "all_right": 0, "all_wrong": 0}
    if samples:
        texts = task.completions(num_samples=samples, temperature=temperature, seed=seed)
        repeated = [r for r in asked for _ in range(samples)]
        right = verdict_for(repeated, texts, reward_fn).reshape(len(answered), samples)
        sampled, made = pairs_from_verdicts(asked, texts, right)
        counts |= {"all_right": made["all_right"], "all_wrong": made["all_wrong"]}
        by_prompt = iter(sampled)
        for n, i in enumerate(answered):
            if right[n].all() or not right[n].any():
                continue
            pair = next(by_prompt)
            if paired:
                pairs[i] = rows[i] | {"chosen": pair["chosen"], "rejected": pair["rejected"]}
            else:
                pairs.append(pair)
            kind[i] = "sampled"
    counts["sampled"] = sum(how == "sampled" for how in kind.values())
    counts["rejected"] = sum(how == "rejected" for how in kind.values())
    return pairs, counts | {"pairs": len(pairs)}
