"""DeeBERT's sweep on a split: each exit setting's quality, exit layers and time against the plain model
(sweep_table), the same untimed for choosing the setting (quality_table, choose), early-exit predictions in the
file's order, and the seeded dev halves of the selection protocol; its settings are tasks/deebert/settings.py's
Sweep."""

from __future__ import annotations

import math
import random
import statistics
import sys

import torch

from minbert import deebert
from minbert.deebert import DeeBert, EntropyExit, PatienceExit

from ..core.batching import Split, batches, to_device
from ..core.data import Records
from ..core.evaluation import accuracy, in_order, pearson, predict_batches
from .report import savings
from .settings import NUM_LABELS, Sweep
from .timing import sweep

EVAL_BATCH = 64           # batch size of the dev evaluations during training and of the prediction files


def predictions(task: str, logits: torch.Tensor) -> list:
    """Logits (N, C) -> the class of each row, or its similarity for sts."""
    return logits[:, 0].tolist() if NUM_LABELS[task] == 1 else logits.argmax(-1).tolist()


def quality(task: str, preds: list, labels: list) -> float:
    """Pearson r for sts, accuracy otherwise."""
    return pearson(preds, labels) if task == "sts" else accuracy(preds, labels)


def exit_rules(sweep: Sweep, L: int) -> tuple[dict[str, deebert.ExitRule], deebert.ExitRule]:
    """The swept rules by name, and one that evaluates every off-ramp but never exits (their own cost); `sweep`
    resolved."""
    if sweep.exit == "entropy":
        return ({f"S={s:g}": EntropyExit(s, sweep.normalize_entropy) for s in sweep.thresholds},
                EntropyExit(-math.inf, sweep.normalize_entropy))
    patience = sweep.patience or list(range(1, max(L - 1, 2)))
    return ({f"P={p}": PatienceExit(p, sweep.change_threshold) for p in patience},
            PatienceExit(L, sweep.change_threshold))


def setting_of(name: str) -> float | None:
    return float(name.split("=", 1)[1]) if "=" in name else None


def sweep_table(task: str, settings: Sweep, model: DeeBert, split: Split, device: torch.device, batch_size: int,
                seed: int, progress: bool = False) -> dict:
    """Quality, exit layers and measured time of each setting against the plain model, on one split, at
    `batch_size` (1: the paper's); `settings` resolved, `seed` orders the timing rounds."""
    L = model.num_layers
    split_batches = [to_device(b, device) for b in batches(split, batch_size, bucket=batch_size > 1)]
    ids = [i for b in split_batches for i in b["ids"]]
    labels = [split.records[k].label for k in _positions(split.records, ids)]
    rules, no_exit = exit_rules(settings, L)
    log = (lambda s: print(s, file=sys.stderr)) if progress else None
    plain, runs = sweep(model, split_batches, {**rules, "no exit": no_exit}, rounds=settings.rounds, seed=seed, log=log)
    base_preds = predictions(task, plain.logits)
    base = quality(task, base_preds, labels)
    plain_work = plain.token_layers
    rows = []
    for run in [plain, *runs]:
        preds = predictions(task, run.logits)
        mean_layer = run.layers.float().mean().item()
        rows.append({
            "setting": run.name, "value": setting_of(run.name), "quality": quality(task, preds, labels),
            "quality_drop": base - quality(task, preds, labels), "mean_exit_layer": mean_layer,
            "layers_run": mean_layer / L, "layers_saved": 1 - mean_layer / L,
            "tokens_run": run.token_layers / plain_work, "seconds": run.time, "seconds_all": run.seconds,
            "seconds_min": min(run.seconds), "seconds_max": max(run.seconds),
            "time_saved": 1 - run.time / plain.time, "speedup": plain.time / run.time,
            **savings(run.seconds, plain.seconds, "time_saved_rounds"),
            **savings(run.seconds, runs[-1].seconds, "time_saved_vs_no_exit_rounds"),
            "same_as_plain": sum(abs(a - b) <= 1e-5 for a, b in zip(preds, base_preds)) / len(preds),
            "exit_histogram": torch.bincount(run.layers, minlength=L + 1)[1:].tolist()})
    return {"metric": "pearson" if task == "sts" else "accuracy", "examples": len(ids),
            "eval_batch_size": batch_size, "rounds": settings.rounds, "num_layers": L,
            "ramp_cost": rows[-1]["seconds"] / rows[0]["seconds"] - 1, "rows": rows}


def split_halves(split: Split, seed: int) -> tuple[Split, Split]:
    """A seeded split of dev into a selection half (epochs, the exit setting) and a report half, file order kept."""
    n = len(split.records)
    chosen = set(random.Random(f"deebert-dev-split-{seed}").sample(range(n), n // 2))
    return (split.subset("dev-select", [i for i in range(n) if i in chosen]),
            split.subset("dev-report", [i for i in range(n) if i not in chosen]))


def quality_table(task: str, settings: Sweep, model: DeeBert, split: Split, device: torch.device) -> dict:
    """Quality, drop and layers run of every setting on a split, untimed (batched exit: the same predictions as
    batch 1); the rows as sweep_table's, plain first and "no exit" last, for choose(); `settings` resolved."""
    L = model.num_layers
    rules, no_exit = exit_rules(settings, L)
    labels = [e.label for e in split.records]
    base_preds, _, _ = exit_predictions(model, task, split, no_exit, device)   # = the plain model's
    base = quality(task, base_preds, labels)
    rows = [{"setting": "plain", "value": None, "quality": base, "quality_drop": 0.0, "layers_run": 1.0}]
    for name, rule in rules.items():
        preds, layers, _ = exit_predictions(model, task, split, rule, device)
        q = quality(task, preds, labels)
        rows.append({"setting": name, "value": setting_of(name), "quality": q, "quality_drop": base - q,
                     "layers_run": statistics.mean(layers) / L})
    rows.append({**rows[0], "setting": "no exit"})
    return {"metric": "pearson" if task == "sts" else "accuracy", "examples": len(labels), "rows": rows}


def _positions(records: Records, ids: list[str]) -> list[int]:
    where = {e.id: k for k, e in enumerate(records)}
    return [where[i] for i in ids]


def choose(table: dict, max_drop: float) -> dict:
    """The swept setting that runs the fewest layers with a quality drop of at most max_drop."""
    swept = [r for r in table["rows"][1:-1] if r["quality_drop"] <= max_drop + 1e-12]
    return min(swept, key=lambda r: (r["layers_run"], r["value"]), default=table["rows"][1])


def exit_predictions(model: DeeBert, task: str, split: Split, rule: deebert.ExitRule,
                     device: torch.device) -> tuple[list, list[int], torch.Tensor]:
    """Early-exit predictions, exit layers and the exiting off-ramp's logits (N, C) of a split, in the file's order
    (batched exit equals batch 1)."""
    def step(m: DeeBert, b: dict) -> list[tuple]:
        o = deebert.early_exit(m, b["input_ids"], b["attention_mask"], b["token_type_ids"], rule)
        logits = o.logits.cpu()                                                            # (B, C)
        return list(zip(predictions(task, logits), o.layers.tolist(), logits.float()))
    split_batches = batches(split, EVAL_BATCH, bucket=True)
    rows = in_order([e.id for e in split.records], [b["ids"] for b in split_batches],
                    predict_batches(model, split_batches, step, device))
    return [r[0] for r in rows], [r[1] for r in rows], torch.stack([r[2] for r in rows])
