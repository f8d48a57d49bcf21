"""What every RL driver (GRPO, PPO, the agent) builds before its first rollout, written once.

    setup = rl_setup(config)          # any RLConfig
    setup.model, setup.tokenizer      # the policy to train
    setup.prompts, setup.validation   # train_data as chat-formatted prompts; validation records
    setup.rewards, setup.frozen       # the reward functions; the reference (None when beta = 0)
    setup.engine                      # the rollout engine, colocated or on `rollout_mesh:` devices

- `split_devices`: which of the machine's devices train and which sample (`rollout_mesh:`).
- `rl_setup`: the run harness on the training devices, then the model, data, rewards, reference
  and rollout engine.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
from flax import nnx

from tunix_lite import sharding
from tunix_lite.rl.engine import SamplerEngine
from tunix_lite.rewards.functions import Rewards
from tunix_lite.rl.rollouts import Prompts
from tunix_lite.training.config import ConfigError, check_mesh
from tunix_lite.training.harness import Run
from tunix_lite.training.inputs import (SyntheticSource, build_model, load_data, reference_policy,
                                        synthetic_tasks, trained_variables)


def split_devices(config, devices=None) -> tuple[list, jax.sharding.Mesh | None]:
    """(the devices `mesh:` spans, the rollout mesh): every device and None when rollouts are
    colocated; else the first devices train and the last `rollout_mesh` ones sample. A ConfigError,
    before any compute, when the two meshes do not fit side by side on this machine's devices."""
    devices = list(devices) if devices is not None else jax.devices()
    spec, n = config.rollout_mesh, len(devices)
    if spec is None:
        return devices, None
    sizes = spec if isinstance(spec, dict) else {}
    take = math.prod(sizes.values()) if sizes and -1 not in sizes.values() else n // 2
    if not 0 < take < n:
        raise ConfigError(f"rollout_mesh: {spec!r} needs {max(take, 1)} device(s) and the "
                          f"trainer at least 1 more, this machine has {n}; give the rollouts "
                          "fewer devices, or set rollout_mesh: null to sample on the trainer's "
                          "devices")
    check_mesh(spec, None, num_devices=take, key="rollout_mesh",
               devices=f"the rollouts get {take} (the last half of this machine's {n})")
    if config.mesh is not None:  # sizes overlapping the rollout devices, or a strategy not fitting
        check_mesh(config.mesh, config.batch_size, config.micro_batches, num_devices=n - take,
                   devices=f"rollout_mesh: {spec} takes {take} of this machine's {n} and leaves "
                           f"{n - take} (the meshes may not share devices); make mesh: use "
                           f"{n - take} (a strategy name spans them)")
    return devices[:n - take], sharding.resolve_mesh(spec, devices[n - take:])


@dataclasses.dataclass
class RLSetup:
    """An RL run's pieces, ready for its sampler and its stream."""

    run: Run
    model: nnx.Module
    tokenizer: object
    prompts: Prompts  # the train records, chat-formatted
    validation: Sequence  # the validation records
    rewards: Rewards
    frozen: nnx.Module | None  # the reference policy; None when beta = 0
    engine: SamplerEngine

    def placement(self) -> str:
        """Where rollouts run, for the run's report: "" when colocated with the trainer."""
        mesh = self.engine.weights.mesh
        if mesh is None:
            return ""
        config = self.run.config
        trainer_ids = [d.id for d in self.run.devices[:None if config.mesh else 1]]
        sent = "the adapters" if config.lora_rank else "every parameter"
        copied = self.engine.weights.last["bytes"]
        return (f"rollouts on devices {[d.id for d in mesh.devices.flat]} ({dict(mesh.shape)}), "
                f"training on {trainer_ids}: a copy of {copied:,} bytes, then {sent} sent after "
                "each update")


def rl_setup(config, *, synthetic: SyntheticSource = synthetic_tasks,
             rewards: Rewards | None = None, verbose: bool = True,
             reads_validation: bool | None = None) -> RLSetup:
    """The run (its `mesh:` on the training devices), config.model, the data (`synthetic`: what
    train_data "synthetic" means, the course's tasks by default), the prompts, `rewards` or the
    config's, the frozen reference (beta > 0) and the rollout engine (on `rollout_mesh:` devices
    when set). reads_validation: whether the run answers validation prompts (None: n_accuracy >
    0); one that does not needs no unseen ones."""
    run = Run(config, verbose=verbose)
    run.devices, rollout_mesh = split_devices(config)
    model, tokenizer = build_model(config)
    if reads_validation is None:
        reads_validation = config.n_accuracy > 0
    train, validation = load_data(config, synthetic, reads_validation=reads_validation)
    prompts = Prompts.from_config(config, train, tokenizer)
    frozen = reference_policy(model) if config.beta else None
    engine = SamplerEngine(model, tokenizer, prompt_len=prompts.length, mesh=rollout_mesh,
                           wrt=trained_variables(config), weights_dtype=config.rollout_dtype)
    return RLSetup(run, model, tokenizer, prompts, validation,
                   rewards or config.reward_functions(), frozen, engine)
