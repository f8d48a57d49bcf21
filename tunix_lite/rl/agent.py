"""A tool-using agent: the model calls a calculator in its reply, the environment answers in a
turn of its own, and RL trains on whole multi-turn trajectories with the environment's tokens
masked out of the loss.

    user:   What is 47 * 38?
    model:  <calc>47 * 38</calc>                 <- generated: trained on
    user:   <result>1786</result>                <- the environment's turn: read, never trained on
    model:  <answer>1786</answer>                <- generated: trained on

- `calculator_problems`: two- and three-digit arithmetic a small model gets wrong when it answers
  directly, with a tool-use demonstration per problem (`messages`, what an SFT warm start imitates).
- `Calculator`: the environment. It evaluates the last `<calc>...</calc>` of a reply in the
  verifier pool (`tunix_lite.rewards.verifiers`: a timeout per call, so `9 ** 9 ** 9` costs an error
  message, not the run).
- `rollout`: G trajectories per prompt, turn by turn with the sampler: each model turn is sampled
  from the token ids so far (one prefill per prompt for the first turn), the environment's reply
  is appended as token ids, and the next model turn continues from there. Every sampler call has
  the same number of rows, so each turn compiles once.
- `trajectory_rows`: fixed-length training rows whose `weights` are 1 exactly on the model's
  tokens; prompt, environment and padding tokens are inputs the policy conditions on, never
  targets of the loss.
- `run_agent`: GRPO over trajectories (`algorithm: agent`): `TrajectorySampler` is the agent's
  sampling in the rl package's `RolloutStream`, which does the rest as for GRPO and PPO; the loss
  is `grpo_loss`.
- `evaluate_agent`: held-out accuracy with the tool and without it (the first reply's answer, calls
  unanswered).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from tunix_lite.chat import TEMPLATES, format_chat, format_chat_with_mask
from tunix_lite.data.synthetic import split_of
from tunix_lite.rewards.math_answers import evaluate_expression
from tunix_lite.rewards.tags import answer_of
from tunix_lite.rewards.verifiers import VerifierPool
from tunix_lite.rl.advantages import ESTIMATORS
from tunix_lite.rl.config import RLConfig
from tunix_lite.rl.losses import grpo_loss
from tunix_lite.rl.rollouts import Prompts, RolloutStream, old_log_probs
from tunix_lite.rl.setup import rl_setup
from tunix_lite.sampler import Sampler
from tunix_lite.tokenizer import padding_id
from tunix_lite.training.config import ConfigError, option
from tunix_lite.training.trainer import pad_batch

CALL = re.compile(r"<calc>(.*?)</calc>", re.S)
RESULT_OPEN, RESULT_CLOSE = "<result>", "</result>"


# ----------------------------------------------------------------------------- the task


def _problem(rng: random.Random) -> tuple[str, str]:
    op = rng.choice("+-*")
    if op == "*":
        a, b = rng.randint(12, 99), rng.randint(12, 99)
    else:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        a, b = (a, b) if op == "+" or a >= b else (b, a)
    # two integers and an operator we wrote
    return f"{a} {op} {b}", str(eval(f"{a} {op} {b}"))  # noqa: S307


def calculator_problems(n: int, *, seed: int = 0, split: str = "train") -> list[dict]:
    """`n` records {"domain", "prompt", "answer", "expression", "messages"} whose prompts fall in
    `split` (the same hash split as the synthetic tasks); `messages` is the tool-use
    demonstration."""
    rng = random.Random(f"calculator/{split}/{seed}")
    rows = []
    while len(rows) < n:
        expression, answer = _problem(rng)
        prompt = f"What is {expression}?"
        if split_of(prompt) != split:
            continue
        messages = [{"role": "user", "content": prompt},
                    {"role": "assistant", "content": f"<calc>{expression}</calc>"},
                    {"role": "user", "content": f"{RESULT_OPEN}{answer}{RESULT_CLOSE}"},
                    {"role": "assistant", "content": f"<answer>{answer}</answer>"}]
        rows.append({"domain": "calculator", "prompt": prompt, "answer": answer,
                     "expression": expression, "messages": messages})
    return rows


def calculator_source(n: int, *, split: str, seed: int,
                      domains: Sequence[str] | None = None) -> list[dict]:
    """`calculator_problems` as what train_data "synthetic" means for the agent
    (`tunix_lite.training.inputs.load_data`'s source); the calculator is its only domain."""
    return calculator_problems(n, seed=seed, split=split)


# ----------------------------------------------------------------------------- the environment


class Calculator:
    """The environment: the last <calc>expression</calc> of a reply -> "<result>value</result>"
    (or an error message), evaluated in a verifier pool with a timeout."""

    def __init__(self, pool=None):
        self.pool = pool or VerifierPool(workers=2, timeout=1.0)

    def __call__(self, replies: Sequence[str]) -> list[str | None]:
        """One environment turn per reply: None where the reply makes no call."""
        calls = [CALL.findall(r) for r in replies]
        wanted = [i for i, c in enumerate(calls) if c]
        values = self.pool.map(evaluate_expression, [(calls[i][-1],) for i in wanted],
                               failed=float("nan"))
        out: list[str | None] = [None] * len(replies)
        for i, value in zip(wanted, values):
            if not np.isfinite(value):
                shown = "error"
            else:
                shown = str(int(value)) if value == int(value) else f"{value:.6g}"
            out[i] = f"{RESULT_OPEN}{shown}{RESULT_CLOSE}"
        return out


# ----------------------------------------------------------------------------- multi-turn rollouts


@dataclasses.dataclass
class Trajectory:
    ids: list[int]  # the prompt, then every turn, as token ids
    mask: list[float]  # 1.0 on the tokens the model generated (stop tokens included), 0.0 elsewhere
    logprobs: list[float]  # the sampler's log-probability of each generated token, 0.0 elsewhere
    reply: str  # the model's last turn, as text
    tool_calls: int = 0


def environment_turn_ids(tokenizer, content: str, template: str | None = None) -> list[int]:
    """Token ids that follow a model turn's stop token: the rest of that turn's closing text, the
    environment's turn (as a user turn of the chat template), and the header of the next model
    turn."""
    tpl = TEMPLATES[template or tokenizer.chat_template]
    rest = tpl.turn_suffix.split(tpl.stop[0], 1)[1] if tpl.stop[0] in tpl.turn_suffix else ""
    ids, _ = format_chat_with_mask(tokenizer, [{"role": "user", "content": content}], template=tpl,
                                   add_generation_prompt=True)
    if tpl.bos is not None:
        ids = ids[1:]
    return (tokenizer.encode(rest) if rest else []) + ids


def rollout(sampler, prompts: Sequence[Sequence[int]], *, group_size: int, max_new_tokens: int,
            tool: Calculator | None, max_calls: int = 1, temperature: float = 1.0, seed: int = 0,
            template: str | None = None) -> list[Trajectory]:
    """`group_size` trajectories per prompt (rows b * G + g, as the sampler orders them). A model
    turn that ends with a stop token and makes a call gets the environment's answer and another
    turn, up to `max_calls` calls; `tool=None` answers no call (the trajectory is the first
    reply)."""
    out = sampler.generate(list(prompts), max_new_tokens, num_samples=group_size,
                           temperature=temperature, seed=seed)
    stops = set(sampler.stop_ids)
    trajectories = []
    for r in range(len(out.texts)):
        prompt, n = list(out.prompts[r]), int(out.lengths[r])
        trajectories.append(Trajectory(prompt + out.tokens[r, :n].tolist(),
                                       [0.0] * len(prompt) + [1.0] * n,
                                       [0.0] * len(prompt) + out.logprobs[r, :n].tolist(),
                                       out.texts[r]))
    for call in range(max_calls if tool is not None else 0):
        ended = [t.ids[-1] in stops for t in trajectories]
        answers = tool([t.reply if done else "" for t, done in zip(trajectories, ended)])
        active = [i for i, a in enumerate(answers) if a is not None]
        if not active:
            break
        for i in active:
            env = environment_turn_ids(sampler.tokenizer, answers[i], template)
            t = trajectories[i]
            t.ids, t.mask = t.ids + env, t.mask + [0.0] * len(env)
            t.logprobs = t.logprobs + [0.0] * len(env)
            t.tool_calls += 1
        # the same number of rows as the first turn (the active ones, then repeats): one compiled
        # shape per turn
        rows = active + [active[-1]] * (len(trajectories) - len(active))
        more = sampler.generate([trajectories[i].ids for i in rows], max_new_tokens,
                                temperature=temperature, seed=seed + 1 + call)
        for j, i in enumerate(active):
            n = int(more.lengths[j])
            t = trajectories[i]
            t.ids += more.tokens[j, :n].tolist()
            t.mask += [1.0] * n
            t.logprobs += more.logprobs[j, :n].tolist()
            t.reply = more.texts[j]
    return trajectories


def trajectory_rows(trajectories: Sequence[Trajectory], seq_len: int,
                    pad_id: int) -> dict[str, np.ndarray]:
    """{inputs, targets, weights, positions, segment_ids, old_logprobs} [R, seq_len] in the packing
    convention of `tunix_lite.data`: row r predicts ids[1:] from ids[:-1]; `weights` is the
    model-token mask moved onto the targets, so the prompt, the environment's turns and the
    padding are never trained on."""
    R = len(trajectories)
    rows = {"inputs": np.full((R, seq_len), pad_id, np.int32),
            "targets": np.full((R, seq_len), pad_id, np.int32),
            "weights": np.zeros((R, seq_len), np.float32),
            "positions": np.full((R, seq_len), -1, np.int32),
            "segment_ids": np.zeros((R, seq_len), np.int32),
            "old_logprobs": np.zeros((R, seq_len), np.float32)}
    for r, t in enumerate(trajectories):
        n = len(t.ids) - 1
        if n > seq_len:
            raise ValueError(f"trajectory_rows: a trajectory of {len(t.ids)} tokens needs "
                             f"seq_len >= {n}, got {seq_len}; raise seq_len")
        rows["inputs"][r, :n], rows["targets"][r, :n] = t.ids[:-1], t.ids[1:]
        rows["weights"][r, :n], rows["old_logprobs"][r, :n] = t.mask[1:], t.logprobs[1:]
        rows["positions"][r, :n], rows["segment_ids"][r, :n] = np.arange(n), 1
    return rows


# ----------------------------------------------------------------------------- evaluation


def evaluate_agent(model, tokenizer, records: Sequence[Mapping], *, max_new_tokens: int = 24,
                   tool=None, batch_size: int = 32,
                   template: str | None = None) -> dict[str, float]:
    """Greedy held-out accuracy with the calculator ("accuracy_tool", "tool_rate": replies that
    call it) and without it ("accuracy_no_tool": the first reply's tagged answer, no call
    answered)."""
    sampler = Sampler(model, tokenizer)
    tool = tool or Calculator()
    prompts = [format_chat(tokenizer, [{"role": "user", "content": r["prompt"]}], template=template)
               for r in records]
    scores = {"accuracy_tool": [], "accuracy_no_tool": [], "tool_rate": []}
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
        padded = chunk + [chunk[-1]] * (batch_size - len(chunk))
        refs = [r["answer"] for r in records[start:start + batch_size]]
        for key, env in (("accuracy_tool", tool), ("accuracy_no_tool", None)):
            done = rollout(sampler, padded, group_size=1, max_new_tokens=max_new_tokens, tool=env,
                           temperature=0.0, template=template)[:len(chunk)]
            scores[key] += [float(answer_of(t.reply) == ref) for t, ref in zip(done, refs)]
            if env is not None:
                scores["tool_rate"] += [float(t.tool_calls > 0) for t in done]
    return {k: float(np.mean(v)) for k, v in scores.items()}


# ------------------------------------------------------------------------ GRPO over trajectories


@dataclasses.dataclass
class AgentConfig(RLConfig):
    """GRPO over multi-turn calculator trajectories; batch_size counts prompts per rollout,
    max_new_tokens is the budget of each model turn. train_data "synthetic" means
    `calculator_problems`."""

    algorithm: ClassVar[str] = "agent"
    max_calls: int = option(1, "calculator calls answered per trajectory (each adds a model turn)",
                            ge=1)
    n_eval: int = option(64, "validation problems answered greedily with and without the tool, "
                             "before and after (0: none)", ge=0, resume="free")

    def check(self) -> None:
        if self.group_size < 2:
            raise ConfigError("group_size: GRPO compares a prompt's trajectories; need at least "
                              f"2, got {self.group_size}")
        if self.n_test:
            raise ConfigError(f"n_test: {self.n_test} is GRPO's held-out check of the reasoning "
                              "tasks; the agent evaluates calculator problems with n_eval (set "
                              "n_test: 0)")


@dataclasses.dataclass
class Trajectories:
    """One rollout of the agent: B prompts x G trajectories (row b * G + g) and their rewards."""

    trajectories: list[Trajectory]
    rewards: np.ndarray  # [R] weighted total
    parts: dict[str, np.ndarray]  # each reward function's [R]

    def stats(self) -> dict[str, float]:
        """Mean reward (and each reward's), the share of trajectories that called the tool, and
        their length in model tokens (every turn's)."""
        stats = {"reward": float(np.mean(self.rewards)),
                 "tool_rate": float(np.mean([t.tool_calls > 0 for t in self.trajectories])),
                 "length": float(np.mean([sum(t.mask) for t in self.trajectories]))}
        return stats | {f"reward/{name}": float(np.mean(v)) for name, v in self.parts.items()}


class TrajectorySampler:
    """The agent's sampling for the RolloutStream: G trajectories of each prompt through the
    calculator, from the engine's sampler (which the stream syncs), scored on the last reply."""

    def __init__(self, config: AgentConfig, model, engine, prompts: Prompts, rewards,
                 tool: Calculator):
        self.config, self.model, self.engine, self.prompts = config, model, engine, prompts
        self.rewards, self.tool = rewards, tool

    def __call__(self, index: Sequence[int], seed: int) -> Trajectories:
        c = self.config
        # multi-turn continues from token ids and stops on the chat's stop ids: the built-in
        # sampler's, not any RolloutEngine's
        trajectories = rollout(self.engine.sampler, [self.prompts.ids[i] for i in index],
                               group_size=c.group_size, max_new_tokens=c.max_new_tokens,
                               tool=self.tool, max_calls=c.max_calls, temperature=c.temperature,
                               seed=seed, template=c.template)
        records = [self.prompts.records[i] for i in index for _ in range(c.group_size)]
        columns = {key: [r[key] for r in records] for key in records[0]
                   if key not in ("prompt", "messages")}
        total, parts = self.rewards([r["prompt"] for r in records], [t.reply for t in trajectories],
                                    **columns)
        return Trajectories(trajectories, total, parts)


def agent_rows(config: AgentConfig, model, pad_id: int):
    """prepare(trajectories) for the stream: trajectory rows + GRPO's group advantages (+ old
    log-probs when a rollout feeds several optimizer steps), padded to batch_size x group_size
    rows."""

    def prepare(rollout: Trajectories) -> dict[str, np.ndarray]:
        rows = trajectory_rows(rollout.trajectories, config.seq_len, pad_id)
        rows["advantages"] = np.asarray(ESTIMATORS["grpo"](np.asarray(rollout.rewards, np.float32),
                                                           config.group_size))
        rows = pad_batch(rows, config.batch_size * config.group_size)
        if config.steps_per_rollout > 1:
            rows["old_logprobs"] = old_log_probs(model, rows)
        else:
            del rows["old_logprobs"]  # one step per rollout: the ratio is exactly 1 (see grpo_loss)
        return rows

    return prepare


def run_agent(config: AgentConfig, *, verbose: bool = True):
    """Train config.model with GRPO on whole calculator trajectories (see the module docstring).
    Returns the harness's RunResult; before/after hold held-out accuracy with and without the
    tool."""
    c = config
    setup = rl_setup(c, synthetic=calculator_source, verbose=verbose,
                     reads_validation=bool(c.n_accuracy or c.n_eval))
    model, tokenizer, tool = setup.model, setup.tokenizer, Calculator()
    sampler = TrajectorySampler(c, model, setup.engine, setup.prompts, setup.rewards, tool)
    stream = RolloutStream(c, sampler, agent_rows(c, model, padding_id(tokenizer)))
    loss = functools.partial(grpo_loss, epsilon_low=c.epsilon_low, epsilon_high=c.epsilon_high,
                             beta=c.beta, kl_estimator=c.kl_estimator,
                             aggregation="sequence-mean-token-mean")
    held_out = [dict(r) for r in itertools.islice(setup.validation, c.n_eval)]
    eval_fn = (lambda m: evaluate_agent(m, tokenizer, held_out, max_new_tokens=c.max_new_tokens,
                                        tool=tool, template=c.template)) if c.n_eval else None
    report = (f"{len(setup.prompts)} problems x {c.group_size} trajectories of <= {c.max_calls} "
              f"calculator call(s), {c.max_new_tokens} tokens a turn; rows of {c.seq_len}")
    report += f"\n{setup.placement()}" if setup.placement() else ""
    setup.run.say(report)
    return setup.run.train(model, tokenizer, loss, stream.batches, eval_fn, frozen=setup.frozen,
                           report=report, host_metrics=stream.metrics,
                           show=("reward", "tool_rate", "length"))
