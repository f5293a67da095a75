"""What a search leaves in STUDY_DIR after every finished trial: best.json (the best trial's settings, a --config file),
trials.csv and trials.md (one row per trial), history.png and importances.png (Optuna's matplotlib plots).

Every file is written to a temporary name and renamed, so a killed search (or two workers writing at once) leaves
whole files. The importances are PED-ANOVA's (Watanabe et al., IJCAI 2023), which needs no scikit-learn.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import warnings
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from ..core.evaluation import write_text
from ..core.figures import save_figure
from ..core.runs import RUN_FILE, read_run_json

FIXED_COLUMNS = ("number", "state", "value")
TAIL_COLUMNS = ("epochs", "seconds", "run_dir")


def param_names(trials: list[Any]) -> list[str]:
    """Every param of the study, in the order trials first sampled them."""
    names: dict[str, None] = {}
    for t in trials:
        names.update(dict.fromkeys(t.params))
    return list(names)


def rows(trials: list[Any]) -> list[dict[str, Any]]:
    """One row per trial: its number, state, value, each param, epochs reported, seconds, run directory."""
    out = []
    for t in sorted(trials, key=lambda t: t.number):
        end = t.datetime_complete or (datetime.now() if t.datetime_start is not None else None)
        seconds = round((end - t.datetime_start).total_seconds(), 1) if t.datetime_start is not None else None
        if t.user_attrs.get("recorded"):               # a run made before the search: its own training time
            seconds = t.user_attrs.get("seconds")
        out.append({"number": t.number, "state": t.state.name, "value": t.value, **t.params,
                    "epochs": len(t.intermediate_values), "seconds": seconds, "run_dir": t.user_attrs.get("run_dir")})
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


def csv_text(table: list[dict[str, Any]], columns: list[str]) -> str:
    """trials.csv: the full precision of every value."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    return out.getvalue()


def markdown(table: list[dict[str, Any]], columns: list[str], best: int | None) -> str:
    """trials.md: a Markdown table, the best trial's number in bold."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in table:
        cells = [_cell(row.get(c)) for c in columns]
        if row["number"] == best:
            cells[0] = f"**{cells[0]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(table: list[dict[str, Any]], columns: list[str], top: int = 10) -> str:
    """The `top` best trials (completed first, by value) as an aligned text table, and a count of every state."""
    order = sorted(table, key=lambda r: (r["state"] != "COMPLETE", -(r["value"] if r["value"] is not None else
                                                                       -math.inf), r["number"]))
    shown = [c for c in columns if c != "run_dir"]
    cells = [shown] + [[_cell(r.get(c)) for c in shown] for r in order[:top]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(shown))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    states = Counter(r["state"].lower() for r in table)
    more = f" (the best {top} above; all in trials.md)" if len(table) > top else ""
    return "\n".join(lines + [f"{len(table)} trials: " + ", ".join(f"{n} {s}" for s, n in states.items()) + more])


def best_settings(best: Any) -> dict:
    """The best trial's full settings as its run.json holds them (else as the trial stored them), run_dir cleared."""
    run_dir = best.user_attrs.get("run_dir")
    if run_dir is not None and (Path(run_dir) / RUN_FILE).is_file():
        settings = read_run_json(run_dir)["settings"]
    elif "settings" in best.user_attrs:               # its run directory is on another machine
        settings = copy.deepcopy(best.user_attrs["settings"])
    else:
        raise UserError(f"trial {best.number}: neither its run directory ({run_dir}) nor its stored settings")
    settings["run"]["run_dir"] = None
    return settings


def _save(fig: Any, path: Path) -> None:
    """A figure as a PNG, atomically (save_figure)."""
    save_figure(fig, path, dpi=120, bbox_inches="tight")


def plots(optuna: Any, study: Any, trials: list[Any], study_dir: Path) -> list[str]:
    """history.png and importances.png; a line for each plot not drawn (and why)."""
    import matplotlib
    matplotlib.use("Agg")
    from optuna.visualization import matplotlib as ovm

    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    varying = [name for name in param_names(done) if len({repr(t.params.get(name)) for t in done}) > 1]
    target = next((t.user_attrs["metric"].replace("_", " ") for t in done if "metric" in t.user_attrs), "dev score")
    notes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if not done:
            notes.append("history.png: not drawn yet (no completed trial)")
        else:
            _save(ovm.plot_optimization_history(study, target_name=target).figure, study_dir / "history.png")
        if len(done) < 2 or not varying:
            notes.append("importances.png: not drawn yet (it needs 2 completed trials and a param that varies)")
        else:
            evaluator = optuna.importance.PedAnovaImportanceEvaluator()
            warnings.simplefilter("ignore", UserWarning)     # few trials: "importances will be equal"; said below
            if len(done) < 10:
                notes.append(f"importances.png: from {len(done)} completed trials; PED-ANOVA compares the best 10% "
                             "with the rest, so read it after 10 or more")
            _save(ovm.plot_param_importances(study, evaluator=evaluator, params=varying, target_name=target).figure,
                  study_dir / "importances.png")
    return notes


def write_reports(optuna: Any, study: Any, study_dir: Path) -> tuple[str, list[str]]:
    """best.json, trials.csv, trials.md and the plots, from the storage's trials now; the summary table and notes."""
    study_dir.mkdir(parents=True, exist_ok=True)
    trials = study.get_trials(deepcopy=False)
    table = rows(trials)
    columns = [*FIXED_COLUMNS, *param_names(trials), *TAIL_COLUMNS]
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    best = max(done, key=lambda t: t.value) if done else None
    notes = []
    if best is not None:
        write_text(study_dir / "best.json", json.dumps(best_settings(best), indent=2) + "\n")
    else:
        notes.append("best.json: not written yet (no completed trial)")
    write_text(study_dir / "trials.csv", csv_text(table, columns))
    write_text(study_dir / "trials.md", markdown(table, columns, best.number if best is not None else None))
    notes += plots(optuna, study, trials, study_dir)
    return summary(table, columns), notes
