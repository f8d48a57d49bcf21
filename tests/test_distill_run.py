"""run_distill end to end on small random checkpoints (the tiny tokenizer, a 2-layer teacher, a 1-layer student):
online KD with attention + feature transfer, on-policy steps and export; the top-k cache written, reused and
refused when it does not fit; a teacher with another tokenizer refused before any weights are read."""

import json

import numpy as np
import pytest
from flax import nnx

from tunix_lite.distill.cache import CacheError, TeacherCache
from tunix_lite.distill.distill import DistillConfig, run_distill
from tunix_lite.loading import load
from tunix_lite.models import Transformer
from tunix_lite.training.config import ConfigError
from tunix_lite.weights.hf import save_hf_model

from test_model import small_config


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """A 2-layer random Gemma-style checkpoint with the tiny model's tokenizer."""
    _, tokenizer = load("tiny")
    directory = tmp_path_factory.mktemp("teacher")
    config = small_config(vocab_size=1024, num_layers=2, sliding_window=None, sliding_window_pattern=None,
                          max_seq_len=256)
    save_hf_model(Transformer(config, rngs=nnx.Rngs(0)), directory)
    tokenizer.save(directory)
    return directory


def config(teacher_dir, tmp_path, **changes):
    values = dict(model=str(teacher_dir), teacher=str(teacher_dir), student_layers=[1], n_train=12, n_validation=4,
                  seq_len=128, truncation="drop", batch_size=4, steps=2, warmup_steps=0, eval_every=0,
                  n_accuracy=0, output_dir=str(tmp_path / "run"))
    return DistillConfig.from_dict(values | changes)


@pytest.mark.slow  # compiles a train step with the teacher and the sampler
def test_online_kd_with_transfer_and_on_policy_steps_exports_the_student_alone(teacher_dir, tmp_path):
    result = run_distill(config(teacher_dir, tmp_path, attention_weight=0.5, feature_weight=0.5,
                                on_policy_ratio=0.5, rollout_tokens=8, seed=3), verbose=False)
    history = result.history
    assert len(history) == 2 and all(np.isfinite(h["loss"]) for h in history)
    assert {"kd", "ce", "attention", "feature"} <= set(history[0])
    exported = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert exported["num_hidden_layers"] == 1  # the student, without the projection
    student, _ = load(tmp_path / "run" / "model")
    assert student.config.num_layers == 1
    assert (tmp_path / "run" / "scores.json").is_file()


@pytest.mark.slow
def test_teacher_cache_is_written_reused_and_refused_when_it_does_not_fit(teacher_dir, tmp_path):
    cache_file = tmp_path / "cache.npz"
    first = run_distill(config(teacher_dir, tmp_path, top_k=16, teacher_cache=str(cache_file)), verbose=False)
    cache = TeacherCache.load(cache_file)
    assert cache.ids.shape[1:] == (128, 16) and cache.meta["temperature"] == 2.0
    assert "teacher cache" in first.data_report and "MiB" in first.data_report
    written = cache_file.read_bytes()

    again = run_distill(config(teacher_dir, tmp_path, top_k=16, teacher_cache=str(cache_file),
                               output_dir=str(tmp_path / "again")), verbose=False)  # loaded, not recomputed
    assert [h["loss"] for h in again.history] == [h["loss"] for h in first.history]

    with pytest.raises(CacheError, match=r"cache\.npz: computed with temperature 2\.0, this run needs 4\.0; delete it"):
        run_distill(config(teacher_dir, tmp_path, top_k=16, temperature=4.0, teacher_cache=str(cache_file),
                           output_dir=str(tmp_path / "t4")), verbose=False)
    with pytest.raises(CacheError, match=r"computed with token rows .* this run needs"):
        run_distill(config(teacher_dir, tmp_path, top_k=16, n_train=8, teacher_cache=str(cache_file),
                           output_dir=str(tmp_path / "n8")), verbose=False)
    assert cache_file.read_bytes() == written  # a refused cache is never overwritten


def test_bad_cache_files_get_one_clear_error(tmp_path):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file")
    with pytest.raises(CacheError, match=r"garbage\.npz: cannot read a teacher cache .*; delete it"):
        TeacherCache.load(garbage)
    np.savez(tmp_path / "other.npz", weights=np.zeros(3))
    with pytest.raises(CacheError, match=r"other\.npz: not a teacher cache \(no ids, log_probs, rest, meta arrays\)"):
        TeacherCache.load(tmp_path / "other.npz")
    meta = {"format": "tunix_lite.teacher_cache/1", "examples": 2, "seq_len": 4, "k": 3, "temperature": 1.0,
            "vocab_size": 10, "tokenizer": "abc", "rows": "def"}
    good = dict(ids=np.zeros((2, 4, 3), np.int32), log_probs=np.zeros((2, 4, 3), np.float32),
                rest=np.zeros((2, 4), np.float32), meta=np.array(json.dumps(meta)))
    np.savez(tmp_path / "good.npz", **good)
    assert TeacherCache.load(tmp_path / "good.npz", expect={"tokenizer": "abc"}).ids.shape == (2, 4, 3)
    with pytest.raises(CacheError, match=r"good\.npz: computed with tokenizer fingerprint 'abc', this run needs 'xyz'"):
        TeacherCache.load(tmp_path / "good.npz", expect={"tokenizer": "xyz"})
    np.savez(tmp_path / "short.npz", **(good | {"log_probs": np.zeros((2, 3, 3), np.float32)}))
    with pytest.raises(CacheError, match=r"short\.npz: log_probs has shape \(2, 3, 3\) .* its metadata says \(2, 4, 3\)"):
        TeacherCache.load(tmp_path / "short.npz")
    np.savez(tmp_path / "ids.npz", **(good | {"ids": np.full((2, 4, 3), 10, np.int32)}))
    with pytest.raises(CacheError, match=r"ids\.npz: ids outside the vocabulary \[0, 10\)"):
        TeacherCache.load(tmp_path / "ids.npz")


def test_a_teacher_with_another_tokenizer_is_refused_before_loading_weights(teacher_dir, tmp_path):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((teacher_dir / "tokenizer.model").read_bytes())
    proto.pieces[500].piece = "▁zzzz"  # one id that means something else
    other = tmp_path / "other_teacher"
    other.mkdir()
    (other / "tokenizer.model").write_bytes(proto.SerializeToString())
    (other / "config.json").write_text((teacher_dir / "config.json").read_text())  # and no weights at all
    with pytest.raises(ConfigError, match=r"teacher: .*other_teacher and the student .* have different tokenizers "
                                          r"\(1,024 vs 1,024 pieces, fingerprints \w+ vs \w+\)"):
        run_distill(config(teacher_dir, tmp_path, teacher=str(other)), verbose=False)
    assert not (tmp_path / "run").exists()


def test_config_errors_name_the_key(teacher_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"teacher: needed for alpha=0\.5"):
        config(teacher_dir, tmp_path, teacher=None)
    with pytest.raises(ConfigError, match=r"top_k: a cache holds the teacher's logits over the dataset only"):
        config(teacher_dir, tmp_path, top_k=8, attention_weight=1.0)
    with pytest.raises(ConfigError, match=r"packing: a teacher cache is per example"):
        config(teacher_dir, tmp_path, top_k=8, packing=True)
    with pytest.raises(ConfigError, match=r"layer_map \{0: 5\}: the student has blocks 0\.\.0 and the teacher 0\.\.1"):
        run_distill(config(teacher_dir, tmp_path, attention_weight=1.0, layer_map={0: 5}), verbose=False)
    with pytest.raises(ConfigError, match=r"student_layers: \[1, 2\] must be distinct block indices of .*teacher\w*, "
                                          r"which has blocks 0\.\.1$"):
        run_distill(config(teacher_dir, tmp_path, student_layers=[1, 2]), verbose=False)
    assert not (tmp_path / "run").exists()  # both refused before any weights were read
    assert config(teacher_dir, tmp_path, teacher=None, alpha=0.0).teacher is None  # the CE-only baseline
