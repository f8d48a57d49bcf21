"""Training: the core every algorithm plugs its loss into, and the run every driver shares.

    losses.py       log-probabilities and the language-model loss, as pure functions
    trainer.py      the one trainer: a model, an optimizer, a pure loss; exact accumulation
    checkpoint.py   orbax checkpoints that resume a run exactly
    checked.py      checked configs: typed, range-checked dataclasses from YAML or the command line
    config.py       `TrainConfig`: the base of every algorithm's config (model, optimizer, data,
                    run)
    inputs.py       what a driver starts from: the model, its frozen reference, the data
    harness.py      the run: outputs, resume, evaluation before and after, export
    evals.py        the evaluations drivers hand to the run, and the plot of its history
    metrics_log.py  metrics.jsonl and the experiment trackers `report_to` names
    algorithms.py   the algorithms `tunix-lite train` runs, by a config's `algorithm:`
    stopped_run.py  a run stopped before it exported, still loadable as a model
    sft.py          supervised fine-tuning end to end (`run_sft`)
"""
