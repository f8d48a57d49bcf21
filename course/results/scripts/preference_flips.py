"""Which greedy answers a preference run changed, and how: exact match of each model on the distinct held-out prompts,
the answers each gained and lost against the first model, and two ways of getting a number or answer short.

    python course/results/scripts/preference_flips.py runs/sft_tiny/model runs/dpo_tiny/model
    # options: --split validation, --n 700

- cut short: the tagged answer is a strict prefix of the right one ("dog dog dog dog" for five dogs, "1" for 12);
- numbers copied short: among the text's first numbers (as many as the prompt has), one that is not in the prompt but
  begins one of its numbers ("Smallest is 2, leaving 43, 58" for 20, 43, 58). Arithmetic's intermediate results
  match this by chance, so a model that never cuts a number still counts some.

The prompts are `prompt_records(preference_pairs(n, seed=2024, split=...))`, those of preference.py.
"""

from __future__ import annotations

import argparse
import re
import sys


def cut_short(answer: str | None, right: str) -> bool:
    return bool(answer) and answer != right and right.replace(" ", "").startswith(answer.replace(" ", ""))


def number_copied_short(prompt: str, text: str) -> bool:
    given, written = re.findall(r"\d+", prompt), re.findall(r"\d+", text)
    return any(x not in given and any(y.startswith(x) and y != x for y in given) for x in written[:len(given)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="model directories; the first is the one the others started from")
    parser.add_argument("--split", default="test", choices=("validation", "test"))
    parser.add_argument("--n", type=int, default=700, help="held-out pairs whose distinct prompts are answered")
    args = parser.parse_args()

    import tunix_lite
    from tunix_lite.data.synthetic import answer_of, preference_pairs
    from tunix_lite.preference.evaluation import answer_flaw, generation_eval, prompt_records

    records = prompt_records(preference_pairs(args.n, seed=2024, split=args.split))
    print(f"| model | exact match of {len(records)} | gained | lost | cut short | numbers copied short |")
    print("|---|---:|---:|---:|---:|---:|")
    first = None
    for name in args.models:
        model, tokenizer = tunix_lite.load(name)
        answers = generation_eval(model, tokenizer, records, batch_size=64)
        answers(model)
        texts = answers.task.last_texts
        right = [answer_flaw(t, r["answer"]) == "correct" for r, t in zip(records, texts, strict=True)]
        first = first or right
        gained = sum(a and not b for a, b in zip(right, first))
        lost = sum(b and not a for a, b in zip(right, first))
        short = sum(cut_short(answer_of(t), r["answer"]) for r, t in zip(records, texts))
        copied = sum(number_copied_short(r["prompt"], t) for r, t in zip(records, texts))
        print(f"| {name} | {sum(right)} | {gained} | {lost} | {short} | {copied} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
