"""Export: a LoRA-trained model merged into a Hugging Face checkpoint that transformers (the test-only reference)
loads with the same logits, tokens and chat template; the Orbax copy restores the same weights."""

import json

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

import tunix_lite
from tunix_lite.chat import format_chat
from tunix_lite.export import export_model, load_orbax
from tunix_lite.lora import apply_lora
from tunix_lite.models import Transformer, get_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.reference

forward = nnx.jit(lambda model, tokens: model(tokens))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A 2-layer model of the tiny family with the tiny tokenizer and trained-looking (non-zero) adapters, exported."""
    loaded, tokenizer = tunix_lite.load("tiny")  # its config as read from config.json, as a user's model has it
    model = Transformer(loaded.config.replace(num_layers=2), rngs=nnx.Rngs(1))
    apply_lora(model, rank=4, alpha=8.0, rngs=nnx.Rngs(0))
    for i, (path, value) in enumerate(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))):
        if path[-1] == "lora_b":
            value.set_value(0.05 * jax.random.normal(jax.random.key(i), value.shape))
    directory = export_model(model, tokenizer, tmp_path_factory.mktemp("run") / "export")
    return model, tokenizer, directory


def test_transformers_loads_the_merged_export_with_the_same_logits(exported):
    model, tokenizer, directory = exported
    assert sorted(p.name for p in directory.iterdir()) == ["hf", "orbax", "param_names.json"]
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(directory / "hf", dtype=torch.float32).eval()
    ids = tokenizer.encode("<reasoning>5 + 3 = 8. 8 * 2 = 16.</reasoning><answer>16</answer>", add_bos=True)
    with torch.no_grad():
        theirs = hf_model(torch.tensor([ids])).logits.numpy()
    ours = np.asarray(forward(model, jnp.asarray([ids])))  # the LoRA model itself, adapters unmerged
    assert np.abs(ours - theirs).max() <= 1e-4
    reloaded, _ = tunix_lite.load(directory / "hf")  # tunix_lite reads its own export back: the merged model
    merged = np.asarray(forward(reloaded, jnp.asarray([ids])))
    assert np.abs(merged - ours).max() <= 1e-4
    without = nnx.clone(model)
    for _, layer in nnx.iter_modules(without):
        if hasattr(layer, "use_adapters"):
            layer.use_adapters = False
    assert np.abs(ours - np.asarray(forward(without, jnp.asarray([ids])))).max() > 1e-2  # the adapters matter


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "Sort from smallest to largest: 3, 1, 2."}],
    [{"role": "system", "content": "Answer in tags."}, {"role": "user", "content": " What is 2 + 2? "},
     {"role": "assistant", "content": "<reasoning>2 + 2 = 4.</reasoning><answer>4</answer>"},
     {"role": "user", "content": "And 3 + 3?"}],
])
def test_the_exported_tokenizer_and_chat_template_give_our_ids(exported, messages):
    _, tokenizer, directory = exported
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory / "hf")
    for text in ("Ana has 5 pens. Ana gets 3 more.", "  two  spaces\nand a line"):
        assert hf_tokenizer(text)["input_ids"] == tokenizer.encode(text, add_bos=True)
    ids = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    assert list(ids) == format_chat(tokenizer, messages)


def test_the_orbax_copy_restores_the_merged_weights(exported):
    model, _, directory = exported
    fresh = Transformer(get_config("tiny").replace(num_layers=2), rngs=nnx.Rngs(7))
    load_orbax(fresh, directory / "orbax")
    reloaded, _ = tunix_lite.load(directory / "hf")
    for a, b in zip(jax.tree.leaves(nnx.state(fresh, nnx.Param)), jax.tree.leaves(nnx.state(reloaded, nnx.Param))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_param_names_map_every_orbax_array_onto_its_hf_tensor(exported):
    """What another JAX stack reads: the orbax dict, restored with Orbax alone, and param_names.json."""
    import orbax.checkpoint as ocp
    from safetensors.numpy import load_file

    _, _, directory = exported
    table = json.loads((directory / "param_names.json").read_text())
    with ocp.StandardCheckpointer() as checkpointer:
        restored = checkpointer.restore((directory / "orbax").absolute())
    hf = load_file(directory / "hf" / "model.safetensors")
    assert len(table["params"]) == len(jax.tree.leaves(restored))
    for row in table["params"]:
        array = restored
        for key in row["orbax"].split("/"):
            array = array[key] if key in array else array[int(key)]
        array = np.asarray(array)
        assert list(array.shape) == row["shape"] and list(hf[row["hf"]].shape) == row["hf_shape"]
        np.testing.assert_array_equal(array.T if row["transposed"] else array, hf[row["hf"]])


def test_a_bfloat16_export_is_half_the_disk_and_every_reader_gets_the_rounded_weights(exported, tmp_path):
    """export_dtype: bfloat16 (a pipeline's, for a model whose float32 export would not fit a Kaggle session's
    20 GB): both copies hold the float32 weights rounded to bfloat16, and tunix_lite, transformers and Orbax
    read the same numbers back."""
    model, tokenizer, full = exported
    half = export_model(model, tokenizer, tmp_path / "export", dtype=ml_dtypes.bfloat16)
    size = {d: (d / "hf" / "model.safetensors").stat().st_size for d in (full, half)}
    assert size[half] < 0.51 * size[full]
    assert json.loads((half / "hf" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    ours, _ = tunix_lite.load(full / "hf")
    rounded, _ = tunix_lite.load(half / "hf")
    pairs = list(zip(jax.tree.leaves(nnx.state(ours, nnx.Param)), jax.tree.leaves(nnx.state(rounded, nnx.Param))))
    for a, b in pairs:
        np.testing.assert_array_equal(np.asarray(a).astype(ml_dtypes.bfloat16).astype(np.float32), np.asarray(b))
    assert any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in pairs)  # it did round
    fresh = load_orbax(Transformer(get_config("tiny").replace(num_layers=2), rngs=nnx.Rngs(7)), half / "orbax")
    for a, b in zip(jax.tree.leaves(nnx.state(fresh, nnx.Param)), jax.tree.leaves(nnx.state(rounded, nnx.Param))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(half / "hf", dtype=torch.float32).eval()
    ids = tokenizer.encode("<reasoning>5 + 3 = 8.</reasoning><answer>8</answer>", add_bos=True)
    with torch.no_grad():
        theirs = hf_model(torch.tensor([ids])).logits.numpy()
    assert np.abs(np.asarray(forward(rounded, jnp.asarray([ids]))) - theirs).max() <= 1e-4
