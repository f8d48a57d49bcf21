"""What counts as a right answer: the lowest floor of the library (it imports nothing above it).

The same reward trains and evaluates: RL's rewards, `tunix-lite eval` and the on-policy preference
pairs all ask one judge (`judge.verdict_for`), which calls the reward a record trains on.

    tags.py                  the answer-tag protocol (`<answer>...</answer>`, the two completion
                             styles) and its rewards: exact_match, format, reasoning_format
    judge.py                 the one judge: a record's reward (`reward_for`), called as RL calls it
                             (`score`), full marks as right (`verdict_for`)
    functions.py             several rewards at once with weights (`Rewards`), the names a config
                             may use (`REWARD_FUNCTIONS`, `reward_set`), DAPO's overlong penalty
    verifiers.py             checks that run in worker processes with a timeout: math, code, steps
    sandbox.py               model-written code in a fresh, confined interpreter per call
    sandbox_child.py         the confined side of the sandbox (run as a script, stdlib only)
    math_answers.py          numbers, lists and arithmetic compared by rule, without `eval`
    math_latex.py            the same with math-verify for LaTeX answers (the tasks extra)
    reasoning_gym.py         the reasoning_gym reward: each task's own scorer, in the verifier pool
    reasoning_gym_scorer.py  that scorer as a worker runs it (imports reasoning-gym)

Nothing is imported here: a verifier worker and the sandbox load only the module they need.
"""
