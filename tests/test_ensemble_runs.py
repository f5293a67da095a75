"""benchmarks/ensemble_runs.py: members trained once per seed, ensembles scored, each against its own members."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ensemble_runs
from test_multitask import argv, files  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def dev(overall, sst=0.5, para=0.8, sts=0.85):
    return {"overall": overall, "sst_accuracy": sst, "para_accuracy": para, "sts_pearson": sts}


def test_against_members_pairs_each_ensemble_with_its_own_members_mean():
    members = {1: dev(0.70), 2: dev(0.72), 3: dev(0.60), 4: dev(0.62), 5: dev(0.80), 6: dev(0.84, sst=0.6)}
    table = {"members": members, "ensembles": [{"seeds": [1, 2], "dev": dev(0.73)},
                                               {"seeds": [3, 4], "dev": dev(0.63)},
                                               {"seeds": [5, 6], "dev": dev(0.84, sst=0.56)}]}
    d = ensemble_runs.against_members(table)
    # differences 0.02, 0.02, 0.02: sd 0 (to rounding), interval collapsed on +0.02
    assert d["overall"]["n"] == 3 and d["overall"]["mean"] == pytest.approx(0.02)
    assert d["overall"]["lo"] == pytest.approx(0.02) and d["overall"]["excludes_zero"]
    # SST: 0, 0, 0.56 - 0.55 = +0.01
    assert d["sst_accuracy"]["mean"] == pytest.approx(0.01 / 3)
    assert d["sts_pearson"]["mean"] == pytest.approx(0.0) and not d["sts_pearson"]["excludes_zero"]


def test_against_peer_is_the_unpaired_difference_of_the_ensembles_and_the_peer_runs():
    table = {"ensembles": [{"seeds": [1], "dev": dev(0.74)}, {"seeds": [2], "dev": dev(0.73)},
                           {"seeds": [3], "dev": dev(0.75)}]}
    d = ensemble_runs.against_peer(table, {1: 0.72, 2: 0.73, 3: 0.71})
    assert d["mean"] == pytest.approx(0.02) and d["n"] == (3, 3)
    assert d == ensemble_runs.stats.unpaired_difference([0.74, 0.73, 0.75], [0.72, 0.73, 0.71])


def test_trains_each_seed_once_and_scores_the_ensemble_against_its_members(tiny_dir, files, tmp_path, capsys):  # noqa: F811
    data = tmp_path / "data"                          # the dev slices under the course's file names, for the scorer
    data.mkdir()
    for t, name in (("sst", "ids-sst-dev.csv"), ("para", "quora-dev.csv"), ("sts", "sts-dev.csv")):
        shutil.copy(files[t][1], data / name)
    out, runs = tmp_path / "ensemble.json", tmp_path / "runs"
    cmd = ["--out", str(out), "--runs-dir", str(runs), "--seeds", "1,2", "--size", "2", "--data-dir", str(data),
           "--", *argv(tiny_dir, files, tmp_path, "x", "--epochs", "1")]
    ensemble_runs.main(cmd)
    table = json.loads(out.read_text())
    assert set(table["members"]) == {"1", "2"} and table["ensembles"][0]["seeds"] == [1, 2]
    pair = table["ensembles"][0]["dev"]
    assert (runs / "ensemble-1-2" / "sst-dev-output.csv").is_file()
    assert table["members"]["1"]["overall"] != table["members"]["2"]["overall"]      # the seeds differ
    d = table["against_members"]["overall"]
    mean = (table["members"]["1"]["overall"] + table["members"]["2"]["overall"]) / 2
    assert d["n"] == 1 and d["mean"] == pytest.approx(table["ensembles"][0]["dev"]["overall"] - mean)
    assert d["lo"] is None and "NaN" not in out.read_text()          # one ensemble: no interval, strict JSON
    assert "no interval from one ensemble" in capsys.readouterr().out
    ensemble_runs.main(cmd)                           # again: nothing trained, the same table
    assert "seed 1: already in" in capsys.readouterr().out
    assert json.loads(out.read_text())["ensembles"] == table["ensembles"]
    peer = tmp_path / "power.json"                    # single runs of the same budget, from paired_runs
    peer.write_text(json.dumps([{"row": "long", "seed": s, "dev": dev(v)} for s, v in ((1, 0.5), (2, 0.6))]))
    size1 = [c if c != "2" or i != cmd.index("--size") + 1 else "1" for i, c in enumerate(cmd)]
    ensemble_runs.main(size1[:size1.index("--")] + ["--peer", str(peer), "long"] + size1[size1.index("--"):])
    table = json.loads(out.read_text())
    assert len(table["ensembles"]) == 2 and table["against_peer"]["row"] == "long"
    values = [e["dev"]["overall"] for e in table["ensembles"]]
    assert table["against_peer"]["mean"] == pytest.approx(sum(values) / 2 - 0.55)
    assert "ensemble - long, overall" in capsys.readouterr().out
    # --members: the finished runs again, with no training: the same members' scores and the same 2-run ensemble
    done = tmp_path / "members.json"
    ensemble_runs.main(["--out", str(done), "--runs-dir", str(tmp_path / "m"), "--data-dir", str(data),
                        "--members", f"one={runs / 'seed-1'}", f"two={runs / 'seed-2'}"])
    members = json.loads(done.read_text())
    assert members["members"] == {"one": table["members"]["1"], "two": table["members"]["2"]}
    assert members["ensembles"] == [{"members": ["one", "two"], "dev": pair}]
    assert "ensemble of one, two: overall" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="two or more distinct"):
        ensemble_runs.main(["--out", str(done), "--members", f"one={runs / 'seed-1'}"])


def test_peer_only_adds_the_peer_to_a_written_table_without_training_or_runs(tmp_path, capsys):
    out, peer = tmp_path / "ensemble.json", tmp_path / "power.json"
    table = {"flags": [], "members": {}, "minutes": {}, "against_members": {},
             "ensembles": [{"seeds": [1, 2, 3], "dev": dev(0.74)}, {"seeds": [4, 5, 6], "dev": dev(0.73)}]}
    out.write_text(json.dumps(table))
    peer.write_text(json.dumps([{"row": "baseline 3 epochs", "seed": s, "dev": dev(v)}
                                for s, v in ((1, 0.72), (2, 0.70), (3, 0.71))]))
    cmd = ["--out", str(out), "--runs-dir", str(tmp_path / "absent"), "--peer-only"]
    assert ensemble_runs.main([*cmd, "--peer", str(peer), "baseline 3 epochs"]) == 0
    written = json.loads(out.read_text())
    assert written["ensembles"] == table["ensembles"] and not (tmp_path / "absent").exists()
    assert written["against_peer"]["mean"] == pytest.approx(0.735 - 0.71) and written["against_peer"]["seeds"] == [1, 2, 3]
    assert "ensemble - baseline 3 epochs, overall: +2.50 points" in capsys.readouterr().out
    with pytest.raises(SystemExit):                   # no --peer: refused with a message, the table untouched
        ensemble_runs.main(cmd)
    assert "--peer-only needs --peer" in capsys.readouterr().err
    assert json.loads(out.read_text()) == written


def test_the_toolkits_page_states_the_best_ensembles_the_results_hold():
    """docs/leaderboard.md's best recipe: the eight-run ensemble and its best nested one, and the three make train
    runs' ensemble, its members and minutes, as benchmarks/results/ holds them."""
    root = Path(__file__).resolve().parents[1]
    page = " ".join((root / "docs" / "leaderboard.md").read_text().split())
    full = json.loads((root / "benchmarks" / "results" / "ensemble-full-budget.json").read_text())
    main = json.loads((root / "benchmarks" / "results" / "ensemble-main.json").read_text())
    eight = [e["dev"]["overall"] for e in full["ensembles"] if len(e["members"]) == len(full["members"])]
    best = max(full["ensembles"], key=lambda e: e["dev"]["overall"])
    members = [m["overall"] for m in main["members"].values()]
    assert (f"an ensemble of {len(full['members'])} full-budget runs".replace(" 8 ", " eight ")
            + f", {eight[0]:.4f} (its first {len(best['members'])} ".replace(" 5 ", " five ")
            + f"{best['dev']['overall']:.4f}, the best of {len(full['ensembles'])} ".replace(" 7 ", " seven ")) in page
    assert best["dev"]["overall"] == max(e["dev"]["overall"] for e in full["ensembles"])
    assert (f"of the three `make train` runs alone, {main['ensembles'][0]['dev']['overall']:.4f} (its members "
            f"{min(members):.4f}-{max(members):.4f}) in {sum(main['minutes'].values()):.1f} minutes") in page


def test_the_results_table_is_written_atomically(tmp_path, monkeypatch):
    """A full disk (ENOSPC at the fsync) keeps the previous table and leaves no temporary beside it."""
    import errno
    import os
    path = tmp_path / "results.json"
    ensemble_runs.write_table(path, {"members": {}})

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError, match="No space left"):
        ensemble_runs.write_table(path, {"members": {"1": {}}})
    assert json.loads(path.read_text()) == {"members": {}} and [p.name for p in tmp_path.iterdir()] == ["results.json"]
