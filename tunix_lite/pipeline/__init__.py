"""Multi-stage post-training from one YAML file: a base model through SFT, DPO and GRPO stages to a
measured, exported model, resumable across sessions.

    tunix-lite run capstone_tiny [--max-minutes 500] [--check]
    result = run_pipeline(load_pipeline("capstone_tiny"))

The file (every key: the sections in tunix_lite/pipeline/spec.py):

    output_dir: runs/capstone_tiny
    model: tiny                 # the base model of the first stage
    max_minutes: null           # this session's wall-clock budget (e.g. a Kaggle session)
    data: {style: reasoning, weights: {arithmetic: 2, sequence: 2}, n_train: 1200}   # DataSpec
    defaults: {seq_len: 128, checkpoint_every: 20}  # keys every stage gets unless it sets them
    stages:
      - {name: sft, algorithm: sft, steps: 60}      # a config of a registered algorithm
      - {name: dpo, algorithm: dpo, steps: 30,      # pairs of its start model's own samples,
         on_policy_pairs: {prompts: 1024, samples: 8}}  # judged by the verifier (OnPolicyPairs)
      - {name: grpo, algorithm: grpo, steps: 40}    # starts from the previous stage's output
    evaluation: {n_prompts: 64, samples: 16}        # EvalSpec; null: no evaluation
    export: true                                    # export/: the last stage's model (HF + Orbax)
    export_dtype: float32                           # or bfloat16: half the disk

Each stage is one algorithm run in `output_dir/<name>` with the shared run harness, so it logs,
checkpoints and resumes as `tunix-lite train` does. A stage starts from the model another stage
wrote (`from:`, by default the stage before it; `from: base` is the base model): full fine-tuning's
`model/`, or for LoRA its folder: the adapters and the config naming the model they were trained on,
which `tunix_lite.load` reads as that model with the adapters on (a chain of LoRA stages loads as
one, each stage's adapters merged into the next one's base), so the next stage's LoRA reference
policy is the previous stage's model. A preference stage trains on the data
section's pairs, or with `on_policy_pairs` on pairs sampled from the model it starts from
(`output_dir/pairs/<name>`; tunix_lite.preference.on_policy). Every stage reads the data section's
files unless it sets `train_data`; `train_data: synthetic` with a `seed` of its own draws fresh
prompts of the training side, from data.domains unless the stage names `domains`.

spec.py: before any compute the file's sections and every stage's config are built and checked, each
stage as its algorithm's own config (the same checked dataclass `tunix-lite train` builds, rewards
included), plus what only the pipeline knows (a `from:` that names no earlier stage, a budget too
short for one step), each problem in one line naming the stage and key; and the plan `--check`
prints.
state.py: what the pipeline keeps on disk (pipeline.json, each stage's stage.json marker, the
pairs and data files, all written atomically) and the session's time budget.
run.py: then, in order, the data files, the decontamination of the test set, the held-out
evaluation of the base model, and per stage its training, its held-out evaluation
(`tunix_lite.evaluation`) and the report (`report/`: table and plots of every stage so far);
finally the export. Every piece is written atomically and skipped on a rerun once done, so:

- with `max_minutes`, the stage in training stops at the budget with a checkpoint and the command
  exits cleanly; rerunning it continues that stage from its checkpoint (a Kaggle or Colab session at
  a time);
- killed at any moment, a rerun loses at most the steps since the stage's last checkpoint
  (`checkpoint_every`, 25 unless set).
A stage whose inputs changed after it ran (an earlier stage retrained) is refused with the folder to
delete.

Held out means asked in no training data. Before any evaluation the test prompts (the first
evaluation.n_prompts distinct ones) are compared, question by question
(`tunix_lite.evaluation.decontamination`), with every stage's training data and the base model's
where it is a run whose config names its data. A test prompt found there is refused in one line,
unless `evaluation.allow_overlap: true`: then the table scores those prompts apart, as "seen".
What the report says about it, for people and for graders:

- report/decontamination.json: test (the test source), n_test, n_seen, n_unseen, seen (the seen
  prompts' indices in the evaluation's order), allow_overlap; base {model, data (the sources its
  run lists; [] for a named model), n_seen}; stages {NAME: {from, data (its training source, in
  words), n_records, n_seen (test prompts its own data asks), n_seen_through (its data's, its
  start stages' and the base model's together)}}.
- report/table.json, per stage's summary: n, n_seen, n_unseen; unseen with unseen_ci95 and
  unseen_vs_previous (greedy accuracy on the unseen prompts, its Wilson interval, the paired change
  from the stage it started from, `from:`: [change, lo, hi]); seen with seen_ci95 where n_seen > 0;
  accuracy, ci95 and vs_previous over every prompt.
- report/table.md: the unseen column first ("unseen, n=N [95% CI]"), then its paired change ("vs
  previous", or "vs its start" where some stage does not start from the row above);
  "seen, n=K" and "all" only where K > 0.
"""

from tunix_lite.pipeline.run import PipelineResult, prepare_data, run_pipeline
from tunix_lite.pipeline.spec import (Pipeline, load_pipeline, plan, stage_values,
                                      unused_devices_warning)
from tunix_lite.pipeline.state import source_marker

__all__ = ["Pipeline", "PipelineResult", "load_pipeline", "plan", "prepare_data", "run_pipeline",
           "source_marker", "stage_values", "unused_devices_warning"]
