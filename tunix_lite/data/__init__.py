"""Data for the course: `synthetic` holds the project's own verifiable tasks, rewards and
pretraining corpus."""
