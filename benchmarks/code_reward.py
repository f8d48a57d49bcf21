"""What sandboxed code rewards cost an RL step: GRPO with a code reward, sandboxed and not.

    python benchmarks/code_reward.py             # tunix_lite/configs/grpo_tiny.yaml's shape on the tiny model
    python benchmarks/code_reward.py --smoke     # 2 steps of 2 x 4 completions: the code paths only
    python benchmarks/code_reward.py --grading-only  # the sandboxed step's grading alone, no model

The same GRPO run two ways, differing only in how each completion's program is graded against its
asserts (both give the same scores, so both runs train the same policy on the same rewards):
- `exec`: the program runs in this process with `exec` (no isolation: the cheapest grading there
  is, and a model's program can then forge its score or kill the run);
- `sandbox`: `check_code` through `VerifierPool`: each program in a fresh fork of the sandbox's
  zygote, confined (tunix_lite.sandbox), with values judged here.

The tiny model writes no code, so each completion stands for one of a few programs (right, wrong,
one that raises), in turn: the grading work is real, the policy's text is not. The tiny model's
step is the hardest case for the sandbox (the shortest step there is: on Gemma the step is 10-100x
longer and the same grading costs the same). Prints one row per variant: the median step time over
the steps after the first two (compile), median over `--reps` repetitions (the variants' order
turned each time), and each variant's step time against `exec`. `--grading-only` times just what
the sandbox adds to a step: the step's 64 `check_code` calls through `VerifierPool(workers=2)`,
`--reps` times after a warm-up (seconds: cheap enough to compare two checkouts, interleaved, on a
busy machine).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

PROGRAMS = [
    "def add(a, b):\n    total = a\n    for _ in range(b):\n        total += 1\n    return total",
    "def add(a, b):\n    return a - b",
    "def add(a, b):\n    return [a, b][2]",
    "def add(a, b):\n    return sum([a, b])",
]
TESTS = "assert add(2, 2) == 4\nassert add(1, 5) == 6\nassert add(0, 0) == 0"


def exec_check(program: str, tests: str) -> float:
    """The unisolated grader: the fraction of asserts that pass after exec'ing the program here."""
    namespace: dict = {}
    try:
        exec(program, namespace)  # noqa: S102 - the point of comparison, never used for training
    except Exception:  # noqa: BLE001
        return 0.0
    passed = 0
    for line in tests.splitlines():
        try:
            exec(line, namespace)  # noqa: S102
            passed += 1
        except Exception:  # noqa: BLE001
            pass
    return passed / len(tests.splitlines())


def run(variant: str, config_overrides: dict) -> dict:
    from tunix_lite.rl.grpo import GRPOConfig, run_grpo
    from tunix_lite.rl.rewards import Rewards
    from tunix_lite.verifiers import VerifierPool, check_code

    stamps: list[float] = []
    with VerifierPool(timeout=5.0) as pool:
        def code(prompts, completions, **columns):
            stamps.append(time.perf_counter())  # one per step: the steps' time apart
            programs = [PROGRAMS[i % len(PROGRAMS)] for i in range(len(completions))]
            if variant == "exec":
                return [exec_check(p, TESTS) for p in programs]
            return pool.map(check_code, [(p, TESTS) for p in programs])

        config = GRPOConfig(**config_overrides)
        run_grpo(config, rewards=Rewards({"code": code}), verbose=False)
    steps = [b - a for a, b in itertools.pairwise(stamps)]
    steps = steps[2:] or steps  # the first two steps compile
    return {"variant": variant, "step_s": statistics.median(steps), "steps_timed": len(steps)}


def grading_only(reps: int, completions: int = 64) -> dict:
    """The sandbox variant's grading work for one step, alone: median and min wall seconds, and the
    trainer's own CPU seconds, over `reps` timed calls of the pool after a warm-up."""
    from tunix_lite.verifiers import VerifierPool, check_code

    calls = [(PROGRAMS[i % len(PROGRAMS)], TESTS) for i in range(completions)]
    walls, cpus = [], []
    with VerifierPool(workers=2, timeout=5.0) as pool:
        expected = pool.map(check_code, calls)
        for _ in range(reps):
            start, cpu = time.perf_counter(), time.process_time()
            assert pool.map(check_code, calls) == expected
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
    return {"completions": completions, "grading_s": statistics.median(walls),
            "grading_min_s": min(walls), "trainer_cpu_s": statistics.median(cpus)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="2 steps of 2 x 4 completions")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3, help="repetitions, the variants' order turned each")
    parser.add_argument("--json", action="store_true", help="print the rows as one JSON list")
    parser.add_argument("--grading-only", action="store_true",
                        help="time only the sandboxed grading of one step's 64 completions")
    args = parser.parse_args()
    if args.grading_only:
        print(json.dumps(grading_only(args.reps)))
        return
    shape = dict(model="tiny", n_train=256, n_validation=8, n_accuracy=0, seq_len=128,
                 max_prompt_tokens=72, max_new_tokens=96, batch_size=8, group_size=8,
                 micro_batches=2, steps=args.steps, warmup_steps=1, beta=0.01, eval_every=0,
                 checkpoint_every=0, log_every=1, output_dir=None)
    if args.smoke:
        shape |= dict(batch_size=2, group_size=4, max_new_tokens=8, micro_batches=1, steps=3)
        args.reps = 1
    variants = ["exec", "sandbox"]
    times: dict[str, list[float]] = {v: [] for v in variants}
    for rep in range(args.reps):  # the order turns each repetition: load from elsewhere lands on all
        for variant in variants[rep % 2:] + variants[:rep % 2]:
            times[variant].append(run(variant, shape)["step_s"])
    completions = shape["batch_size"] * shape["group_size"]
    by = {v: statistics.median(t) for v, t in times.items()}
    rows = [{"variant": v, "step_s": by[v], "per_repetition": times[v], "completions_per_step": completions,
             "vs_exec": by[v] / by["exec"] - 1} for v in variants]
    if args.json:
        print(json.dumps(rows))
        return
    print(f"GRPO step, {completions} completions of up to {shape['max_new_tokens']} tokens, "
          "each graded against 3 asserts")
    print(f"{'grading':<9} {'step s':>8} {'vs exec':>8}")
    for r in rows:
        print(f"{r['variant']:<9} {r['step_s']:8.3f} {r['vs_exec']:+8.1%}")


if __name__ == "__main__":
    main()
