"""The task readers on every real file in data/, their error reports, and batching."""

from __future__ import annotations

import pytest
import torch
from conftest import DATA

import minbert
from tasks.core.batching import Passes, batch_indices, collate, epoch_order, hash_seed, pad_views, tokenise
from tasks.core.data import (
    TASKS,
    DataError,
    PairExample,
    Records,
    SentenceExample,
    ptb_to_text,
    read_pairs,
    read_sentences,
    unquote,
)

# (task, split) -> (examples loaded, labelled, skipped rows as (line, reason))
EXPECTED = {
    ("sst", "train"): (8000, True, []),
    ("sst", "dev"): (1101, True, []),
    ("sst", "test"): (2210, False, []),
    ("cfimdb", "train"): (1707, True, []),
    ("cfimdb", "dev"): (245, True, []),
    ("cfimdb", "test"): (488, False, []),
    ("para", "train"): (14212, True, [(1828, "empty label"), (9929, "empty sentence2")]),
    ("para", "dev"): (4000, True, []),
    ("para", "test"): (2000, False, []),
    ("sts", "train"): (5500, True, []),
    ("sts", "dev"): (863, True, []),
    ("sts", "test"): (1725, False, []),
}


@pytest.mark.parametrize("task,split", sorted(EXPECTED))
def test_every_data_file_loads_with_the_right_counts(task, split):
    n, labelled, skipped = EXPECTED[(task, split)]
    records = TASKS[task].read(TASKS[task].path(DATA, split))
    assert len(records) == n
    assert records.labelled is labelled
    assert [(s.line, s.reason) for s in records.skipped] == skipped
    assert len({r.id for r in records}) == n                       # ids are unique
    assert all(len(r.id) == 25 for r in records)
    kind = PairExample if TASKS[task].pair else SentenceExample
    assert all(isinstance(r, kind) for r in records)
    if labelled:
        labels = {r.label for r in records}
        if task == "sts":
            assert all(isinstance(v, float) and 0.0 <= v <= 5.0 for v in labels)
            assert any(v != int(v) for v in labels)                # never cast to int
        else:
            assert labels == set(range(5 if task == "sst" else 2))
    else:
        assert all(r.label is None for r in records)


def test_the_malformed_test_student_header_is_read_by_column_name():
    # header "0\t\tid\tsentence": two index columns before the id
    records = read_sentences(DATA / "ids-sst-test-student.csv")
    assert records[0].id == "b7573736a6ddf7be102b7fee0"
    assert records[0].sentence == "Effective but too-tepid biopic"
    assert records[0].line == 2 and records[-1].line == 2211


def test_quora_rows_with_an_empty_label_are_reported_with_file_and_line():
    records = read_pairs(DATA / "quora-train.csv")
    summary = records.summary()
    assert "14212 examples loaded, 2 rows skipped (1 empty label; 1 empty sentence2)" in summary
    assert f"{DATA / 'quora-train.csv'}:1828: empty label" in summary
    assert f"{DATA / 'quora-train.csv'}:9929: empty sentence2" in summary
    with pytest.raises(DataError, match=r"quora-train.csv:1828: empty label"):
        read_pairs(DATA / "quora-train.csv", strict=True)


def test_doubled_quotes_are_unquoted_and_quora_labels_are_ints():
    records = read_pairs(DATA / "quora-train.csv")
    row = next(r for r in records if r.id == "318658e273ac78f3b1e957b8b")
    # the cell is """Which ... Do I need """"the"""" here?""": quoted twice over
    assert row.sentence1 == ("Which is correct grammar: I graduated from University of XXXX or I graduated "
                             'from the University of XXXX? Do I need "the" here?')
    assert unquote('"A ""b"" c"') == 'A "b" c' and unquote('"kept"') == '"kept"'
    assert {r.label for r in records} == {0, 1} and all(type(r.label) is int for r in records)


def test_ptb_escapes_are_undone():
    assert ptb_to_text(" -LRB- a -RRB- `` b '' ") == "( a ) \" b \""
    sst = read_sentences(DATA / "ids-sst-train.csv")
    assert not any("-LRB-" in r.sentence or "``" in r.sentence for r in sst)
    assert any("-LRB-" in r.sentence for r in read_sentences(DATA / "ids-sst-train.csv", ptb=False))


def test_every_kind_of_bad_row_is_reported(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(
        "\tid\tsentence\tsentiment\n"
        "0\taaa\tfine\t3\n"
        "1\tbbb\ttoo few columns\n"
        "2\tccc\tempty label\t\n"
        "3\tddd\tout of range\t7\n"
        "4\teee\tnot a number\tpositive\n"
        "5\tfff\tnot an integer\t2.5\n"
        "6\t\tno id\t1\n"
        "7\tggg\t\t1\n"
        "8\thhh\tfine too\t0\n"
        "9\taaa\trepeated id\t0\n")
    records = read_sentences(path)
    assert [r.id for r in records] == ["aaa", "hhh"]
    assert [(s.line, s.reason) for s in records.skipped] == [
        (3, "3 columns, the header has 4"), (4, "empty label"), (5, "label out of range 0..4: '7'"),
        (6, "unparsable label: 'positive'"), (7, "label out of range 0..4: '2.5'"), (8, "empty id"),
        (9, "empty sentence"), (11, "duplicate id aaa (first on line 2)")]
    assert f"{path}:5: label out of range 0..4: '7'" in records.summary()
    with pytest.raises(DataError, match=r"bad.csv:3: 3 columns"):
        read_sentences(path, strict=True)


def test_sts_range_and_wrong_headers(tmp_path):
    path = tmp_path / "sts.csv"
    path.write_text("\tid\tsentence1\tsentence2\tsimilarity\n0\ta\tx\ty\t5.5\n1\tb\tx\ty\t2.4\n")
    records = TASKS["sts"].read(path)
    assert [r.label for r in records] == [2.4]
    assert records.skipped[0].reason == "label out of range [0, 5]: '5.5'"
    with pytest.raises(DataError, match=r"sts.csv:1: the header .* has no sentence column"):
        read_sentences(path)
    with pytest.raises(DataError, match="no such file"):
        read_sentences(tmp_path / "absent.csv")


def test_collate_pads_to_the_longest_and_carries_labels_and_ids(tokenizer):
    records = read_sentences(DATA / "ids-sst-dev.csv")[:4]
    split = tokenise("dev", records, tokenizer)
    batch = collate(split, range(4))
    assert batch["input_ids"].shape == (4, max(split.lengths))
    assert batch["attention_mask"].sum(1).tolist() == split.lengths
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == [r.label for r in records]
    assert batch["ids"] == [r.id for r in records]
    pairs = read_pairs(DATA / "sts-dev.csv", TASKS["sts"].label)[:3]
    pb = collate(tokenise("dev", pairs, tokenizer, float_labels=True), [2, 0])
    assert pb["labels"].dtype == torch.float and pb["token_type_ids"].max() == 1
    assert pb["ids"] == [pairs[2].id, pairs[0].id]
    unlabelled = collate(tokenise("test", read_sentences(DATA / "ids-sst-test-student.csv")[:2], tokenizer), [0, 1])
    assert "labels" not in unlabelled


@pytest.mark.parametrize("max_length", [None, 9, 16])
def test_a_batch_cut_from_the_stored_ids_is_the_tokenizers_batch_bit_for_bit(minilm_dir, tmp_path, max_length):
    """Tokenised once, then cut and padded: the same tensors as the tokenizer gives the batch's sentences (a pair
    truncated together, longest first), also where [PAD] is not id 0."""
    vocab = (minilm_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab[0], vocab[7] = vocab[7], vocab[0]                                    # [PAD] is id 7
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    for tokenizer in (minbert.Tokenizer.from_pretrained("minilm", max_length=max_length),
                      minbert.Tokenizer.from_vocab(tmp_path / "vocab.txt", max_length=max_length or 512)):
        singles = read_sentences(DATA / "ids-cfimdb-dev.csv")[:12]
        pairs = read_pairs(DATA / "sts-dev.csv", TASKS["sts"].label)[:12]
        for records, texts in ((singles, lambda ex: [[e.sentence for e in ex]]),
                               (pairs, lambda ex: [[e.sentence1 for e in ex], [e.sentence2 for e in ex]])):
            split = tokenise("dev", records, tokenizer)
            for index in ([3, 0, 7], list(range(12)), [5]):
                got, want = collate(split, index), tokenizer(*texts([records[i] for i in index]))
                for k in ("input_ids", "attention_mask", "token_type_ids"):
                    assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), (k, index)
    assert tokenizer.pad_token_id == 7 and split.pad_id == 7


def test_a_subset_keeps_each_examples_ids(tokenizer):
    records = read_pairs(DATA / "sts-dev.csv", TASKS["sts"].label)
    pairs = Records(records[:6], records.path, records.labelled, records.skipped)
    split = tokenise("dev", pairs, tokenizer, float_labels=True)
    part = split.subset("half", [4, 1])
    assert [r.id for r in part.records] == [pairs[4].id, pairs[1].id] and part.name == "half" and part.float_labels
    assert part.ids == [split.ids[4], split.ids[1]] and part.type_ids == [split.type_ids[4], split.type_ids[1]]
    assert all(torch.equal(a, b) for a, b in zip(collate(part, [0, 1]).values(), collate(split, [4, 1]).values())
               if isinstance(a, torch.Tensor))


def test_bucketed_batches_cover_every_example_once_and_are_reproducible():
    lengths = [(7 * i) % 53 for i in range(1000)]
    a = batch_indices(lengths, 16, shuffle=True, seed=3, bucket=True, pool=10)
    assert sorted(i for b in a for i in b) == list(range(1000))
    assert a == batch_indices(lengths, 16, shuffle=True, seed=3, bucket=True, pool=10)
    assert a != batch_indices(lengths, 16, shuffle=True, seed=4, bucket=True, pool=10)
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in a) / len(a)
    plain = batch_indices(lengths, 16, shuffle=True, seed=3)
    plain_spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in plain) / len(plain)
    assert spread < plain_spread / 4                              # bucketing groups similar lengths
    assert batch_indices(lengths, 16, shuffle=False) == [list(range(i, min(i + 16, 1000))) for i in range(0, 1000, 16)]


def test_an_epoch_is_drawn_from_seed_and_epoch_alone_and_passes_continue_as_a_stream():
    lengths = [(7 * i) % 53 for i in range(100)]
    for bucket in (False, True):
        a = epoch_order(lengths, 16, 3, 1, bucket=bucket)
        assert a == batch_indices(lengths, 16, shuffle=True, seed=hash_seed(3, 1), bucket=bucket)
        assert sorted(i for b in a for i in b) == list(range(100)) and a != epoch_order(lengths, 16, 3, 2, bucket=bucket)
        stream = Passes(lengths, 16, 3, bucket=bucket)                 # 7 batches a pass: 15 batches reach pass 3
        assert stream.per_pass == 7
        passes = [epoch_order(lengths, 16, 3, k, bucket=bucket) for k in range(3)]
        assert [stream.batch(i) for i in range(15)] == passes[0] + passes[1] + passes[2][:1]


def test_each_view_of_a_batch_is_padded_to_its_own_longest():
    one = pad_views([[[5, 6, 7], [8]]])
    assert list(one) == ["input_ids", "attention_mask"] and one["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    three = pad_views([[[5, 6]], [[7]], [[8, 9, 10]]])
    assert list(three) == [f"{name}_{k}" for k in (1, 2, 3) for name in ("input_ids", "attention_mask")]
    assert three["attention_mask_1"].tolist() == [[1, 1]] and three["input_ids_3"].shape == (1, 3)


def test_a_header_repeated_inside_a_file_is_a_bad_row_and_a_name_given_twice_is_refused(tmp_path):
    joined = tmp_path / "joined.csv"                 # cat a.csv b.csv: the second header is a row of the first
    joined.write_text("0\t\tid\tsentence\n0\t\taaa\tfirst\n0\t\tid\tsentence\n1\t\tbbb\tsecond\n", encoding="utf-8")
    records = read_sentences(joined)
    assert [r.id for r in records] == ["aaa", "bbb"]
    assert [(s.line, s.reason) for s in records.skipped] == [(3, "the header line again (files joined?)")]
    with pytest.raises(DataError, match=r"joined.csv:3: the header line again"):
        read_sentences(joined, strict=True)
    twice = tmp_path / "twice.csv"
    twice.write_text("\tid\tsentence\tsentiment\tsentiment\n0\taaa\tfine\t3\t1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"twice.csv:1: the header names the column 'sentiment' twice"):
        read_sentences(twice)
