"""The multitask model (both designs, heads, losses), the task schedules, and the multitask CLI end to end."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import TEST_DEVICE, killed_after_first_epoch

import minbert
from minbert.multitask import MultitaskBert, MultitaskConfig, join_pairs, paraphrase_loss, similarity_loss
from minbert.schedules import TaskSchedule, annealed_alpha, task_probabilities
from tasks import multitask
from tasks.core.checkpoints import load_checkpoint
from tasks.core.train import Interrupted
from tasks.multitask import EpochBatches, collate, load, parse_settings, run

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [("How do I learn Python?", "What is the best way to learn Python quickly?"),
         ("A man is playing a guitar.", "A man plays the guitar."),
         ("Is it going to rain today in the north of the country, or tomorrow?", "Rain?")]


def pair_batch(tokenizer, pairs=PAIRS) -> dict:
    a, b = tokenizer([p[0] for p in pairs]), tokenizer([p[1] for p in pairs])
    return {"input_ids_1": a.input_ids, "attention_mask_1": a.attention_mask,
            "input_ids_2": b.input_ids, "attention_mask_2": b.attention_mask}


def test_join_pairs_equals_tokenising_the_pair_with_segment_ids(tokenizer):
    batch = pair_batch(tokenizer)
    ids, mask, types = join_pairs(*batch.values())
    joint = tokenizer([p[0] for p in PAIRS], [p[1] for p in PAIRS])
    assert torch.equal(ids, joint.input_ids)
    assert torch.equal(mask, joint.attention_mask)
    assert torch.equal(types, joint.token_type_ids)
    # segment 0 is [CLS] a [SEP], segment 1 is b [SEP]; padding is 0 everywhere
    sep = tokenizer.token_to_id("[SEP]")
    for row in range(len(PAIRS)):
        n = int(mask[row].sum())
        first_sep = int((ids[row] == sep).nonzero()[0])
        assert types[row, :first_sep + 1].eq(0).all() and types[row, first_sep + 1:n].eq(1).all()
        assert ids[row, n - 1] == sep and types[row, n:].eq(0).all()


def test_join_pairs_truncates_the_second_sentence_and_keeps_its_sep(tokenizer):
    batch = pair_batch(tokenizer)
    ids, mask, _ = join_pairs(*batch.values(), max_length=12)
    assert ids.shape[1] == 12 and int(mask.sum(1).max()) == 12
    sep = tokenizer.token_to_id("[SEP]")
    for row in range(len(PAIRS)):
        n = int(mask[row].sum())
        assert ids[row, n - 1] == sep


def test_join_pairs_when_the_first_sentence_alone_fills_max_length_is_as_its_docstring_says(tokenizer):
    """[CLS] a [SEP] of 9 tokens, max_length 8: b is dropped whole, a keeps its first 6 tokens, b's [SEP] ends the
    row, and every token is of type 0 (the docstring says so: the tokenizer would cut a instead)."""
    pairs = [("a much longer first sentence here ok", "short")]
    batch = pair_batch(tokenizer, pairs)
    a = batch["input_ids_1"][0]
    assert len(a) == 9
    ids, mask, types = join_pairs(*batch.values(), max_length=8)
    assert ids[0].tolist() == [*a[:7].tolist(), tokenizer.token_to_id("[SEP]")]
    assert mask[0].eq(1).all() and types[0].eq(0).all()
    doc = " ".join(join_pairs.__doc__.split())
    assert "When [CLS] a [SEP] alone reaches max_length, b is dropped whole" in doc


@pytest.mark.parametrize("design", ["bi-encoder", "cross-encoder"])
def test_both_designs_give_the_right_shapes_and_losses(design, tiny_config, tokenizer):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design=design, head_hidden=16)).eval()
    H = tiny_config.hidden_size
    assert model.head["para"].fc1.in_features == (3 * H if design == "bi-encoder" else H)
    assert model.head["sst"].fc1.in_features == H and model.head["sst"].fc2.out_features == 5
    sents = tokenizer(["a fine film", "dull and far too long , with nothing to say"])
    logits = model.predict_sentiment(sents.input_ids, sents.attention_mask)
    assert logits.shape == (2, 5)
    batch = pair_batch(tokenizer)
    para, sts = model.predict_paraphrase(*batch.values()), model.predict_similarity(*batch.values())
    assert para.shape == sts.shape == (3,)
    labels = torch.tensor([1.0, 1.0, 0.0])
    assert paraphrase_loss(para, labels).item() == pytest.approx(
        -(labels * F.logsigmoid(para) + (1 - labels) * F.logsigmoid(-para)).mean().item(), rel=1e-5)
    gold = torch.tensor([4.2, 5.0, 0.4])
    assert similarity_loss(sts, gold).item() == pytest.approx(((sts - gold) ** 2).mean().item(), rel=1e-5)
    assert model.loss("sst", {"input_ids": sents.input_ids, "attention_mask": sents.attention_mask,
                              "labels": torch.tensor([4, 0])}).item() == pytest.approx(
        F.cross_entropy(logits, torch.tensor([4, 0])).item(), rel=1e-5)


def test_the_cross_encoder_runs_the_joined_pair_with_segment_ids(tiny_config, tokenizer):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design="cross-encoder")).eval()
    joint = tokenizer([p[0] for p in PAIRS], [p[1] for p in PAIRS])
    out = model.bert(joint.input_ids, joint.attention_mask, joint.token_type_ids).last_hidden_state
    keep = joint.attention_mask[..., None].float()
    expected = model.head["para"]((out * keep).sum(1) / keep.sum(1)).squeeze(-1)
    torch.testing.assert_close(model.predict_paraphrase(*pair_batch(tokenizer).values()), expected)
    # without the segment ids the result differs: they are really used
    plain = model.bert(joint.input_ids, joint.attention_mask).last_hidden_state
    assert not torch.allclose(out, plain)


def test_bi_encoder_pair_features_are_u_v_and_their_distance(tiny_config, tokenizer):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design="bi-encoder")).eval()
    batch = pair_batch(tokenizer)
    u = model.encode(batch["input_ids_1"], batch["attention_mask_1"])
    v = model.encode(batch["input_ids_2"], batch["attention_mask_2"])
    torch.testing.assert_close(model.pair_features(*batch.values()), torch.cat([u, v, (u - v).abs()], -1))


SIZES = {"sst": 3, "para": 5, "sts": 2}


def test_sequential_and_round_robin_orders():
    assert TaskSchedule("sequential").order(SIZES, 0, 3, 0) == [
        ("sst", 0), ("sst", 1), ("sst", 2), ("para", 0), ("para", 1), ("para", 2), ("para", 3), ("para", 4),
        ("sts", 0), ("sts", 1)]
    assert TaskSchedule("round-robin").order(SIZES, 0, 3, 0) == [
        ("sst", 0), ("para", 0), ("sts", 0), ("sst", 1), ("para", 1), ("sts", 1), ("sst", 2), ("para", 2),
        ("para", 3), ("para", 4)]
    cycled = TaskSchedule("round-robin", when_exhausted="cycle").order(SIZES, 0, 3, 0)
    assert len(cycled) == 15 and cycled[-3:] == [("sst", 4), ("para", 4), ("sts", 4)]
    passes = {t: max(j for u, j in cycled if u == t) // SIZES[t] + 1 for t in SIZES}  # passes over each task
    assert passes == {"sst": 2, "para": 1, "sts": 3}


def test_annealed_probabilities_at_the_first_and_last_epoch():
    sizes = {"sst": 250, "para": 444, "sts": 172}
    assert annealed_alpha(1, 5) == 1.0 and annealed_alpha(5, 5) == pytest.approx(0.2)
    assert annealed_alpha(3, 5) == pytest.approx(0.6) and annealed_alpha(1, 1) == 1.0
    s = TaskSchedule("annealed")
    first, last = s.probabilities(sizes, 0, 5), s.probabilities(sizes, 4, 5)
    assert first == pytest.approx({t: n / 866 for t, n in sizes.items()})
    z = sum(n ** 0.2 for n in sizes.values())
    assert last == pytest.approx({t: n ** 0.2 / z for t, n in sizes.items()})
    assert last["sts"] > first["sts"] and last["para"] < first["para"]
    assert TaskSchedule("proportional").probabilities(sizes, 4, 5) == pytest.approx(first)
    assert task_probabilities({"a": 1, "b": 3}, 0.5) == pytest.approx({"a": 1 / (1 + 3 ** 0.5),
                                                                        "b": 3 ** 0.5 / (1 + 3 ** 0.5)})


@pytest.mark.parametrize("name", ["proportional", "annealed"])
def test_sampled_schedules_are_seeded_and_follow_their_probabilities(name):
    sizes = {"sst": 250, "para": 444, "sts": 172}
    s = TaskSchedule(name)
    order = s.order(sizes, 4, 5, seed=7)
    assert order == s.order(sizes, 4, 5, seed=7) and order != s.order(sizes, 4, 5, seed=8)
    assert len(order) == sum(sizes.values())
    probs = s.probabilities(sizes, 4, 5)
    for t in sizes:  # the j-th batch of each task's stream comes in turn; counts within 4 sigma of n p
        idx = [j for u, j in order if u == t]
        assert idx == list(range(len(idx)))
        n, p = len(order), probs[t]
        assert abs(len(idx) - n * p) < 4 * math.sqrt(n * p * (1 - p))


@pytest.fixture
def files(multitask_files):
    return multitask_files


def argv(tiny_dir, files, tmp_path, name, *extra):
    out = ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--lr", "1e-3", "--no-progress",
           "--head-hidden", "16", "--checkpoint", str(tmp_path / f"{name}.pt"),
           "--predictions-dir", str(tmp_path / name)]
    for t, (train, dev, test) in files.items():
        out += [f"--{t}-train", train, f"--{t}_dev", dev, f"--{t}-test", test]  # both spellings work
    return out + list(extra)


def test_kill_and_resume_reproduces_an_uninterrupted_run_and_writes_six_files(tiny_dir, files, tmp_path, monkeypatch):
    extra = ("--epochs", "2", "--schedule", "annealed", "--design", "bi-encoder", "--optimizer", "fused")
    whole = run(parse_settings(argv(tiny_dir, files, tmp_path, "whole", *extra)))
    real_fit = multitask.fit

    monkeypatch.setattr(multitask, "fit", killed_after_first_epoch(real_fit))
    with pytest.raises(Interrupted):
        run(parse_settings(argv(tiny_dir, files, tmp_path, "split", *extra)))
    assert load_checkpoint(tmp_path / "split.pt")["epoch"] == 1
    monkeypatch.setattr(multitask, "fit", real_fit)
    resumed = run(parse_settings(
        argv(tiny_dir, files, tmp_path, "split", *extra, "--resume", str(tmp_path / "split.pt"))))
    a, b = load_checkpoint(tmp_path / "whole.pt"), load_checkpoint(tmp_path / "split.pt")
    assert a["epoch"] == b["epoch"] == 2
    assert a["optimizer"]["param_groups"][0]["fused"] is True          # --optimizer reached the optimiser
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    strip = [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in whole["history"]]
    assert strip == [{k: v for k, v in h.items() if not k.endswith("seconds")} for h in resumed["history"]]
    assert {"train_loss_sst", "train_loss_para", "train_loss_sts", "dev_overall"} <= set(whole["history"][0])
    for t in ("sst", "para", "sts"):
        for split in ("dev", "test"):
            assert (tmp_path / "whole" / f"{t}-{split}-output.csv").read_text() == \
                (tmp_path / "split" / f"{t}-{split}-output.csv").read_text()
    assert set(whole["test"]) == {"sst_accuracy", "sts_pearson"}  # the labelled test slices are scored
    initial = minbert.load_pretrained(str(tiny_dir)).state_dict()
    assert any(not torch.equal(initial[k], a["model"]["bert." + k]) for k in initial)  # it did train


def test_the_dev_files_hold_the_best_epochs_own_predictions(tiny_dir, files, tmp_path, monkeypatch):
    """Dev is predicted once an epoch and not again at the end; the files equal a fresh prediction of the best
    weights (a resume of the finished run, which trains nothing and predicts everything)."""
    dev_files = {files[t][1] for t in files}
    calls: list[str] = []
    real = multitask.predict

    def counting(m, data, *args):
        calls.append(str(data.records.path))
        return real(m, data, *args)
    monkeypatch.setattr(multitask, "predict", counting)
    first = run(parse_settings(argv(tiny_dir, files, tmp_path, "reuse", "--epochs", "2")))
    assert sum(c in dev_files for c in calls) == 3 * 2 and len(calls) == 3 * 2 + 3  # then the three test files
    calls.clear()
    again = run(parse_settings(argv(tiny_dir, files, tmp_path, "again", "--epochs", "2",
                                               "--resume", str(tmp_path / "reuse.pt"))))
    assert sum(c in dev_files for c in calls) == 3 and first["dev"] == again["dev"]
    for t in ("sst", "para", "sts"):
        assert (tmp_path / "reuse" / f"{t}-dev-output.csv").read_text() == \
            (tmp_path / "again" / f"{t}-dev-output.csv").read_text()


def test_the_six_files_pass_score_and_submit(tiny_dir, files, tmp_path):
    from tasks import score, submit
    run(parse_settings(argv(tiny_dir, files, tmp_path, "out", "--epochs", "1")))
    data = tmp_path / "data"
    data.mkdir()
    names = {"sst": "ids-sst", "para": "quora", "sts": "sts"}
    for t, (_, dev, test) in files.items():  # a data directory holding exactly the files trained on
        (data / f"{names[t]}-dev.csv").write_text(Path(dev).read_text())
        (data / f"{names[t]}-test-student.csv").write_text(Path(test).read_text())
    assert score.main([str(tmp_path / "out"), "--data-dir", str(data)]) == 0
    assert submit.main(["--pred-dir", str(tmp_path / "out"), "--data-dir", str(data),
                        "--out", str(tmp_path / "s.zip")]) == 0
    import zipfile
    assert len(zipfile.ZipFile(tmp_path / "s.zip").namelist()) == 6


def test_bitfit_trains_only_biases_and_heads_under_the_multitask_loop(tiny_dir, files, tmp_path):
    run(parse_settings(argv(tiny_dir, files, tmp_path, "bitfit", "--epochs", "1",
                                       "--fine-tune-mode", "bitfit", "--bitfit-terms", "bq,bm2")))
    state = load_checkpoint(tmp_path / "bitfit.pt")["model"]
    initial = minbert.load_pretrained(str(tiny_dir)).state_dict()
    changed = {k for k in initial if not torch.equal(initial[k], state["bert." + k])}
    assert changed and all(k.rsplit(".", 1)[-1] in ("bq", "bm2") for k in changed), changed
    assert len(changed) == 2 * 2  # bq and bm2 of both layers


def test_epoch_batches_follow_the_schedule_and_reproduce(tokenizer, files):
    train = {t: load(t, "train", files[t][0], tokenizer) for t in ("sst", "para", "sts")}
    schedule = TaskSchedule("round-robin", "cycle")
    a, b = EpochBatches(train, schedule, 8, 0, 2, 1), EpochBatches(train, schedule, 8, 0, 2, 1)
    assert [x["task"] for x in a][:6] == ["sst", "para", "sts"] * 2 and len(a) == 3 * 6
    assert [x["ids"] for x in a] == [x["ids"] for x in b]
    assert [x["ids"] for x in a] != [x["ids"] for x in EpochBatches(train, schedule, 8, 1, 2, 1)]
    sts_ids = [i for x in a if x["task"] == "sts" for i in x["ids"]]  # 32 STS pairs, 6 batches: a second pass
    assert len(sts_ids) == 48 and len(set(sts_ids)) == 32
    batch = collate(train["sts"], [0, 1])
    assert batch["labels"].dtype == torch.float and set(batch) >= {"input_ids_1", "attention_mask_2"}


def test_loaded_examples_carry_no_padding(tokenizer, files):
    data = load("sts", "train", files["sts"][0], tokenizer)
    for r, a, b in zip(data.records, data.ids, data.ids2):
        assert a == tokenizer.encode(r.sentence1) and b == tokenizer.encode(r.sentence2)
    assert len(set(data.lengths)) > 5
    batch = collate(data, [0, 1, 2])
    assert batch["attention_mask_1"].sum(1).tolist() == [len(data.ids[i]) for i in range(3)]
    assert batch["input_ids_1"].shape[1] == max(len(data.ids[i]) for i in range(3))


def test_the_sts_head_can_start_mid_scale(tiny_config, tokenizer):
    torch.manual_seed(0)
    plain = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig()).eval()
    torch.manual_seed(0)
    mid = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(similarity_bias=2.5)).eval()
    batch = pair_batch(tokenizer)
    with torch.no_grad():
        torch.testing.assert_close(mid.predict_similarity(*batch.values()),
                                   plain.predict_similarity(*batch.values()) + 2.5)
        torch.testing.assert_close(mid.predict_paraphrase(*batch.values()), plain.predict_paraphrase(*batch.values()))


@pytest.mark.parametrize("design", ["bi-encoder", "cross-encoder"])
def test_symmetric_pairs_predict_the_mean_of_both_orders_in_eval_mode_only(design, tiny_config, tokenizer):
    torch.manual_seed(0)
    model = MultitaskBert(minbert.BertModel(tiny_config), MultitaskConfig(design=design, symmetric_pairs=True))
    batch = pair_batch(tokenizer)
    flipped = pair_batch(tokenizer, [(b, a) for a, b in PAIRS])
    model.eval()
    with torch.no_grad():
        for predict in (model.predict_paraphrase, model.predict_similarity):
            y, y_flipped = predict(*batch.values()), predict(*flipped.values())
            model.config.symmetric_pairs = False
            one, other = predict(*batch.values()), predict(*flipped.values())
            model.config.symmetric_pairs = True
            assert not torch.allclose(one, other)                   # the designs are not symmetric by themselves
            torch.testing.assert_close(y, (one + other) / 2)
            torch.testing.assert_close(y, y_flipped)                # the mean is the same either way round
        sst = {"input_ids": batch["input_ids_1"], "attention_mask": batch["attention_mask_1"]}
        logits = model.predict("sst", sst)
        model.config.symmetric_pairs = False
        torch.testing.assert_close(logits, model.predict("sst", sst))
    model.train()                                                   # training mode: one pass, as given
    with torch.no_grad():
        model.config.symmetric_pairs = True
        torch.manual_seed(1)
        y = model.predict_similarity(*batch.values())
        model.config.symmetric_pairs = False
        torch.manual_seed(1)
        assert torch.equal(y, model.predict_similarity(*batch.values()))


def test_swap_pairs_flips_about_half_the_pairs_anew_each_epoch_and_reproduces(tokenizer, files):
    train = {t: load(t, "train", files[t][0], tokenizer) for t in ("sst", "para", "sts")}
    schedule = TaskSchedule("round-robin")

    def orders(epoch, seed=1, swap=True):
        flips = {}
        for batch in EpochBatches(train, schedule, 8, epoch, 2, seed, swap_pairs=swap):
            if batch["task"] == "sst":
                continue
            data = train[batch["task"]]
            for k, i in enumerate(batch["ids"]):
                j = [r.id for r in data.records].index(i)
                first = batch["input_ids_1"][k][batch["attention_mask_1"][k].bool()].tolist()
                assert first in (data.ids[j], data.ids2[j])
                second = batch["input_ids_2"][k][batch["attention_mask_2"][k].bool()].tolist()
                assert sorted([first, second]) == sorted([data.ids[j], data.ids2[j]])  # the same pair
                flips[i] = first == data.ids2[j] and data.ids[j] != data.ids2[j]
        return flips

    a = orders(0)
    assert len(a) == 48 + 32 and 0.3 < sum(a.values()) / len(a) < 0.7
    assert a == orders(0)                                           # the same seed and epoch: the same orders
    assert a != orders(1) and a != orders(0, seed=2)                # drawn anew each epoch and seed
    assert not any(orders(0, swap=False).values())                  # off: the file's order


def test_full_frozen_words_trains_everything_but_the_word_embedding_table(tiny_dir, files, tmp_path, capsys):
    summary = run(parse_settings(argv(tiny_dir, files, tmp_path, "words", "--epochs", "1",
                                                 "--fine-tune-mode", "full-frozen-words", "--optimizer", "fused")))
    state = load_checkpoint(tmp_path / "words.pt")["model"]
    initial = minbert.load_pretrained(str(tiny_dir)).state_dict()
    changed = {k for k in initial if not torch.equal(initial[k], state["bert." + k])}
    assert "embeddings.word.weight" not in changed
    assert {"embeddings.position.weight", "layers.0.bq", "layers.1.bm2"} <= changed, changed
    total = sum(v.numel() for k, v in state.items())
    assert summary["trainable"] == total - 30522 * 32
    assert f"full-frozen-words trains {total - 30522 * 32:,} of {total:,} parameters" in capsys.readouterr().err


def test_a_default_test_file_that_is_absent_is_said_to_be_skipped(tiny_dir, files, tmp_path, tokenizer, capsys):
    """As tasks.predict says it: one line per task whose test file (here DATA_DIR's default) is not there."""
    given = [a for a in argv(tiny_dir, files, tmp_path, "skip", "--data-dir", str(tmp_path / "empty"))
             if a != "--sts-test" and a != files["sts"][2]]
    settings = parse_settings(given)
    _, _, test = multitask.load_files(settings, ["sst", "para", "sts"], tokenizer)
    assert sorted(test) == ["para", "sst"]
    absent = tmp_path / "empty" / "sts-test-student.csv"
    assert f"sts test: no file {absent}; skipped" in capsys.readouterr().err.splitlines()
