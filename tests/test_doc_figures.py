"""The figures and defaults docs/training.md, docs/runs.md, docs/search.md, docs/simcse.md and docs/deebert.md state,
each read from the page within its phrase and compared with the results file or the code it comes from (the GPU
runs' figures: tests/test_doc_figures_gpu.py, with this file's helpers): the student path's cost, what --save-every costs, the recipe's defaults in the reference and a student tree, the
search's defaults, SimCSE's and DeeBERT's defaults. No training: results files, dataclass defaults and source."""

from __future__ import annotations

import ast
import json
import re
import statistics
import sys
from decimal import ROUND_HALF_UP, Decimal
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
TRAINING = ROOT / "docs" / "training.md"
RUNS = ROOT / "docs" / "runs.md"
SEARCH = ROOT / "docs" / "search.md"
SIMCSE = ROOT / "docs" / "simcse.md"
DEEBERT = ROOT / "docs" / "deebert.md"
GPU = ROOT / "benchmarks" / "gpu.md"

import stats


def flat(path: Path) -> str:
    """The page's text with every run of whitespace (line breaks included) as one space."""
    return " ".join(path.read_text().split())


def result(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def sci(x: float) -> str:
    """A learning rate as the pages write it: 3e-05 -> 3e-5 (one digit times a power of ten)."""
    text = re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{x:.0e}").replace("e+", "e")
    assert float(text) == x, f"{x!r} is not written as {text}"
    return text


def four(x: float) -> str:
    """A dev score to four decimals, its decimal digits rounded half up as the pages do (0.83375, 3335 of 4000, is
    0.8338, 0.83325 is 0.8333; f'{x:.4f}' rounds the binary float, which may lie just below, and writes 0.8337)."""
    return str(Decimal(repr(x)).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP))


def page_table(path: Path, header: str, whole: bool = False) -> list[list[str]]:
    """The rows (cells, bold marks removed) of the table whose header line starts with `header` (is `header`, whole)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if (line == header if whole else line.startswith(header)))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip().replace("**", "") for c in line.strip().strip("|").split("|")])
    return rows


# ---------------------------------------------------------------- 1. the student path's cost

def test_training_md_the_student_path_s_cost() -> None:
    page, measured = flat(TRAINING), result("student-path.json")
    settings, ms, ratio = measured["settings"], measured["ms_per_step"], measured["ratio"]
    assert ratio["of"] == "eager+course / fused+fused" and ratio["n"] == settings["rounds"]
    assert (f"`benchmarks/student_path.py --rounds {settings['rounds']} --steps {settings['steps']} --threads "
            f"{settings['threads']}`, a {measured['cpu']['cores']}-core Intel Xeon with AMX, torch "
            f"{measured['torch']}, fp32") in page
    assert measured["cpu"]["model"].startswith("Intel(R) Xeon(R)") and measured["cpu"]["amx_bf16"]
    assert (f"eager + course {ms['eager+course']['median']:.0f} ms a step, fused + fused "
            f"{ms['fused+fused']['median']:.0f} ms, **{ratio['median']:.2f}x** (median of {ratio['n']} interleaved "
            f"rounds; the per-round ratio {ratio['min']:.2f}-{ratio['max']:.2f})") in page
    # the earlier run of four arms: the medians its report printed
    arms = {}
    for line in (RESULTS / "student-path-four-arms.txt").read_text().splitlines():
        m = re.fullmatch(r"(\w+)\+(\w+)\s+([\d.]+) ms a step, range \[[\d.]+, [\d.]+\] over (\d+) rounds", line)
        if m:
            arms[f"{m.group(1)} + {m.group(2)}"] = (float(m.group(3)), int(m.group(4)))
    assert len(arms) == 4 and len({n for _, n in arms.values()}) == 1
    n = arms["fused + fused"][1]
    said = ", ".join(f"{arm} {arms[arm][0]:.0f} ms" for arm in ("eager + fused", "fused + course", "fused + fused"))
    assert f"put most of that in the optimiser: {said} (medians of {n} rounds)" in page


# ---------------------------------------------------------------- 2. what --save-every costs

def test_training_md_what_save_every_costs() -> None:
    measured = result("save-every.json")
    write, step = statistics.median(measured["writes_s"]), statistics.median(measured["steps_s"])
    share = measured["share"]
    assert share == {str(n): write / (n * step) for n in (100, 500, 1000)}     # as benchmarks/save_every.py computes it
    assert (f"the best epoch's weights: {measured['size_bytes'] / 2**20:.0f} MiB for the main job, {write:.2f} s to "
            f"write on machine A, +{share['100']:.1%} of the training time at `--save-every 100`, "
            f"+{share['500']:.1%} at 500") in flat(TRAINING)


# ---------------------------------------------------------------- 3. the recipe's defaults

def tree_defaults() -> dict[str, tuple[str, str]]:
    """{field: (student tree's default, reference's)} for the Recipe fields whose default is
    `STUDENT_VALUE if STUDENT else REFERENCE_VALUE` in tasks/core/recipe.py."""
    tree = ast.parse((ROOT / "tasks" / "core" / "recipe.py").read_text())
    recipe = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Recipe")
    named = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    out = {}
    for node in recipe.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call) and node.value.args:
            default = node.value.args[0]
            if isinstance(default, ast.Name) and default.id in named:     # a module constant, e.g. DEFAULT_ATTENTION
                default = named[default.id]
            if isinstance(default, ast.IfExp):
                assert ast.unparse(default.test) == "STUDENT", ast.unparse(default)
                out[node.target.id] = (ast.literal_eval(default.body), ast.literal_eval(default.orelse))
    return out


def test_the_recipe_defaults_the_pages_state() -> None:
    from tasks.core.recipe import Recipe
    from tasks.core.tree import STUDENT

    assert not STUDENT                                  # this is the reference tree: Recipe() has the reference's
    recipe, per_tree = Recipe(), tree_defaults()
    assert set(per_tree) == {"attention", "optimizer"}
    (student_attention, attention), (student_optimizer, optimizer) = per_tree["attention"], per_tree["optimizer"]
    assert (recipe.attention, recipe.optimizer) == (attention, optimizer)
    training, runs = flat(TRAINING), flat(RUNS)
    warmup, clip, precision = recipe.warmup_ratio, recipe.max_grad_norm, recipe.precision
    assert (f"The defaults are BERT's fine-tuning recipe in {precision} (warm-up over {warmup:.0%} of the steps then "
            f"linear decay, clipping at {clip}) with torch's {attention} attention and AdamW; a student tree defaults "
            "to its own `attention()` and the course's AdamW instead") in training
    assert f"Plain {precision} stays the default" in training
    assert f"(BERT's recipe uses {warmup};" in training and f"(the recipe: {clip})." in training
    assert f"`--attention eager|fused` (reference: {attention}; student tree: {student_attention})" in training
    assert f"`--optimizer course|torch|fused` (reference: {optimizer}; student tree: {student_optimizer})" in training
    assert (f"linear warm-up over {warmup:.0%} of the optimiser steps then linear decay to 0, gradient clipping at "
            f"{clip}, torch's {optimizer} AdamW (Devlin et al., 2019, A.2), all in {precision}") in runs
    # the plain loop of the assignment: the recipe switched off and the student tree's attention and AdamW
    plain = f"--warmup-ratio none --max-grad-norm none --attention {student_attention} --optimizer {student_optimizer}"
    assert f"python -m tasks.classifier --task sst {plain}" in training
    assert f"`{plain}` is the plain loop of the assignment" in runs


# ---------------------------------------------------------------- 4. the search's defaults

def fake_optuna() -> SimpleNamespace:
    """What tasks/search/study.py asks of Optuna, recording the arguments it passes."""

    def storage(url, engine_kwargs=None, heartbeat_interval=None, grace_period=None,
                heartbeat_stale_trial_callback=None):
        return {"url": url, "engine_kwargs": engine_kwargs, "heartbeat_interval": heartbeat_interval,
                "grace_period": grace_period, "retry": heartbeat_stale_trial_callback}

    return SimpleNamespace(
        storages=SimpleNamespace(RDBStorage=storage, RetryHeartbeatStaleTrialCallback=lambda max_retry: max_retry),
        samplers=SimpleNamespace(TPESampler=lambda **kw: kw),
        pruners=SimpleNamespace(MedianPruner=lambda **kw: ("median", kw)))


def test_the_search_page_states_the_searchs_defaults() -> None:
    pytest.importorskip("sqlalchemy")              # study.open_storage imports it (Optuna brings it)
    from tasks.search import Settings, build_parser
    from tasks.search.study import SQLITE_TIMEOUT, open_storage, sampler_and_pruner

    s, page = Settings(), flat(SEARCH)
    flags = build_parser()._option_string_actions
    assert {"--pruner", "--startup-trials", "--warmup-epochs", "--heartbeat", "--retries"} <= set(flags)
    # the pruner: median, waiting for --startup-trials complete trials, none in its first --warmup-epochs epochs
    sampler, (pruner, kw) = sampler_and_pruner(fake_optuna(), s.pruner, s.seed, s.startup_trials, s.warmup_epochs)
    assert pruner == "median" and kw == {"n_startup_trials": s.startup_trials, "n_warmup_steps": s.warmup_epochs + 1}
    assert sampler["n_startup_trials"] == s.startup_trials
    assert f"`--pruner {s.pruner}` (the default) stops a trial" in page
    assert (f"once `--startup-trials` ({s.startup_trials}) have completed and after `--warmup-epochs` "
            f"({s.warmup_epochs})") in page
    # the heartbeat, its grace, the retries and SQLite's wait, as the storage is opened
    storage = open_storage(fake_optuna(), "sqlite:///study.db", s.heartbeat, s.retries)
    assert storage["heartbeat_interval"] == s.heartbeat and storage["retry"] == s.retries
    beats, rest = divmod(storage["grace_period"], s.heartbeat)
    assert rest == 0
    word = {2: "two", 3: "three", 4: "four", 5: "five"}[beats]
    assert f"every `--heartbeat` seconds ({s.heartbeat}); a trial silent for {word} heartbeats" in page
    assert f"(`--retries`, {s.retries}; Optuna's `RetryHeartbeatStaleTrialCallback`)" in page
    assert storage["engine_kwargs"] == {"connect_args": {"timeout": SQLITE_TIMEOUT}}
    assert f"each connection waits up to {SQLITE_TIMEOUT} s for another's write" in page


# ---------------------------------------------------------------- 5. SimCSE's and DeeBERT's defaults

def test_the_simcse_page_states_the_stages_defaults() -> None:
    import inspect

    from minbert.simcse import SimCSEConfig, sup_simcse_loss, unsup_simcse_loss
    from tasks.simcse.settings import DEFAULTS, Stage, StageTraining

    stage, training, page = Stage(), StageTraining(), flat(SIMCSE)
    assert f"`--quora-fraction` (default {stage.quora_fraction:g}, as the report)" in page
    # epochs and lr left to the objective (tasks.simcse reads DEFAULTS for None); sup and margin alike
    assert training.epochs is None and training.lr is None and DEFAULTS["margin"] == DEFAULTS["sup"]
    unsup, sup = DEFAULTS["unsup"], DEFAULTS["sup"]

    def epochs(n: int) -> str:
        return f"{n} epoch" + ("s" if n != 1 else "")

    assert (f"Defaults follow SimCSE's appendix A for unsup (batch 64, t = {stage.temperature:g}, "
            f"{epochs(unsup['epochs'])} at {sci(unsup['lr'])}) and its epochs and rate for sup and margin "
            f"({sup['epochs']} at {sci(sup['lr'])}), but at batch {training.batch_size} for every objective "
            f"(SimCSE's supervised batch is 512: fewer in-batch negatives here), max length {training.max_length} "
            f"(their scripts' 32 would truncate Quora questions) and weight decay {training.weight_decay:g} "
            "(their scripts leave transformers' 0)") in page
    # the losses' own default temperature is the stage's
    for loss in (unsup_simcse_loss, sup_simcse_loss):
        t = inspect.signature(loss).parameters["temperature"].default
        assert t == stage.temperature == SimCSEConfig.temperature
        assert f"`{loss.__name__}(" in page and f"temperature={t:g}" in page


def test_the_deebert_page_states_the_runs_defaults() -> None:
    import math

    from tasks.deebert.settings import DEFAULT_THRESHOLDS, NUM_LABELS, Settings, Sweep

    settings, sweep, page = Settings(), Sweep(), flat(DEEBERT)
    # the thresholds: the list itself (steps of 0.05 to 0.3, then of 0.1), for two classes; scaled for C classes
    listed = ", ".join(f"{t:g}" for t in DEFAULT_THRESHOLDS)
    steps = [round(b - a, 4) for a, b in pairwise(DEFAULT_THRESHOLDS)]
    fine = steps.index(max(steps))
    assert set(steps[:fine]) == {min(steps)} and set(steps[fine:]) == {max(steps)}
    assert (f"The default thresholds are minbert's {listed} (steps of {min(steps):g} up to "
            f"{DEFAULT_THRESHOLDS[fine]:g}, then of {max(steps):g}) for two classes, scaled by ln C / ln 2 for C "
            "classes") in page
    assert sweep.thresholds is None
    assert sweep.resolved("sst2").thresholds == DEFAULT_THRESHOLDS
    scale = math.log(NUM_LABELS["sst"]) / math.log(2)
    assert sweep.resolved("sst").thresholds == [round(t * scale, 4) for t in DEFAULT_THRESHOLDS]
    assert f"`--rounds` (default {sweep.rounds}) timing rounds" in page
    assert f"With `--dev-protocol {settings.dev_protocol}` (the default) a seeded half of dev" in page
    assert f"within `--max-drop`, default {sweep.max_drop:g}, of the plain model's dev quality" in page


def test_the_multitask_page_states_the_frozen_word_tables_paired_cost() -> None:
    """docs/multitask.md: full-frozen-words against full fine-tuning, the mean paired difference over three seeds and
    its 95% interval, in points, recomputed with benchmarks/stats.py from the per-seed dev scores of
    multitask-main-ffw.json and of the main job (multitask-main-fused.json); the file's stored summary agrees."""
    frozen = {int(s): v["dev_overall"] for s, v in result("multitask-main-ffw.json")["seeds"].items()}
    full = {int(s): v["dev_overall"] for s, v in result("multitask-main-fused.json")["seeds"].items()}
    overall = stats.paired_difference(frozen, full)
    assert overall["n"] == 3 and overall["excludes_zero"]
    stored = result("multitask-main-ffw.json")["paired_against_main_job"]["dev_overall"]
    assert stored == pytest.approx(overall, rel=1e-6), "multitask-main-ffw.json's summary is not its seeds' figures"
    said = f"{overall['mean'] * 100:.2f} points [{overall['lo'] * 100:.2f}, {overall['hi'] * 100:.2f}] overall"
    assert said in flat(ROOT / "docs" / "multitask.md"), said


def test_the_deebert_page_states_where_the_public_codes_entropy_breaks() -> None:
    """docs/deebert.md: castorini/DeeBERT's entropy, log sum e^x - sum x e^x / sum e^x on the raw logits, is nan in
    fp32 once a logit passes ln(float32 max) (e^x overflows) or every logit is below ln(2^-150) (e^x rounds to 0);
    the gap between the logits does not matter. minbert's entropy stays finite at all of them."""
    import math

    import torch

    from minbert.deebert import entropy

    def public(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x)
        return torch.log(e.sum(-1)) - (x * e).sum(-1) / e.sum(-1)

    high, low = math.log(torch.finfo(torch.float32).max), math.log(2.0 ** -150)
    at = torch.tensor([[0.0, high + 0.1], [low - 0.1, low - 5], [0.0, high - 10], [-60.0, 44.0]])
    assert public(at).isnan().tolist() == [True, True, False, False]   # [-60, 44]: a gap of 104, finite
    assert torch.isfinite(entropy(at)).all()
    said = (f"log sum e^x - sum x e^x / sum e^x on the raw logits, gives nan in fp32 once a logit exceeds about "
            f"{high:.1f} (e^x overflows) or every logit is below about {low:.0f} (e^x rounds to 0)")
    assert said in flat(DEEBERT), said
