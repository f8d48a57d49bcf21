"""The tool-using agent: the environment's turn joins the transcript exactly as the chat template writes it, the
environment's tokens are never trained on, multi-turn rollouts keep one batch shape, and the calculator survives
a hostile expression."""

import numpy as np
import pytest

import tunix_lite
from tunix_lite.chat import format_chat, format_chat_with_mask
from tunix_lite.data.synthetic import split_of
from tunix_lite.rl.agent import (Calculator, Trajectory, calculator_problems, environment_turn_ids, rollout,
                                 trajectory_rows)
from tunix_lite.sampler import GenerateOutput, left_pad


@pytest.fixture(scope="module")
def tokenizer():
    return tunix_lite.load("tiny")[1]


@pytest.fixture(scope="module")
def calculator():
    return Calculator()


def test_problems_are_split_by_prompt_and_come_with_a_demonstration():
    rows = calculator_problems(30, seed=1, split="test")
    assert all(split_of(r["prompt"]) == "test" for r in rows)
    assert all(str(eval(r["expression"])) == r["answer"] for r in rows)  # noqa: S307
    assert rows == calculator_problems(30, seed=1, split="test")
    assert [m["role"] for m in rows[0]["messages"]] == ["user", "assistant", "user", "assistant"]


def test_the_calculator_answers_calls_and_survives_bad_ones(calculator):
    replies = ["<calc>47 * 38</calc>", "no call", "<calc>1 / 4</calc>", "<calc>9 ** 9 ** 9</calc>",
               "<calc>import os</calc>", "<calc>1</calc> then <calc>2 + 2</calc>"]
    assert calculator(replies) == ["<result>1786</result>", None, "<result>0.25</result>", "<result>error</result>",
                                   "<result>error</result>", "<result>4</result>"]


def test_a_demonstrated_trajectory_is_the_chat_template_and_its_mask_the_sft_mask(tokenizer):
    """Prompt + model turn + environment_turn_ids + model turn == the whole conversation formatted by the chat
    template, and the model-token mask == SFT's assistant mask: the environment's turn is context, not target."""
    record = calculator_problems(1, seed=3)[0]
    messages = record["messages"]
    end = tokenizer.piece_to_id("<end_of_turn>")
    prompt = format_chat(tokenizer, messages[:1])
    turn1 = tokenizer.encode(messages[1]["content"]) + [end]
    env = environment_turn_ids(tokenizer, messages[2]["content"])
    turn2 = tokenizer.encode(messages[3]["content"]) + [end]
    ids = prompt + turn1 + env + turn2
    mask = [0] * len(prompt) + [1] * len(turn1) + [0] * len(env) + [1] * len(turn2)
    full, sft_mask = format_chat_with_mask(tokenizer, messages)
    assert full[:len(ids)] == ids and tokenizer.decode(full[len(ids):]) == "\n"  # the template's closing newline
    assert sft_mask[:len(ids)] == mask

    rows = trajectory_rows([Trajectory(ids, [float(m) for m in mask], [-0.5 * m for m in mask], "")], 96, 0)
    n = len(ids) - 1
    assert rows["weights"][0, :n].tolist() == mask[1:] and rows["weights"][0, n:].sum() == 0
    env_targets = slice(len(prompt) + len(turn1) - 1, len(prompt) + len(turn1) + len(env) - 1)
    assert rows["targets"][0, env_targets].tolist() == env and rows["weights"][0, env_targets].sum() == 0
    assert np.all(rows["old_logprobs"][0] == -0.5 * rows["weights"][0])
    with pytest.raises(ValueError, match="needs seq_len >= "):
        trajectory_rows([Trajectory(ids, mask, mask, "")], 8, 0)


class ScriptedSampler:
    """A stand-in for Sampler.generate that replies from a script (reply text by call number), recording the batch
    sizes it was asked for."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.calls = tokenizer, replies, []
        self.stop_ids = (tokenizer.eos_id, tokenizer.piece_to_id("<end_of_turn>"))

    def generate(self, prompts, max_new_tokens, *, num_samples=1, temperature=1.0, seed=0):
        self.calls.append(len(prompts) * num_samples)
        texts = self.replies[len(self.calls) - 1]
        rows = [list(p) for p in prompts for _ in range(num_samples)]
        tokens = np.zeros((len(rows), max_new_tokens), np.int32)
        lengths = []
        for r, text in enumerate(texts):
            ids = (self.tokenizer.encode(text) + [self.stop_ids[1]])[:max_new_tokens]
            tokens[r, :len(ids)] = ids
            lengths.append(len(ids))
        padded, _ = left_pad(rows, 0)
        return GenerateOutput(texts, tokens, np.full(tokens.shape, -1.0, np.float32), np.array(lengths), padded,
                              np.array([len(p) for p in rows]), num_samples)


def test_rollouts_answer_calls_in_a_second_turn_of_the_same_batch_size(tokenizer, calculator):
    prompts = [format_chat(tokenizer, [{"role": "user", "content": p}]) for p in ("What is 12 * 12?", "Hi?")]
    script = [["<calc>12 * 12</calc>", "<answer>100</answer>", "<calc>2+2</calc>", "no"],
              ["<answer>144</answer>", "<answer>4</answer>", "ignored", "ignored"]]
    sampler = ScriptedSampler(tokenizer, script)
    done = rollout(sampler, prompts, group_size=2, max_new_tokens=24, tool=calculator)
    assert sampler.calls == [4, 4]  # the second turn pads its two rows to the first turn's four
    assert [t.reply for t in done] == ["<answer>144</answer>", "<answer>100</answer>", "<answer>4</answer>", "no"]
    assert [t.tool_calls for t in done] == [1, 0, 1, 0]
    first = done[0]
    env = environment_turn_ids(tokenizer, "<result>144</result>")
    assert tokenizer.decode(first.ids).count("<result>144</result>") == 1
    assert sum(first.mask) == len(tokenizer.encode("<calc>12 * 12</calc>")) + len(tokenizer.encode("<answer>144</answer>")) + 2
    assert len(first.ids) == len(prompts[0]) + sum(first.mask) + len(env)

    no_tool = rollout(ScriptedSampler(tokenizer, script), prompts, group_size=2, max_new_tokens=24, tool=None)
    assert [t.reply for t in no_tool] == script[0] and all(t.tool_calls == 0 for t in no_tool)


def test_agent_config_refuses_the_reasoning_tasks_held_out_check():
    from tunix_lite.rl.agent import AgentConfig

    with pytest.raises(ValueError, match="n_test: 50 is GRPO's held-out check of the reasoning tasks; the agent "
                                         "evaluates calculator problems with n_eval"):
        AgentConfig.from_dict({"algorithm": "agent", "n_test": 50})


@pytest.mark.slow
def test_cli_agent_trains_on_whole_trajectories(tmp_path, capsys, micro_model):
    """`tunix-lite train` with `algorithm: agent` runs run_agent itself: rollouts through the calculator, rewards
    and tool rate logged per step, held-out accuracy with and without the tool before and after training."""
    import yaml

    from tunix_lite.cli import main

    out = tmp_path / "run"
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(dict(
        algorithm="agent", model=str(micro_model), n_train=8, n_validation=2, n_test=0, n_eval=2, seq_len=64,
        max_new_tokens=8, batch_size=2, group_size=2, steps=2, warmup_steps=0, learning_rate=1e-5,
        checkpoint_every=2, log_every=1, eval_every=0, output_dir=str(out))))
    assert main(["train", "--config", str(path)]) == 0
    assert "8 problems x 2 trajectories of <= 1 calculator call(s)" in capsys.readouterr().out
    scores = yaml.safe_load((out / "scores.json").read_text())
    for when in ("before", "after"):
        assert set(scores[when]) >= {"accuracy_tool", "accuracy_no_tool", "tool_rate"}, scores
    lines = [yaml.safe_load(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    assert all(k in m for m in lines for k in ("reward", "tool_rate", "length", "loss")), lines
    assert (out / "model").is_dir() and (out / "checkpoints" / "2").is_dir()
