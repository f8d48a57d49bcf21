"""Sharding: sharded == one device on 8 fake CPU devices, the layouts and collectives each strategy implies,
resuming on another mesh, rollouts on a split mesh, and a 2-process run over JAX's own runtime.

The fake-device checks run in a subprocess (tests/mesh_checks.py: jax fixes its device count when it starts and
the rest of the suite runs on one device); each test below reads its part of the results. The algorithms' checks
(DPO, distillation, GRPO on a split mesh, the planner) are tests/test_sharding_algorithms.py's subprocess.
Tolerances are float32 noise: the sharded programs sum in a different order.
"""

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).parent
STRATEGIES = ("dp", "fsdp", "tp", "fsdp_tp")
LOSS_TOL, GRAD_TOL, PARAM_TOL = 1e-5, 1e-6, 1e-6  # absolute; gradients are ~0.06 at most, losses ~6


@pytest.fixture(scope="module")
def mesh(tmp_path_factory, run_mesh_checks):
    return run_mesh_checks(tmp_path_factory.mktemp("mesh") / "results.json", "check_strategies", "check_rollouts")


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["sft", "grpo_qlora"])
def test_sharded_step_equals_one_device(mesh, loss):
    """Loss, gradients and updated parameters of 3 steps (micro-batches, a padded short last batch) under every
    strategy equal one device's. grpo_qlora: GRPO's loss on rollout rows as the driver builds them (completions of
    several lengths, group advantages, old log-probs) for an nf4 QLoRA policy, clipped at 0.8 / 1.28, with a k3 KL
    to its frozen reference (the base view)."""
    for strategy in STRATEGIES:
        r = mesh[f"{loss}/{strategy}"]
        assert r["loss_error"] < LOSS_TOL and r["loss2_error"] < LOSS_TOL, (strategy, r)
        assert r["short_batch_loss_error"] < LOSS_TOL, (strategy, r)
        assert r["grad_error"] < GRAD_TOL < r["grad_scale"], (strategy, r)
        assert r["param_error"] < PARAM_TOL, (strategy, r)
        assert r["frozen_layout_errors"] == [], (strategy, r)
        if loss == "grpo_qlora":
            assert r["frozen_shares_base"], strategy  # the reference reads the policy's own sharded base arrays
            assert 0 < r["metrics"]["clipped"] < 0.5 and r["metrics"]["kl"] > 1e-4, r["metrics"]  # clip and KL act


@pytest.mark.slow
def test_every_variable_is_laid_out_as_the_rules_say(mesh):
    checked = [key for key, r in mesh.items() if isinstance(r, dict) and "layout_errors" in r]
    assert len(checked) == 10  # (SFT, GRPO) x (4 strategies + a resumed run); DPO's and KD's: the other file
    for key in checked:
        assert mesh[key]["layout_errors"] == [], key


@pytest.mark.slow
def test_single_kv_head_stays_whole_under_tensor_parallelism(mesh):
    """Gemma's MQA: the one kv head is never split over `tensor` (each tensor shard keeps all of it); the query
    heads are."""
    assert mesh["sft/tp"]["k_proj"] == "P()" and mesh["sft/tp"]["q_proj"] == "P(None, 'tensor')"
    assert mesh["sft/fsdp_tp"]["k_proj"] == "P('fsdp',)" and mesh["sft/fsdp_tp"]["q_proj"] == "P('fsdp', 'tensor')"
    assert mesh["rollouts"]["cache_spec"] == "P('data',)"  # the KV cache: rows split, the kv head whole


def _counts(collectives, kind):
    return sum(k == kind for k, _ in collectives)


def _activation_collectives(collectives, tokens: int, embed: int) -> int:
    """All-reduces / reduce-scatters of [tokens, D]-shaped arrays: tensor parallelism's activation sums."""
    def dims(shape):
        return [int(d) for d in shape[shape.index("[") + 1:shape.index("]")].split(",") if d]
    return sum(k in ("all-reduce", "reduce-scatter") and dims(s)[-1] == embed and np.prod(dims(s)[:-1]) == tokens
               for k, s in collectives)


@pytest.mark.slow
def test_each_strategy_compiles_to_the_collectives_it_implies(mesh):
    """Counted in the compiled SFT step (1 block: 7 kernels + the embedding are weight matrices, 7 norm scales):
    DP all-reduces every gradient and gathers nothing; FSDP all-gathers every weight matrix and reduce-scatters its
    gradient; TP all-reduces activations (>= 2 forward + 2 backward per block) and gathers no weight."""
    matrices, parameters = 8, 15
    dp, fsdp, tp, both = (mesh[f"sft/{s}"]["collectives"] for s in STRATEGIES)
    assert _counts(dp, "all-gather") == 0 and _counts(dp, "reduce-scatter") == 0
    assert _counts(dp, "all-reduce") >= parameters
    assert _counts(fsdp, "all-gather") >= matrices and _counts(fsdp, "reduce-scatter") >= matrices
    assert _activation_collectives(fsdp, tokens=1 * 16, embed=128) == 0
    assert _activation_collectives(tp, tokens=8 * 16, embed=128) >= 4
    assert _counts(tp, "all-gather") == 0
    assert _counts(both, "all-gather") >= matrices and _counts(both, "reduce-scatter") >= matrices
    assert _activation_collectives(both, tokens=2 * 16, embed=128) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["sft", "grpo_qlora"])
def test_resume_on_another_mesh_shape(mesh, loss):
    """A checkpoint written under FSDP over 8 devices, restored on fsdp 4 x tensor 2: the next step equals the
    uninterrupted run's."""
    r = mesh[f"{loss}/resume"]
    assert r["step"] == 1 and r["layout_errors"] == []
    assert r["loss2_error"] < LOSS_TOL and r["param_error"] < PARAM_TOL, r


@pytest.mark.slow
def test_rollouts_after_a_sync_equal_the_trainers_own(mesh):
    """Trainer on devices 0-3, rollout copy on 4-7: after a LoRA step and a sync (adapters only, nothing else
    sent), sampled rollouts (2 per prompt, temperature 1) equal those from the trainer's own weights, colocated or
    on one device: tokens and log-probs."""
    r = mesh["rollouts"]
    assert r["trainer_devices"] == [0, 1, 2, 3] and r["rollout_devices"] == [4, 5, 6, 7]
    assert r["sync"]["bytes"] == r["adapter_bytes"] < r["first_copy"]["bytes"] / 10
    assert r["first_copy"]["chunks"] > 1 and r["first_copy"]["largest_chunk"] <= 128 * 2**10  # bounded chunks
    assert all(r["equal"].values()), r["equal"]
    assert max(r["logprob_error"].values()) < 1e-4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_train_like_one(tmp_path, subprocess_env, micro_model):
    """2 processes x 2 CPU devices over jax.distributed (gloo): one sharded SFT step equals one device's, an Orbax
    checkpoint written by both restores onto another mesh shape, and the run harness (run_sft with mesh: fsdp)
    prints, logs and exports from process 0 only."""
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, str(HERE / "multiprocess_checks.py"), str(i), "2", port,
                               str(tmp_path), str(micro_model)], env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    stderr = [p.communicate(timeout=900)[1] for p in procs]
    results = []
    for i in range(2):
        path = tmp_path / f"process_{i}.json"
        assert path.exists(), stderr[i][-3000:]
        results.append(json.loads(path.read_text()))
    first, second = results
    for r in results:
        assert "error" not in r and "harness_error" not in r, r.get("error") or r.get("harness_error")
        assert (r["process_count"], r["devices"], r["local_devices"]) == (2, 4, 2)
    assert abs(first["sgd_loss"] - first["reference_loss"]) < LOSS_TOL
    assert first["param_error"] < PARAM_TOL < first["param_scale"]
    assert first["restored_step"] == 1 and first["restore_error"] == 0.0
    assert first["second_loss"] == first["second_loss_restored"] == second["second_loss"]
    assert "before:" in first["harness"]["printed"] and second["harness"]["printed"] == ""
    assert first["harness"]["loss"] == second["harness"]["loss"]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]  # written once, not once per process
    assert (tmp_path / "run" / "model" / "config.json").exists() and (tmp_path / "run" / "checkpoints" / "2").is_dir()


# ----------------------------------------------------------------------------- one device: meshes, rules, configs


def test_mesh_shapes_strategies_and_errors():
    from tunix_lite.sharding import make_mesh, strategy_shape, suggest_mesh

    assert suggest_mesh(8) == {"data": 1, "fsdp": 8, "tensor": 1}
    assert suggest_mesh(16, "gpu", num_processes=2) == {"data": 2, "fsdp": 8, "tensor": 1}
    assert strategy_shape("fsdp_tp", 8) == {"data": 1, "fsdp": 4, "tensor": 2}
    assert strategy_shape("dp", 8)["data"] == strategy_shape("tp", 8)["tensor"] == 8
    with pytest.raises(ValueError, match="needs 6 devices"):
        make_mesh(data=2, fsdp=3, tensor=1)
    with pytest.raises(ValueError, match="unknown strategy 'zero3'"):
        strategy_shape("zero3", 8)


def test_rules_split_whole_heads_only_and_skip_size_one_axes():
    from jax.sharding import AbstractMesh, PartitionSpec as P

    from tunix_lite.sharding import logical_to_spec

    mesh = AbstractMesh((1, 2, 4), ("data", "fsdp", "tensor"))
    units = {"heads": 8, "kv_heads": 1}
    assert logical_to_spec(("embed", "heads"), (128, 256), mesh, units=units) == P("fsdp", "tensor")
    assert logical_to_spec(("embed", "kv_heads"), (128, 32), mesh, units=units) == P("fsdp")  # 1 kv head: whole
    assert logical_to_spec(("batch", "sequence", "act_embed"), (6, 16, 128), mesh) == P("fsdp")
    assert logical_to_spec(("batch",), (3,), mesh) == P()  # 3 rows do not split 2 ways


def test_reshard_moves_in_bounded_chunks():
    import jax
    import jax.numpy as jnp

    from tunix_lite.rl.engine import reshard

    tree = {"a": jnp.ones((256,)), "b": jnp.ones((256,)), "c": jnp.ones((1024,)), "d": jnp.ones((8,))}
    target = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    moved, stats = reshard(tree, {k: target for k in tree}, max_bytes=2048)
    assert stats == {"bytes": 6176, "chunks": 3, "largest_chunk": 4096}  # a+b | c alone (larger than the cap) | d
    assert all(np.array_equal(moved[k], tree[k]) for k in tree)


@pytest.mark.parametrize("mesh, message", [
    ("fdsp", "mesh: 'fdsp' is not a strategy (did you mean 'fsdp'?); choose one of auto, dp, fsdp, tp, fsdp_tp"),
    ({"data": 2, "model": 4}, "mesh: unknown axis 'model'; the axes are data, fsdp, tensor"),
    ({"fsdp": -1, "tensor": -1}, "mesh: axis sizes must be >= 1, with at most one -1"),
    ({"data": 3}, "batch_size: 16 rows cannot be split into 1 micro-batch(es) of whole rows on each of the mesh's 3"),
])
def test_mesh_config_errors_name_the_key_and_the_fix(mesh, message):
    from tunix_lite.training.config import ConfigError
    from tunix_lite.training.sft import SFTConfig

    with pytest.raises(ConfigError) as error:
        SFTConfig.from_dict({"mesh": mesh})
    assert str(error.value).startswith(message)
    assert SFTConfig.from_dict({"mesh": {"data": 2, "fsdp": -1}}).mesh == {"data": 2, "fsdp": -1}


@pytest.mark.parametrize("rollout_mesh, message", [
    ("fsdb", "rollout_mesh: 'fsdb' is not a strategy (did you mean 'fsdp'?)"),
    ({"fsdp": 2, "model": 2}, "rollout_mesh: unknown axis 'model'; the axes are data, fsdp, tensor"),
    ({"fsdp": 2}, "rollout_mesh: {'fsdp': 2} needs 2 device(s) and the trainer at least 1 more, this machine has "
                  "1; give the rollouts fewer devices, or set rollout_mesh: null to sample on the trainer's devices"),
    ("fsdp", "rollout_mesh: 'fsdp' needs 1 device(s) and the trainer at least 1 more, this machine has 1"),
])
def test_rollout_mesh_errors_name_the_key_and_the_fix(tmp_path, capsys, rollout_mesh, message):
    """Through the command line, before any model loads: the config's own checks, then the device split."""
    import yaml

    from tunix_lite.cli import main

    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({"algorithm": "grpo", "model": str(tmp_path / "no_model_here"),
                                    "rollout_mesh": rollout_mesh}))
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_split_devices_leave_the_trainer_the_rest_and_refuse_overlaps():
    from tunix_lite.rl.grpo import GRPOConfig
    from tunix_lite.rl.setup import split_devices
    from tunix_lite.training.config import ConfigError

    devices = [f"d{i}" for i in range(8)]  # the split is device bookkeeping: no device is touched until a mesh is made
    assert split_devices(GRPOConfig(model="x"), devices) == (devices, None)
    with pytest.raises(ConfigError) as error:
        split_devices(GRPOConfig(model="x", mesh={"fsdp": 8}, rollout_mesh={"data": 2, "tensor": 2}), devices)
    assert str(error.value) == ("mesh: {'fsdp': 8} needs 8 devices, rollout_mesh: {'data': 2, 'tensor': 2} takes 4 "
                                "of this machine's 8 and leaves 4 (the meshes may not share devices); make mesh: use "
                                "4 (a strategy name spans them)")
    with pytest.raises(ConfigError, match="rollout_mesh: fsdp_tp needs a device count that is a multiple of"):
        split_devices(GRPOConfig(model="x", rollout_mesh="fsdp_tp"), devices[:4])


def test_mesh_that_does_not_fit_this_machine_is_refused_before_compute(tmp_path):
    from tunix_lite.training.config import ConfigError
    from tunix_lite.training.harness import Run
    from tunix_lite.training.sft import SFTConfig

    run = Run(SFTConfig.from_dict({"mesh": {"data": 2, "fsdp": 2}, "batch_size": 8}), verbose=False)
    with pytest.raises(ConfigError, match=r"mesh: \{'data': 2, 'fsdp': 2\} needs 4 devices, this machine has 1"):
        run.mesh()
