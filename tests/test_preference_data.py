"""Preference data: TRL-convention records (plain text, conversations, implicit prompt, KTO's unpaired rows) to
[pairs, 2, T] rows with completion masks, the truncation policies and their report, and bad rows named by row and
column through the public entry points."""

import datasets
import numpy as np
import pytest

from tunix_lite.loading import ASSETS
from tunix_lite.preference.data import PreferenceBatches, pair_rows, tokenize_pairs, tokenize_unpaired
from tunix_lite.tokenizer import load_tokenizer

PAIRS = [
    {"prompt": "Which is larger, 3 or 5?", "chosen": "5 is more than 3. <answer>5</answer>",
     "rejected": "5 is more than 3. <answer>3</answer>"},
    {"prompt": "Reverse the word cow.", "chosen": "Backwards: w o c. <answer>woc</answer>",
     "rejected": "Backwards: w o c. woc"},
]


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(ASSETS / "tiny")


def text(tok, ids) -> str:
    return tok.decode([int(i) for i in ids], skip_special=False)


def test_rows_share_the_prompt_and_mask_only_the_completion(tok):
    data = tokenize_pairs(PAIRS, tok, seq_len=48)
    rows = pair_rows(data, [1, 0])
    assert {k: v.shape for k, v in rows.items()} == {k: (2, 2, 48) for k in rows}
    for b, record in enumerate([PAIRS[1], PAIRS[0]]):
        for j, key in enumerate(("chosen", "rejected")):
            w = rows["weights"][b, j] > 0
            assert text(tok, rows["targets"][b, j][w]) == record[key] + "<end_of_turn>"  # reply + its stop token
            real = rows["segment_ids"][b, j] > 0
            assert text(tok, rows["inputs"][b, j][real]).endswith(f"<start_of_turn>model\n{record[key]}")
        prompt = rows["weights"][b].argmax(-1)  # the first completion target: the prompt ends at the same place
        assert prompt[0] == prompt[1] and (rows["inputs"][b, 0, :prompt[0]] == rows["inputs"][b, 1, :prompt[0]]).all()
    padding = rows["segment_ids"] == 0
    assert (rows["positions"][padding] == -1).all() and (rows["weights"][padding] == 0).all()


def test_conversations_and_the_implicit_prompt_give_the_same_rows(tok):
    def conv(prompt, reply):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": reply}]

    plain = tokenize_pairs(PAIRS, tok, seq_len=48)
    explicit = [{"prompt": [{"role": "user", "content": p["prompt"]}],
                 "chosen": [{"role": "assistant", "content": p["chosen"]}],
                 "rejected": [{"role": "assistant", "content": p["rejected"]}]} for p in PAIRS]
    implicit = datasets.Dataset.from_list([{"chosen": conv(p["prompt"], p["chosen"]),
                                            "rejected": conv(p["prompt"], p["rejected"])} for p in PAIRS])
    for other in (tokenize_pairs(explicit, tok, seq_len=48), tokenize_pairs(implicit, tok, seq_len=48)):
        for a, b in zip(plain.sequences.ids + plain.sequences.mask, other.sequences.ids + other.sequences.mask):
            np.testing.assert_array_equal(a, b)


def test_truncation_policies_and_their_report(tok):
    long = [{"prompt": "Sort from smallest to largest: " + ", ".join(map(str, range(40, 48))) + ".",
             "chosen": "Smallest is 40. " * 3 + "<answer>40</answer>", "rejected": "Smallest is 41. <answer>41</answer>"}]
    with pytest.raises(ValueError, match=r"row 0: prompt \(\d+ tokens\) \+ longest completion = \d+ tokens, more than "
                                         r"seq_len \+ 1 = 41; raise seq_len or set truncation"):
        tokenize_pairs(long, tok, seq_len=40)
    with pytest.raises(ValueError, match="no examples left"):
        tokenize_pairs(long, tok, seq_len=40, truncation="drop")
    kept = tokenize_pairs(PAIRS + long, tok, seq_len=40, truncation="drop")
    assert len(kept) == 2 and "dropped 1 longer ones" in str(kept.report)

    start = tokenize_pairs(long, tok, seq_len=64, truncation="truncate")  # cuts the completions' ends
    end = tokenize_pairs(long, tok, seq_len=64, truncation="truncate", truncation_mode="keep_end")
    full = tokenize_pairs(long, tok, seq_len=256)
    prompt_len = int(np.argmax(full.sequences.mask[0]))
    assert all(len(ids) <= 65 for ids in start.sequences.ids + end.sequences.ids)
    np.testing.assert_array_equal(start.sequences.ids[0], full.sequences.ids[0][:65])  # the start kept
    np.testing.assert_array_equal(end.sequences.ids[0][-40:], full.sequences.ids[0][-40:])  # the whole chosen kept
    assert end.sequences.ids[0][0] == full.sequences.ids[0][0]  # bos kept
    header = full.sequences.ids[0][prompt_len - 3:prompt_len]  # <start_of_turn> model \n
    np.testing.assert_array_equal(end.sequences.ids[0][int(np.argmax(end.sequences.mask[0])) - 3:][:3], header)
    assert "truncated 1 longer ones" in str(start.report) and start.report.policy == "truncate (keep_start)"
    assert start.report.trained_tokens_cut == start.report.tokens_cut > 0  # only completion tokens were cut
    assert end.report.trained_tokens_cut == 0 < end.report.tokens_cut  # only prompt tokens were cut


def test_unpaired_rows_pair_each_prompt_with_the_previous_completion(tok):
    records = [{"prompt": p["prompt"], "completion": p[key], "label": key == "chosen"}
               for p in PAIRS for key in ("chosen", "rejected")]
    data = tokenize_unpaired(records, tok, seq_len=48)
    np.testing.assert_array_equal(data.labels, [1, 0, 1, 0])
    rows = PreferenceBatches(data, 4, shuffle=False).epoch(0)[0]
    assert rows["label"].tolist() == [1, 0, 1, 0]
    for i in range(4):
        mismatched = text(tok, rows["targets"][i, 1][rows["weights"][i, 1] > 0])
        assert mismatched == records[i - 1]["completion"] + "<end_of_turn>"


BAD_ROWS = [
    ({"prompt": "q", "chosen": "a"}, r"row 1: column\(s\) \['rejected'\] missing or null"),
    ({"prompt": "q", "chosen": "  ", "rejected": "b"}, r"row 1, column 'chosen': empty completion"),
    ({"prompt": "q", "chosen": 7, "rejected": "b"}, r"row 1, column 'chosen': expected a string or a list of "
                                                    r"\{'role', 'content'\} messages, got int"),
    ({"prompt": "q", "chosen": "a", "rejected": [{"role": "assistant", "content": None}]},
     r"row 1, column 'rejected': message 0 content must be a str, got NoneType"),
    ({"prompt": "q", "chosen": "same", "rejected": " same "}, r"row 1: 'chosen' and 'rejected' are the same"),
    ({"prompt": "q", "chosen": [{"role": "user", "content": "a"}], "rejected": "b"},
     r"row 1, column 'chosen': a completion must start with an assistant message"),
    ({"chosen": "a", "rejected": "b"}, r"row 1: no 'prompt' column, and 'chosen' and 'rejected' do not start"),
]


@pytest.mark.parametrize("bad,message", BAD_ROWS)
def test_bad_rows_are_named_by_row_and_column(tok, bad, message):
    with pytest.raises(ValueError, match=message):
        tokenize_pairs([PAIRS[0], bad], tok, seq_len=48)


def test_missing_columns_and_bad_labels_are_named(tok):
    with pytest.raises(ValueError, match=r"missing column\(s\) \['rejected'\] \(columns: \['prompt', 'chosen'\]\)"):
        tokenize_pairs(datasets.Dataset.from_list([{"prompt": "q", "chosen": "a"}]), tok, seq_len=48)
    with pytest.raises(ValueError, match=r"row 0, column 'label': expected true \(desirable\) or false, got 'yes'"):
        tokenize_unpaired([{"prompt": "q", "completion": "a", "label": "yes"}], tok, seq_len=48)
