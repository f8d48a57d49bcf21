"""How much of the teacher-student gap does distillation close? Held-out loss and exact match of three models.

    python course/results/scripts/distill_gap.py --variants ce,kd,gkd --table tunix_lite/course/results/07_distill.md   # the course's table
    python course/results/scripts/distill_gap.py --variants ce,kd --steps 50 --n-test 70
    python course/results/scripts/distill_gap.py --split validation --set gkd.temperature=1   # choose settings on validation
    python course/results/scripts/distill_gap.py --labels 250 --unlabelled 1000 --variants ce,kd,seqce,seqkd   # few labels
    python course/results/scripts/distill_gap.py --labels 250 --unlabelled 1000 --variants ce,seqkd --keep-blocks 4 --steps 300

Every student is the same cut of the teacher (blocks 0 and 5 by default; --set student_layers=[...] another, or
--keep-blocks K the K blocks it misses least, `prune_blocks` on the validation split), trained with the same steps,
batches and data (tunix_lite/configs/distill_tiny.yaml); the variants differ only in the loss (the seq* ones also in the data):

    ce            alpha 0: plain fine-tuning on the data (no teacher)
    kd            the config: alpha * T^2 * KL + (1 - alpha) * CE, teacher online
    kd_cached     the same from a top-32 teacher cache
    kd_attention  kd + attention transfer;  kd_feature: kd + feature matching through a learned projection
    gkd           half the steps on the student's own samples, scored by the teacher (reverse KL)
    seqce, seqkd  (with --unlabelled) ce / kd on the labelled examples plus unlabelled prompts answered by the
                  teacher (greedy): sequence-level KD (Kim & Rush, 2016); seqkd adds the teacher's soft targets
    seqkd_feature seqkd + feature matching through a learned projection
    seqgkd        seqkd's data with gkd's on-policy half: the student also samples answers to all of those prompts

By default the students learn from the teacher's own training examples, which it has memorised, so its soft targets
are the labels. --labels N is the regime KD is for: a transfer set the teacher never saw (train-split prompts drawn
with --transfer-seed, minus every prompt of the teacher's training set as its run's config.yaml describes it, no
prompt twice), of which every student gets the same N labelled examples; the seq* variants also get --unlabelled M
further prompts of it, answered by the teacher instead of the labels.

Held out: the distinct prompts of the synthetic tasks' test split (a seed no config uses; each prompt once, see
`distinct_prompts`), never seen by teacher or students; settings are chosen on the validation split (--split
validation, disjoint from train and test by prompt) and the test split is read once. The gap closed is
(student - CE-only) / (teacher - CE-only), on the loss (lower is better) and on exact match; the row "cut" is the
student before training, and the last column the gap it closes from there. 95% intervals: Wilson for exact match,
a bootstrap over prompts for the token-weighted loss.
--set key=value applies to every variant (the variant's own keys win); --set name.key=value to variant `name` only.
Writes <out>/results.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

from heldout import ratio_interval

from tunix_lite.evaluation import wilson

VARIANTS = {
    "ce": dict(alpha=0.0, teacher=None),
    "kd": {},
    "kd_cached": dict(top_k=32),
    "kd_attention": dict(attention_weight=1.0),
    "kd_feature": dict(feature_weight=1.0),
    "gkd": dict(on_policy_ratio=0.5, divergence="reverse"),
    "seqce": dict(alpha=0.0, teacher=None),
    "seqkd": {},
    "seqkd_feature": dict(feature_weight=1.0),
    "seqgkd": dict(on_policy_ratio=0.5, divergence="reverse"),
}
SEQUENCE_LEVEL = {"seqce", "seqkd", "seqkd_feature", "seqgkd"}  # labelled examples + the teacher's answers


def heldout(model, tokenizer, records, batch_size: int = 16) -> dict:
    """CE loss on the completions (token-weighted, with a bootstrap interval over prompts) and greedy exact match /
    format of the answers (with a Wilson interval)."""
    import numpy as np
    from flax import nnx

    from tunix_lite.data.sft import SFTBatches, tokenize_sft
    from tunix_lite.evaluation import TaskEval
    from tunix_lite.training.losses import sequence_log_probs

    data = tokenize_sft(records, tokenizer, seq_len=128, truncation="drop")
    per_row = nnx.jit(lambda m, b: (-(sequence_log_probs(m, b) * b["weights"]).sum(-1), b["weights"].sum(-1)))
    sums, counts = map(np.concatenate, zip(*(map(np.asarray, per_row(model, batch))
                                             for batch in SFTBatches(data, batch_size, shuffle=False).epoch(0))))
    loss = float(sums.sum() / counts.sum())
    scores = TaskEval(model, tokenizer, records)()
    return {"loss": loss, "loss_ci": ratio_interval(sums, counts)} | scores | {
        "accuracy_ci": list(wilson(scores["accuracy"] * len(records), len(records))), "n": len(records)}


def gap_closed(student: dict, start: dict, teacher: dict) -> dict:
    return {key: (student[key] - start[key]) / (teacher[key] - start[key]) if teacher[key] != start[key]
            else float("nan") for key in ("loss", "accuracy")}


def chosen_blocks(teacher: str, keep: int, seed: int, n: int = 280) -> list[tuple[list[int], float]]:
    """`prune_blocks` path of the teacher down to `keep` blocks, judged by the loss on the validation split's
    distinct prompts (`n` rows drawn with `seed`): a choice, so never on the test split."""
    from tunix_lite.data.sft import tokenize_sft
    from tunix_lite.data.synthetic import make_splits
    from tunix_lite.distill.student import prune_blocks
    from tunix_lite.evaluation import distinct_prompts
    from tunix_lite.loading import load
    from tunix_lite.training.evals import validation_loss_fn

    model, tokenizer = load(teacher)
    validation = distinct_prompts(make_splits(1, n, 1, seed=seed)["validation"])
    loss = validation_loss_fn(tokenize_sft(validation, tokenizer, seq_len=128, truncation="drop"), 16)
    return prune_blocks(model, lambda m: loss(m)["loss"], keep)


def transfer_set(teacher: str, labels: int, unlabelled: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(labelled, unlabelled) records: train-split examples drawn with `seed` whose prompts are not in the teacher's
    training set, no prompt twice, the domains taking turns; the unlabelled ones are for the teacher to answer.
    Disjoint from the validation and test splits by construction (a prompt's split is a hash of it)."""
    import yaml

    from tunix_lite.data.synthetic import DOMAINS, make_splits, split_of

    run_config = Path(teacher).parent / "config.yaml"
    if not run_config.is_file():
        sys.exit(f"--labels: {run_config} not found: the teacher's training set is read from its run's config.yaml")
    taught = yaml.safe_load(run_config.read_text())
    if taught.get("train_data") != "synthetic":
        sys.exit(f"--labels: the teacher trained on {taught.get('train_data')} ({run_config}), not the synthetic tasks")
    seen = set(make_splits(taught["n_train"], 1, 1, seed=taught["seed"],
                           domains=taught.get("domains") or DOMAINS)["train"]["prompt"])
    wanted = labels + unlabelled
    pool = make_splits(4 * wanted, 1, 1, seed=seed)["train"]
    fresh = list({r["prompt"]: {k: r[k] for k in ("domain", "prompt", "completion")}
                  for r in pool if r["prompt"] not in seen}.values())
    rank = collections.Counter()  # domains in turn, as far as each has unseen prompts (the teacher saw most of
    for r in fresh:               # the few facts and instruction prompts): the labelled set stays mixed
        r["rank"], rank[r["domain"]] = rank[r["domain"]], rank[r["domain"]] + 1
    fresh = [{k: v for k, v in r.items() if k != "rank"} for r in sorted(fresh, key=lambda r: r["rank"])]
    if len(fresh) < wanted:
        sys.exit(f"--labels {labels} --unlabelled {unlabelled}: only {len(fresh)} prompts the teacher never saw")
    assert all(split_of(r["prompt"]) == "train" for r in fresh)
    return fresh[:labels], fresh[labels:wanted]


def write_jsonl(path: Path, records) -> str:
    path.write_text("".join(json.dumps(dict(r)) + "\n" for r in records), encoding="utf-8")
    return str(path)


def write_section(path: Path, heading: str, body: str) -> None:
    """Write `heading` and `body` into the markdown file `path`: in place of the section under that heading (up to
    the next "## ") if there is one, else at the end; the rest of the file is kept."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    section = f"{heading}\n\n{body.strip()}\n"
    start = text.find(heading + "\n")  # the whole heading line: one heading may begin another
    if start < 0:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + section
    else:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + (text[end:] if end >= 0 else "")
    path.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="distill_tiny")
    parser.add_argument("--variants", default="ce,kd,kd_attention,kd_feature")
    parser.add_argument("--steps", type=int, help="override the config's steps")
    parser.add_argument("--n-test", type=int, default=280, help="held-out rows drawn (40 per domain); each "
                        "distinct prompt among them is scored once")
    parser.add_argument("--test-seed", type=int, default=7)
    parser.add_argument("--split", choices=("test", "validation"), default="test",
                        help="held-out split: choose settings on validation, report on test once")
    parser.add_argument("--labels", type=int, help="few labels: the students learn from this many labelled "
                        "examples of a transfer set the teacher never saw (see above)")
    parser.add_argument("--unlabelled", type=int, default=0, help="with --labels: prompts of the transfer set "
                        "answered by the teacher, for the seq* variants")
    parser.add_argument("--transfer-seed", type=int, default=1, help="with --labels: the transfer set's seed")
    parser.add_argument("--keep-blocks", type=int, help="the student: the K teacher blocks it misses least (greedy "
                        "removal by validation loss, `prune_blocks`) instead of student_layers")
    parser.add_argument("--out", default="runs/distill_gap")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides key=value (every variant) or "
                        "variant.key=value (that variant only); YAML values")
    parser.add_argument("--table", type=Path, help="also write the table here (and the results beside it as .json), "
                        "with the command that made it (the notebook shows tunix_lite/course/results/07_distill.md)")
    args = parser.parse_args()

    import yaml

    from tunix_lite.data.synthetic import make_splits
    from tunix_lite.distill.distill import run_distill
    from tunix_lite.distill.student import keep_layers
    from tunix_lite.evaluation import distinct_prompts
    from tunix_lite.loading import load
    from tunix_lite.training.algorithms import load_config

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    sizes = (1, args.n_test, 1) if args.split == "validation" else (1, 1, args.n_test)
    test = distinct_prompts(make_splits(*sizes, seed=args.test_seed)[args.split])
    extra = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    shared = {k: v for k, v in extra.items() if "." not in k}
    base = load_config(args.config) if not args.steps else load_config(args.config, steps=args.steps)
    if args.keep_blocks:
        if "student_layers" in shared:
            parser.error("--keep-blocks chooses student_layers: set one or the other")
        if "pruning" not in results:
            path = chosen_blocks(base.teacher, args.keep_blocks, args.test_seed)
            results["pruning"] = [{"blocks": kept, "validation_loss": loss} for kept, loss in path]
            results_file.write_text(json.dumps(results, indent=1))
        print("blocks kept, validation loss: " + ", ".join(f"{p['blocks']} {p['validation_loss']:.3f}"
                                                          for p in results["pruning"]))
        shared["student_layers"] = results["pruning"][-1]["blocks"]

    names = args.variants.split(",")
    if any(name in SEQUENCE_LEVEL for name in names) and not args.unlabelled:
        parser.error(f"{', '.join(sorted(SEQUENCE_LEVEL))} need --labels N and --unlabelled M")
    teacher = None
    if "teacher" not in results:
        teacher, tokenizer = load(base.teacher)
        results["teacher"] = heldout(teacher, tokenizer, test) | {"model": base.teacher}
        results_file.write_text(json.dumps(results, indent=1))
    data = {}
    if args.labels:  # the transfer set, as files the configs name (train_data) beside the run
        from tunix_lite.evaluation import TaskEval

        labelled, unlabelled = transfer_set(base.teacher, args.labels, args.unlabelled, args.transfer_seed)
        validation = make_splits(1, base.n_validation, 1, seed=base.seed)["validation"]
        data["validation_data"] = write_jsonl(out / "validation.jsonl", validation)
        data["labelled"] = write_jsonl(out / "labelled.jsonl", labelled)
        answered = out / "teacher_answers.jsonl"  # greedy: computed once for these prompts, then reused
        if unlabelled and (not answered.exists() or [r["prompt"] for r in unlabelled] !=
                           [json.loads(line)["prompt"] for line in answered.read_text().splitlines()]):
            teacher, tokenizer = (teacher, tokenizer) if teacher is not None else load(base.teacher)
            texts = TaskEval(teacher, tokenizer, [r | {"answer": ""} for r in unlabelled]).completions()
            write_jsonl(answered, [r | {"completion": text.strip()} for r, text in zip(unlabelled, texts)])
        if unlabelled:
            with_answers = labelled + [json.loads(line) for line in answered.read_text().splitlines()]
            data["with_answers"] = write_jsonl(out / "with_teacher_answers.jsonl", with_answers)
    del teacher
    layers = shared.get("student_layers", base.student_layers)
    if layers and "cut" not in results:  # the student before any training: where every variant starts
        student, tokenizer = load(base.model)
        results["cut"] = heldout(keep_layers(student, layers), tokenizer, test) | {"student_layers": layers}
        results_file.write_text(json.dumps(results, indent=1))
    for name in names:
        own = {k.split(".", 1)[1]: v for k, v in extra.items() if k.startswith(name + ".")}
        if data:
            own = {"train_data": data["with_answers" if name in SEQUENCE_LEVEL else "labelled"],
                   "validation_data": data["validation_data"]} | own
            if name in SEQUENCE_LEVEL:  # a rambling teacher answer may not fit a row: dropped, as the report says
                own = {"truncation": "drop"} | own
        overrides = shared | VARIANTS[name] | own | {"output_dir": str(out / name), "overwrite": True, "eval_every": 0,
                                              "n_accuracy": 0, "checkpoint_every": 0}
        config = type(base).from_dict(base.to_dict() | overrides)
        start = time.perf_counter()
        result = run_distill(config)
        seconds = time.perf_counter() - start
        results[name] = heldout(result.model, result.tokenizer, test) | {
            "seconds": seconds, "steps": config.steps, "overrides": {k: v for k, v in overrides.items()
                                                                     if k not in ("output_dir", "overwrite")}}
        results_file.write_text(json.dumps(results, indent=1))

    rows = ["| model | held-out loss [95% CI] | exact match [95% CI] | format | gap closed from CE-only (loss / exact "
            "match) | from the cut |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        if name == "pruning":
            continue
        closed = from_cut = ""
        if name not in ("teacher", "ce", "cut") and "ce" in results:
            g = gap_closed(r, results["ce"], results["teacher"])
            closed = f"{g['loss']:.0%} / {g['accuracy']:.0%}"
        if name not in ("teacher", "cut") and "cut" in results:
            g = gap_closed(r, results["cut"], results["teacher"])
            from_cut = f"{g['loss']:.0%} / {g['accuracy']:.0%}"
        (l0, l1), (a0, a1) = r["loss_ci"], r["accuracy_ci"]
        rows.append(f"| {name} | {r['loss']:.3f} [{l0:.3f}, {l1:.3f}] | {r['accuracy']:.3f} [{a0:.3f}, {a1:.3f}] "
                    f"| {r['format']:.3f} | {closed} | {from_cut} |")
    print("\n".join(rows))
    if args.table:  # a section of the markdown file and a key of the .json beside it, per setting
        command = "nice -n 10 python " + " ".join(sys.argv)
        if args.labels:
            heading, key = (f"## Few labels: {args.labels} labelled examples the teacher never saw"
                            f"{f', {args.unlabelled} prompts it answered' if args.unlabelled else ''}"), "few_labels"
            if args.keep_blocks or layers != base.student_layers:  # another student: a section of its own
                heading += (f", a student of the {args.keep_blocks} teacher blocks it misses least ({layers})"
                            if args.keep_blocks else f", a student of teacher blocks {layers}")
                key += "_blocks_" + "_".join(map(str, layers))
        else:
            heading, key = "## Students on the teacher's own training set", None
        args.table.parent.mkdir(parents=True, exist_ok=True)
        write_section(args.table, heading, f"Reproduce: `{command}` (teacher: `tunix-lite train --config "
                      f"tunix_lite/configs/sft_tiny.yaml`).\n\n{len(test)} held-out {args.split} prompts, each once (the distinct "
                      f"prompts of {args.n_test} rows of `make_splits(..., seed={args.test_seed})`).\n\n"
                      + "\n".join(rows))
        saved = args.table.with_suffix(".json")
        everything = json.loads(saved.read_text()) if saved.exists() else {}
        this = {"command": command} | results
        everything = everything | {key: this} if key else {k: everything[k] for k in everything
                                                            if k.startswith("few_labels")} | this
        saved.write_text(json.dumps(everything, indent=1))
    print(f"wrote {results_file}")


if __name__ == "__main__":
    main()
