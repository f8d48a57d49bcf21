"""Training: pure losses and the one trainer every algorithm plugs its loss into."""
