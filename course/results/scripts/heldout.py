"""What the results scripts measure alike: the synthetic tasks' held-out prompts, each once, and
greedy exact match per domain with 95% Wilson intervals (tunix_lite.evaluation.wilson).

    from heldout import accuracy, test_records   # in a script here: its folder is on sys.path
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tunix_lite.evaluation import distinct_prompts, wilson

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "course" / "results"  # how the results were measured: run logs, records, adapters
# what the lessons display (NAME.md + NAME.png), shipped with the package: tunix_lite.course.results
SHOWN = ROOT / "tunix_lite" / "course" / "results"
N_TEST = 420  # drawn per split; about 60 per domain before repeated prompts are removed
MAX_NEW_TOKENS = 128  # the sort domain's worked answers need about 90 tokens


def write_page(name: str, parts: list[str]) -> None:
    """SHOWN/NAME: the generated lines `parts`, then the page's "## Notes" as they stand there (the
    notes are written by hand and kept); the generated part is also printed."""
    path = SHOWN / name
    notes = path.read_text().partition("\n## Notes")[2] if path.exists() else ""
    path.write_text("\n".join(parts) + (f"\n## Notes{notes}" if notes else ""))
    print("\n".join(parts))


def test_records(limit_per_domain: int | None = None) -> list[dict]:
    """The held-out test split (seed 0, never trained on), each prompt once; at most
    `limit_per_domain` per domain."""
    from tunix_lite.data.synthetic import make_splits

    out, per_domain = [], {}
    for record in distinct_prompts(make_splits(0, 0, N_TEST, seed=0)["test"]):
        domain = record["domain"]
        if limit_per_domain and per_domain.get(domain, 0) >= limit_per_domain:
            continue
        per_domain[domain] = per_domain.get(domain, 0) + 1
        out.append(record)
    return out


def validation_records(n: int = 280) -> list[dict]:
    """Validation-split prompts (seed 0), each once: where settings are chosen (the test split
    is reported once)."""
    from tunix_lite.data.synthetic import make_splits

    return distinct_prompts(make_splits(0, n, 0, seed=0)["validation"])


def verdicts(texts: list[str], records) -> list[int]:
    """Each reply's exact-match verdict against its record's answer (1 right, 0 wrong): what
    `accuracy` counts, kept per prompt where a paired interval needs it."""
    from tunix_lite.data.synthetic import reward_exact_match

    return [int(x) for x in reward_exact_match(None, texts, [r["answer"] for r in records])]


def accuracy(model, tokenizer, records, *, batch_size: int = 64) -> tuple[dict, list[str]]:
    """({domain or "all": {"k", "n", "accuracy", "low", "high"}} plus "format", the greedy
    texts)."""
    from tunix_lite.data.synthetic import reward_format
    from tunix_lite.evaluation import TaskEval

    model.eval()
    task = TaskEval(model, tokenizer, records, max_new_tokens=MAX_NEW_TOKENS, batch_size=batch_size)
    texts = task.completions()
    correct = verdicts(texts, records)
    table = {}
    for domain in ["all", *sorted({r["domain"] for r in records})]:
        hits = [c for c, r in zip(correct, records) if domain in ("all", r["domain"])]
        k, n = int(sum(hits)), len(hits)
        low, high = wilson(k, n)
        table[domain] = {"k": k, "n": n, "accuracy": k / n, "low": low, "high": high}
    table["format"] = float(sum(reward_format(None, texts)) / len(texts))
    return table, texts


def interval(cell: dict) -> str:
    """One `accuracy()` cell as "0.42 [0.30, 0.55]"."""
    return f"{cell['accuracy']:.2f} [{cell['low']:.2f}, {cell['high']:.2f}]"


def samples(records, texts_by_model: dict[str, list[str]], per_domain: int = 1) -> list[dict]:
    """The first test prompt of each domain, with what each model answered."""
    out, taken = [], {}
    for i, r in enumerate(records):
        if taken.get(r["domain"], 0) < per_domain:
            taken[r["domain"]] = taken.get(r["domain"], 0) + 1
            out.append({"domain": r["domain"], "prompt": r["prompt"], "answer": r["answer"],
                        "by_model": {model: texts[i] for model, texts in texts_by_model.items()}})
    return out


def ratio_interval(sums, counts, draws: int = 2000, seed: int = 0) -> list[float]:
    """95% percentile bootstrap interval of sum(sums) / sum(counts), a token-weighted mean, with the
    units (prompts, rows) resampled with replacement: their tokens stay together."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    picks = np.random.default_rng(seed).integers(len(sums), size=(draws, len(sums)))
    return [float(x) for x in np.percentile(sums[picks].sum(1) / counts[picks].sum(1), [2.5, 97.5])]
