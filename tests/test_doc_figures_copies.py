"""The copies: every figure benchmarks/README.md (the index: a headline row's figure cell, a paragraph, a topic-page
line) and README.md state beside a link to a topic page is looked for in the section that link names, so that a copy
cannot drift from its source (the source's own figure is read from its results file by the other test_doc_figures
files). A figure matches the same string, or a figure of the section with more decimals that rounds to it, or the
section's points (75.03) as the index's fraction (0.7503). The few figures the index alone states are recomputed here
from their results (ONLY_IN_THE_INDEX), as are the rows that link no page (make train re-run, the four-arm run)."""

from __future__ import annotations

import csv
import re
import statistics
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from test_doc_figures import ROOT, result

INDEX = ROOT / "benchmarks" / "README.md"
TOKEN = re.compile(r"(?<![\w./#])(?<!e-)(?<!e\+)(\d+(?:\.\d+)?)(%|x(?![\w]))?(?![\w.]*\d)")  # a figure, as figscan
LINK = re.compile(r"\]\(([\w./-]+\.md)(?:#([\w-]*))?\)")
NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\d])")

# (the page the copy links, the figure): why no section of that page states it; each is recomputed below
ONLY_IN_THE_INDEX = {
    ("leaderboard.md", "0.22"): "three epochs' mean over make train's, on the means: test_the_index_only_figures",
    ("../docs/training.md", "0.99x"): "the four-arm run's attention alone, printed in results/student-path-four-arms"
                                      ".txt: test_the_index_only_figures",
    ("../docs/training.md", "1.13x"): "the four-arm run's AdamW alone, the same file",
    ("search.md", "0.7503"): "make train's mean, beside gradual unfreezing's (that section's table gives its seeds "
                             "alone): multitask-main-fused.json, test_the_index_only_figures",
}


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation but '-' dropped, each space a '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def section(path: Path, anchor: str | None) -> str:
    """The text (whitespace runs as one space) under the heading `anchor` names, to the next heading of its level or
    above; the whole page without an anchor. An anchor that names no heading fails: the link is broken."""
    lines = path.read_text().splitlines()
    if not anchor:
        return " ".join(" ".join(lines).split())
    heads = [(i, m) for i, line in enumerate(lines) if (m := re.match(r"(#+) (.*)", line))]
    starts = [(i, len(m.group(1))) for i, m in heads if slug(m.group(2)) == anchor]
    assert starts, f"{path.name}#{anchor} names no heading of {path.name}"
    start, level = starts[0]
    end = next((i for i, m in heads if i > start and len(m.group(1)) <= level), len(lines))
    return " ".join(" ".join(lines[start:end]).split())


def places(figure: str) -> int:
    return len(figure.partition(".")[2])


def rounds_to(written: str, figure: str, scale: int = 0) -> bool:
    """Whether the page's `written` (times 10^scale) rounded half up to the figure's decimals is the figure."""
    value = Decimal(written).scaleb(scale)
    if places(written) - scale < places(figure):
        return False
    return str(value.quantize(Decimal(1).scaleb(-places(figure)), rounding=ROUND_HALF_UP)) == figure


def stated(figure: str, text: str) -> bool:
    """The figure (its %/x dropped) is in the text: the same string, more decimals rounding to it, or points."""
    number = figure.rstrip("%x")
    if re.search(rf"(?<![\w.]){re.escape(number)}(?![\d])", text):
        return True
    return any(rounds_to(w, number) or rounds_to(w, number, -2) for w in NUMBER.findall(text))


def copies(path: Path) -> list[tuple[int, str, list[tuple[str, str | None]]]]:
    """(line, the figures' text, the topic pages it links) for each line of the page that links one: a table row's
    figure cell (its first), any other line whole; links into results/ are sources, not topic pages."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split(" | ")[0] if line.startswith("| ") else line
        links = [(m.group(1), m.group(2)) for m in LINK.finditer(text) if not m.group(1).startswith("results/")]
        if links:
            out.append((n, re.sub(r"\]\([^)]*\)", "]", text), links))
    return out


def figures(text: str) -> list[str]:
    return [m.group(1) + (m.group(2) or "") for m in TOKEN.finditer(text) if "." in m.group(1) or m.group(2)]


@pytest.mark.parametrize("path", [INDEX, ROOT / "README.md"], ids=["benchmarks-README", "README"])
def test_each_copy_is_on_the_page_it_links(path: Path) -> None:
    """Every figure of a line that links topic pages is stated in a linked section (ONLY_IN_THE_INDEX apart)."""
    missing, seen = [], set()
    for n, text, links in copies(path):
        scope = " ".join(section((path.parent / page).resolve(), anchor) for page, anchor in links)
        for figure in figures(text):
            key = next(((page, figure) for page, _ in links if (page, figure) in ONLY_IN_THE_INDEX), None)
            if key:
                seen.add(key)
            elif not stated(figure, scope):
                missing.append(f"{path.name}:{n}: {figure} not in {links}")
    assert not missing, "\n".join(missing)
    if path == INDEX:
        assert seen == set(ONLY_IN_THE_INDEX), set(ONLY_IN_THE_INDEX) - seen


def test_the_index_only_figures() -> None:
    """ONLY_IN_THE_INDEX, each from its results: three epochs' +0.22 over make train on the means (power.json's
    `baseline 3 epochs`, multitask-main-fused.json), make train's mean beside gradual unfreezing's, the four-arm run's
    0.99x and 1.13x (its printed medians)."""
    text = " ".join(INDEX.read_text().split()).replace("**", "")
    three = statistics.fmean(r["dev"]["overall"] for r in result("power.json") if r["row"] == "baseline 3 epochs")
    main = result("multitask-main-fused.json")["mean"]["dev_overall"]
    assert f"{three:.4f} mean, +{(three - main) * 100:.2f} over `make train`'s two epochs on the means" in text
    unfreezing = statistics.fmean(r["dev"]["overall"] for r in result("search-confirm.json")
                                  if r["row"] == "main job, gradual unfreezing 0.1")
    assert f"3 paired seeds: {unfreezing:.4f} against {main:.4f}, -" in text
    printed = (ROOT / "benchmarks" / "results" / "student-path-four-arms.txt").read_text()
    ms = {arm: float(v) for arm, v in re.findall(r"^(\S+)\s+([\d.]+) ms a step", printed, re.MULTILINE)}
    attention, adamw = ms["eager+fused"] / ms["fused+fused"], ms["fused+course"] / ms["fused+fused"]
    assert (f"the written-out attention alone {attention:.2f}x, the course's AdamW alone {adamw:.2f}x "
            "([training](../docs/training.md#the-attention-and-the-optimiser))") in " ".join(INDEX.read_text().split())


def test_the_index_rows_of_make_train_re_run_are_the_recorded_main_job() -> None:
    """The rows that re-ran `make train` (no topic page) state the recorded seed-11711 run's dev figures
    (multitask-main-fused.json) and its first epoch's overall (the same run on B: multitask-main-bf16.json)."""
    run = result("multitask-main-fused.json")["seeds"]["11711"]
    dev = " / ".join(f"{run[f'dev_{k}']:.4f}" for k in ("sst_accuracy", "para_accuracy", "sts_pearson"))
    rows = [line for line in INDEX.read_text().splitlines() if line.startswith("| `make train` ")]
    assert len(rows) == 4
    epoch1 = result("multitask-main-bf16.json")["runs"]["fp32, 2 epochs (make train)"]["dev_by_epoch"][0][3]
    for row in rows:
        assert f"dev {dev} / **{run['dev_overall']:.4f}**, epoch 1 {epoch1:.4f}" in row, row[:60]


def test_readme_python_version_is_pyprojects() -> None:
    """'Both need Python 3.10+': pyproject.toml's requires-python."""
    required = re.search(r'requires-python = ">=([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert f"Both need Python {required}+" in " ".join((ROOT / "README.md").read_text().split())


def test_the_index_rows_read_from_their_own_results() -> None:
    """Rows whose figures no topic page pins: the attention mistake (mistake_run.json, -2000x2.json), the search's
    make train against trial 3 and trial 4's tie (search/main-job-full-trials.csv), the nested ensembles' range
    (ensemble-full-budget.json)."""
    text = " ".join(INDEX.read_text().split()).replace("**", "")
    full, short_ = (result(n)["runs"] for n in ("mistake_run.json", "mistake_run-2000x2.json"))
    wrong, right = full["scores / sqrt(H)"], full["correct"]
    small = [short_[k]["dev_accuracy"] for k in ("scores / sqrt(H)", "correct")]
    epochs = [" / ".join(f"{x:.4f}" for x in r["dev_accuracy_per_epoch"]) for r in (wrong, right)]
    assert all(a < b for a, b in zip(wrong["dev_accuracy_per_epoch"], right["dev_accuracy_per_epoch"], strict=True))
    assert (f"dev {wrong['dev_accuracy']:.4f} against the correct tree's {right['dev_accuracy']:.4f} "
            f"({(wrong['dev_accuracy'] - right['dev_accuracy']) * 100:.1f} points; worse at every epoch: {epochs[0]} "
            f"against {epochs[1]}); at 2000 examples and 2 epochs no difference "
            f"({small[0]:.4f} against {small[1]:.4f})") in text
    main = result("multitask-main-fused.json")["seeds"]["11711"]["dev_overall"]
    assert f"against make train's {main:.4f} (one seed:" in text
    with open(ROOT / "benchmarks" / "search" / "main-job-full-trials.csv", newline="") as f:
        value = {int(t["number"]): float(t["value"] or 0) for t in csv.DictReader(f)}
    assert (f"make train's run recorded as a trial ({value[1]:.4f}), 8 trials scored: best trial 4 {value[4]:.4f} "
            "(a tie)") in text
    nested = [e["dev"]["overall"] for e in result("ensemble-full-budget.json")["ensembles"]]
    assert f"all 8 {nested[-1]:.4f}, nested first-k {min(nested):.4f}-{max(nested):.4f}" in text
