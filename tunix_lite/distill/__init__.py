"""Knowledge distillation: a frozen teacher's distributions (logits, attention maps, hidden states)
teach a student.

    losses.py     pure functions: softened divergences (forward / reverse KL, generalized JSD) with
                  T^2, top-k KD with the tail mass, attention transfer, feature matching
    cache.py      the teacher's top-k distribution computed once over a dataset, saved and checked
    student.py    a smaller student cut from a model's layers, layer mappings, the learned feature
                  projection
    objective.py  DistillLoss: the loss a Trainer runs (online teacher as `frozen`, or the cache in
                  the batch)
    on_policy.py  on-policy distillation (GKD): the student samples, the teacher scores its samples
    distill.py    DistillConfig + run_distill
                  (`tunix-lite train --config distill_tiny`)
"""
