"""The planner: exact sharded parameter bytes, FLOPs that agree with the benchmarks', memory within a stated error
of XLA's own plan for the real step, the CLI, and the collectives read from a compiled step's HLO."""

import sys
from pathlib import Path

import pytest

from tunix_lite import planner
from tunix_lite.models import get_config

ONE = {"data": 1, "fsdp": 1, "tensor": 1}


def test_device_names_count_devices_as_jax_sees_them():
    assert planner.parse_devices("v5e-8")[1] == 8
    chip, n = planner.parse_devices("v3-8")  # 8 TensorCores, each a JAX device with 16 GiB
    assert (n, chip.hbm_gib) == (8, 16)
    assert planner.parse_devices("v4-8")[1] == 4  # megacore: 8 cores are 4 devices
    with pytest.raises(ValueError, match="devices: 'tpu8' is not KIND-COUNT"):
        planner.parse_devices("tpu8")


def test_parameter_bytes_follow_the_sharding_rules_exactly():
    config = get_config("tiny").replace(num_layers=2)
    model = planner.abstract_model(config)
    from flax import nnx

    total = sum(x.size * 4 for x in __import__("jax").tree.leaves(nnx.state(model, nnx.Param)))
    assert planner.sharded_bytes(model, ONE, nnx.Param) == total
    D, F, V, N, K, H = (config.embed_dim, config.mlp_dim, config.vocab_size, config.num_heads, config.num_kv_heads,
                        config.head_dim)
    matrices = V * D + config.num_layers * (D * (N + 2 * K) * H + N * H * D + 3 * D * F)
    vectors = (total // 4) - matrices
    # fsdp=2 splits every matrix's model dimension; tensor=4 also splits heads (4), mlp and vocab, but not the
    # single kv head, whose k/v projections keep their whole [D, H] per tensor shard
    assert planner.sharded_bytes(model, {"data": 1, "fsdp": 2, "tensor": 1}, nnx.Param) == 4 * (matrices // 2 + vectors)
    kv = config.num_layers * 2 * D * K * H
    expected = 4 * ((matrices - kv) // 8 + kv // 2 + vectors)
    assert planner.sharded_bytes(model, {"data": 1, "fsdp": 2, "tensor": 4}, nnx.Param) == expected


def test_flops_agree_with_the_benchmarks_count():
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import common
    import impl_tunix_lite

    config = impl_tunix_lite.llama_config(common.SHAPES["llama"])
    flops = planner.step_flops(config, 8, 256)
    assert flops["model"] == common.train_flops_per_step(common.SHAPES["llama"], 8, 256) == flops["hardware"]
    lora = planner.step_flops(config, 8, 256, frozen_base=True, remat=True)
    assert lora["model"] < flops["model"] < lora["hardware"]


@pytest.mark.parametrize("options", [{}, {"logits_chunk": 64}, {"lora_rank": 4}])
def test_memory_is_within_15_percent_of_xlas_plan(options):
    """The planner's per-device total against `compiled.memory_analysis()` of the real step (XLA:CPU, one device,
    float32, a 2-layer tiny model). benchmarks/scaling.py reports the same for the full tiny and llama shapes."""
    config = get_config("tiny").replace(num_layers=2)
    memory = planner.against_xla(config, batch=8, seq=128, **options)
    measured, planned = memory["xla"], memory["planned"]
    assert abs(planned - measured) / measured < 0.15, (planned, measured)


def test_plan_command_prints_memory_time_and_what_fits(capsys):
    from tunix_lite.cli import main

    assert main(["plan", "--model", "gemma3-1b", "--devices", "v5e-8", "--strategy", "fsdp", "--batch", "32",
                 "--seq", "1024", "--lora", "8", "--remat", "--logits-chunk", "1024"]) == 0
    out = capsys.readouterr().out
    for expected in ("parameters", "optimizer state", "activations (remat)", "logits [B,T,V] (chunk 1024)",
                     "roofline per step", "MFU", "strategies that fit: dp, fsdp"):
        assert expected in out, out
    assert main(["plan", "--devices", "v9-8"]) == 2
    assert "tunix-lite plan: error: devices: 'v9-8' is not KIND-COUNT" in capsys.readouterr().err


def test_more_devices_less_memory_per_device():
    small = planner.Plan.make("gemma3-270m", "v5e-4", "fsdp", batch=8, seq=256)
    large = planner.Plan.make("gemma3-270m", "v5e-8", "fsdp", batch=8, seq=256)
    assert large.memory["parameters"] < small.memory["parameters"]
    assert large.total < small.total
    assert large.times["compute"] < small.times["compute"]


def test_collectives_are_counted_per_array_and_cpu_reduce_scatter_is_recognised():
    hlo = """
%fused_slice (p: f32[8,4]) -> f32[1,4] {
  %p = f32[8,4]{1,0} parameter(0)
  ROOT %dynamic-slice.1 = f32[1,4]{1,0} dynamic-slice(%p, %c, %c), dynamic_slice_sizes={1,4}
}

ENTRY %main (a: f32[8,4], b: f32[16]) -> f32[1,4] {
  %all-reduce.1 = (f32[8,4]{1,0}, f32[16]{0}, f32[]) all-reduce(%a, %b, %s), replica_groups={}, to_apply=%add
  %get-tuple-element.1 = f32[8,4]{1,0} get-tuple-element(%all-reduce.1), index=0
  %get-tuple-element.2 = f32[16]{0} get-tuple-element(%all-reduce.1), index=1
  %get-tuple-element.3 = f32[] get-tuple-element(%all-reduce.1), index=2
  %fusion.1 = f32[1,4]{1,0} fusion(%get-tuple-element.1), kind=kLoop, calls=%fused_slice
  %all-gather.1 = f32[16,4]{1,0} all-gather(%w), dimensions={0}
  ROOT %add.2 = f32[16]{0} add(%get-tuple-element.2, %get-tuple-element.2)
}
"""
    assert planner.count_collectives(hlo) == {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 1,
                                              "all-to-all": 0, "collective-permute": 0}
