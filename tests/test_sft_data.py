"""SFT data: records -> masked, fixed-shape batches; truncation policy; packing; shuffling; domain mixing."""

import datasets
import numpy as np
import pytest

from tunix_lite.data.records import load_records
from tunix_lite.data.sft import SFTBatches, mix_domains, packed_rows, tokenize_sft
from tunix_lite.data.synthetic import make_splits
from tunix_lite.loading import load
from tunix_lite.chat import format_chat


@pytest.fixture(scope="module")
def tokenizer():
    return load("tiny")[1]


def records(n=20, seed=0):
    return make_splits(n, 1, 1, seed=seed)["train"]


def test_mask_covers_the_reply_and_its_end_of_turn_only(tokenizer):
    row = {"prompt": "Sort 3, 1, 2.", "completion": "<answer>1, 2, 3</answer>"}
    data = tokenize_sft([row], tokenizer, seq_len=64)
    ids, mask = data.ids[0], data.mask[0]
    prompt = format_chat(tokenizer, [{"role": "user", "content": row["prompt"]}])
    assert ids[:len(prompt)].tolist() == prompt and not mask[:len(prompt)].any()  # the prompt never trains
    trained = ids[mask == 1].tolist()
    assert tokenizer.decode(trained[:-1]) == row["completion"]
    assert trained[-1] == tokenizer.piece_to_id("<end_of_turn>")  # the model learns to stop
    assert data.mask[0].sum() == len(trained)
    everything = tokenize_sft([row], tokenizer, seq_len=64, train_on_prompt=True)
    assert everything.mask[0].all()


def test_messages_and_prompt_completion_records_agree(tokenizer):
    row = {"prompt": "Count the e in bee.", "completion": "<answer>2</answer>"}
    chat = {"messages": [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["completion"]}]}
    a, b = tokenize_sft([row], tokenizer, seq_len=64), tokenize_sft([chat], tokenizer, seq_len=64)
    assert a.ids[0].tolist() == b.ids[0].tolist() and a.mask[0].tolist() == b.mask[0].tolist()


def test_padded_batch_is_shifted_and_padding_is_inert(tokenizer):
    data = tokenize_sft(records(5), tokenizer, seq_len=128)
    (batch,) = SFTBatches(data, 5, shuffle=False).epoch(0)
    assert {k: v.shape for k, v in batch.items()} == {k: (5, 128) for k in batch}
    for row, (ids, mask) in enumerate(zip(data.ids, data.mask)):
        n = len(ids) - 1
        assert batch["inputs"][row, :n].tolist() == ids[:-1].tolist()
        assert batch["targets"][row, :n].tolist() == ids[1:].tolist()
        assert batch["weights"][row, :n].tolist() == mask[1:].tolist()
        assert batch["positions"][row].tolist() == list(range(n)) + [-1] * (128 - n)
        assert not batch["weights"][row, n:].any() and not batch["segment_ids"][row, n:].any()


def test_packing_keeps_examples_apart_and_loses_no_trained_token(tokenizer):
    data = tokenize_sft(records(40), tokenizer, seq_len=128)
    order = np.arange(len(data))
    rows = packed_rows(data, order)
    assert rows["weights"].sum() == sum(m[1:].sum() for m in data.mask)
    assert len(rows["inputs"]) < 0.75 * len(data)  # short examples share rows
    for r in range(len(rows["inputs"])):
        seg, pos = rows["segment_ids"][r], rows["positions"][r]
        for s in set(seg[seg > 0].tolist()):  # each segment restarts its positions at 0
            assert pos[seg == s].tolist() == list(range((seg == s).sum()))
    stats_padded, stats_packed = SFTBatches(data, 8).stats(), SFTBatches(data, 8, packing=True).stats()
    assert stats_packed["fill"] > 1.5 * stats_padded["fill"]


def test_packed_loss_equals_the_examples_losses(tokenizer):
    """Segments are independent: the packed row's token-weighted loss equals the padded rows' loss."""
    from tunix_lite.training.losses import lm_loss
    from tunix_lite.training.trainer import evaluate

    model, _ = load("tiny")
    data = tokenize_sft(records(6), tokenizer, seq_len=128)
    padded = evaluate(model, lm_loss, SFTBatches(data, 6, shuffle=False).epoch(0))
    packed = evaluate(model, lm_loss, SFTBatches(data, 6, shuffle=False, packing=True).epoch(0))
    assert packed["count"] == padded["count"]
    assert packed["loss"] == pytest.approx(padded["loss"], rel=1e-5)


def test_truncation_policies_are_explicit(tokenizer):
    rows = records(30)
    longest = max(len(ids) for ids in tokenize_sft(rows, tokenizer, seq_len=256).ids)
    seq_len = longest - 10
    with pytest.raises(ValueError, match=r"row \d+: \d+ tokens, more than seq_len \+ 1 = " + str(seq_len + 1)):
        tokenize_sft(rows, tokenizer, seq_len=seq_len)
    dropped = tokenize_sft(rows, tokenizer, seq_len=seq_len, truncation="drop")
    assert dropped.report.dropped >= 1 and len(dropped) == 30 - dropped.report.dropped
    cut = tokenize_sft(rows, tokenizer, seq_len=seq_len, truncation="truncate")
    assert cut.report.truncated == dropped.report.dropped and cut.report.tokens_cut >= 9
    assert max(map(len, cut.ids)) == seq_len + 1
    assert "truncated" in str(cut.report) and "dropped" in str(dropped.report)


@pytest.mark.parametrize("row, message", [
    ({"prompt": "hi"}, r"row 1: needs a 'messages' list or string 'prompt' and 'completion' columns; \['completion'\]"),
    ({"prompt": 3, "completion": "x"}, r"row 1: .*\['prompt'\] missing or not str"),
    ({"messages": "hello"}, r"row 1: 'messages' must be a non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, r"row 1: message 0: unknown role 'robot'"),
    ({"messages": [{"role": "user", "content": "only a question"}]}, r"row 1: no token to train on"),
])
def test_malformed_rows_are_named(tokenizer, row, message):
    good = {"prompt": "a", "completion": "b"}
    with pytest.raises(ValueError, match=message):
        tokenize_sft([good, row], tokenizer, seq_len=64)


def test_shuffling_is_deterministic_per_epoch_and_resumable(tokenizer):
    data = tokenize_sft(records(20), tokenizer, seq_len=128)
    batches = SFTBatches(data, 8, seed=3)
    first = [b["inputs"] for b in batches.stream(epochs=2)]
    assert len(first) == 6 and first[2].shape == (4, 128)  # 20 = 8 + 8 + 4 per epoch
    again = [b["inputs"] for b in SFTBatches(data, 8, seed=3).stream(epochs=2)]
    assert all((a == b).all() for a, b in zip(first, again))
    assert not (first[0] == first[3]).all()  # a new permutation each epoch
    resumed = [b["inputs"] for b in SFTBatches(data, 8, seed=3).stream(start=4, epochs=2)]
    assert all((a == b).all() for a, b in zip(first[4:], resumed))
    assert len(SFTBatches(data, 8, drop_last=True).epoch(0)) == 2


def test_batches_carry_per_example_extras_and_resume_mid_epoch():
    """The generic stream behind every algorithm: extras ride beside the rows in the same order, and a stream
    started at step s yields exactly the batches an uninterrupted stream yields from s on."""
    from tunix_lite.data.batches import Batches

    ids = np.arange(10)
    rows_fn = lambda order: {"inputs": ids[order][:, None].repeat(3, 1)}  # one row per example
    batches = Batches(10, rows_fn, 4, seed=1, extras={"ref_logps": ids * 10.0})
    full = list(batches.stream(epochs=3))
    assert len(full) == 9 and all((b["ref_logps"] == b["inputs"][:, 0] * 10.0).all() for b in full)
    for start in (0, 2, 3, 5, 8):
        resumed = list(batches.stream(start=start, epochs=3))
        assert [b["inputs"].tolist() for b in resumed] == [b["inputs"].tolist() for b in full[start:]]
    with pytest.raises(ValueError, match=r"extras\['x'\] has 3 entries for 10 examples"):
        Batches(10, rows_fn, 4, extras={"x": np.zeros(3)})


def test_mix_domains_hits_the_weights():
    rows = make_splits(700, 1, 1)["train"]
    mixed = mix_domains(rows, {"arithmetic": 3, "sort": 1, "facts": 1}, 500, seed=0)
    assert isinstance(mixed, datasets.Dataset) and len(mixed) == 500
    counts = {d: mixed["domain"].count(d) for d in set(mixed["domain"])}
    assert counts == {"arithmetic": 300, "sort": 100, "facts": 100}
    assert mixed["prompt"] != mix_domains(rows, {"arithmetic": 3, "sort": 1, "facts": 1}, 500, seed=1)["prompt"]
    with pytest.raises(ValueError, match=r"weights name domains \['poetry'\] not in column 'domain'"):
        mix_domains(rows, {"poetry": 1}, 10)


def test_jsonl_through_datasets(tmp_path, tokenizer):
    path = tmp_path / "train.jsonl"
    records(4).to_json(str(path))
    loaded = load_records(str(path))
    assert loaded.column_names == records(4).column_names
    assert len(tokenize_sft(loaded, tokenizer, seq_len=128)) == 4
    (tmp_path / "train.txt").write_text("hello\n")
    with pytest.raises(ValueError, match=r"train.txt: expected a .jsonl, .json, .csv, .parquet file or a datasets"):
        load_records(str(tmp_path / "train.txt"))
