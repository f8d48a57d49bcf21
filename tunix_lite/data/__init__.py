"""Data: tasks, records from disk, and the fixed-shape rows every algorithm trains on.

    synthetic.py      the course's own verifiable tasks (seven domains, fixed splits), preference
                      pairs and the pretraining corpus
    reasoning_gym.py  real tasks from reasoning-gym named by one spec string, and the probe that
                      refuses an unsound scorer
    records.py        records from disk (.jsonl, .json, .csv, .parquet, a saved dataset), one
                      side of a file's content split (PATH?split=test)
    questions.py      what makes two prompts one question, and the content split's hash
    sft.py            chat or prompt/completion records -> fixed [B, T] integer batches
    packing.py        token documents packed into [B, T] rectangles with segment ids
    batches.py        deterministic, resumable batches for every algorithm
    rollouts.py       sampled completions -> fixed-length training rows

What counts as a right answer (the answer tags, the rewards, the verifiers): tunix_lite.rewards.
"""
