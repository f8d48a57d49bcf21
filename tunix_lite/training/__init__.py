"""Training: pure losses (losses.py), the one trainer every algorithm plugs its loss into
(trainer.py), and orbax checkpoints that resume a run exactly (checkpoint.py)."""
