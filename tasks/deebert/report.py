"""The DeeBERT sweep's report (Xin et al., ACL 2020, sec. 4): the markdown table printed by python -m
tasks.deebert, and the files it writes into OUT: sweep.csv and sweep.json (one row per exit setting: quality,
exit layers, measured time against the model without exits), curve.png (quality against time saved, the
paper's Figure 2), exit_layers.png (exits per layer, Figure 6) and per_layer.png (each off-ramp's quality,
Figure 3), every file written atomically.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from ..core.evaluation import write_text
from ..core.figures import save_figure


def format_table(table: dict) -> str:
    """The sweep as a markdown table: one row per setting, the plain model and the ramps' own cost first; times
    are medians over the rounds with their range, savings the median over rounds of the same round's ratio."""
    head = (f"| setting | {table['metric']} | drop | mean exit layer | layers run | tokens run | time (s) [range] "
            f"| saved vs plain [range] | saved vs no exit [range] | same as plain |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    rows = table["rows"]
    lines = [head] + [
        f"| {r['setting']} | {r['quality']:.4f} | {r['quality_drop'] * 100:+.2f} | {r['mean_exit_layer']:.2f} "
        f"| {r['layers_run']:.1%} | {r['tokens_run']:.1%} | {r['seconds']:.2f} [{r['seconds_min']:.2f}-"
        f"{r['seconds_max']:.2f}] | {r['time_saved_rounds_median']:.1%} [{r['time_saved_rounds_min']:.1%}, "
        f"{r['time_saved_rounds_max']:.1%}] | {r['time_saved_vs_no_exit_rounds_median']:.1%} "
        f"[{r['time_saved_vs_no_exit_rounds_min']:.1%}, {r['time_saved_vs_no_exit_rounds_max']:.1%}] "
        f"| {r['same_as_plain']:.1%} |" for r in [rows[0], rows[-1], *rows[1:-1]]]
    return "\n".join(lines) + (f"\n\n{table['examples']} examples, batch {table['eval_batch_size']}, "
                               f"{table['rounds']} round(s) after an untimed pass, settings in a seeded random order "
                               f"per round; the off-ramps' own cost (every ramp evaluated, no exit): "
                               f"{table['ramp_cost']:+.1%} time against the plain model.")


def savings(seconds: list[float], against: list[float], key: str) -> dict:
    """Per round, the time saved against another setting timed in the same round, 1 - t / t_other; its median and
    spread (min, max) over the rounds, under key, key_median, key_min and key_max."""
    saved = [1 - a / b for a, b in zip(seconds, against)]
    return {key: saved, f"{key}_median": statistics.median(saved), f"{key}_min": min(saved), f"{key}_max": max(saved)}


def format_choice(chosen: dict, metric: str, select: object, report: object) -> str:
    """One line: the setting chosen on the selection split, its drop and time saved (median, spread) on the report."""
    return (f"chosen on {select.name} ({len(select.records)}): {chosen['setting']}; on {report.name} "
            f"({len(report.records)}): {metric} drop {chosen['quality_drop'] * 100:+.2f} points, time saved "
            f"{chosen['time_saved_rounds_median']:.1%} against plain (rounds {chosen['time_saved_rounds_min']:.1%} to "
            f"{chosen['time_saved_rounds_max']:.1%}), {chosen['time_saved_vs_no_exit_rounds_median']:.1%} against "
            f"no exit ({chosen['time_saved_vs_no_exit_rounds_min']:.1%} to "
            f"{chosen['time_saved_vs_no_exit_rounds_max']:.1%})")


def write_outputs(out: Path, table: dict, summary: dict, hist_settings: int = 4) -> None:
    """sweep.csv, sweep.json and the three figures."""
    keys = [k for k in table["rows"][0] if k not in ("seconds_all", "exit_histogram") and not k.endswith("_rounds")]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(keys + [f"exit_layer_{l + 1}" for l in range(table["num_layers"])])
    for r in table["rows"]:
        w.writerow([r[k] for k in keys] + r["exit_histogram"])
    write_text(out / "sweep.csv", buf.getvalue())
    write_text(out / "sweep.json", json.dumps(summary, indent=2))
    swept = table["rows"][1:-1]
    title = f"{summary['task']}, batch {table['eval_batch_size']}"
    plot_curve([{**r, "setting": r["value"]} for r in swept], out / "curve.png", table["metric"], title)
    picks = sorted({round(i * (len(swept) - 1) / max(hist_settings - 1, 1)) for i in range(hist_settings)})
    plot_exit_histograms({swept[i]["setting"]: swept[i]["exit_histogram"] for i in picks},
                         out / "exit_layers.png", title)
    plot_per_layer(summary["per_layer"], out / "per_layer.png", table["metric"], per_layer_title(summary))


def plot_curve(points: Sequence[dict], path: str | Path, quality: str, title: str = "") -> None:
    """The paper's Figure 2: quality against measured time saved (%), and against layers saved, as a PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot([p["time_saved"] * 100 for p in points], [p["quality"] for p in points], "o-", label="measured time saved")
    ax.plot([p["layers_saved"] * 100 for p in points], [p["quality"] for p in points], "s--", alpha=0.6,
            label="layers saved")
    ax.set_xlabel("time or layers saved (%) vs the plain model (no off-ramps)")
    label_points(fig, ax, [(f"{p['setting']:g}", p["time_saved"] * 100, p["quality"]) for p in points])
    ax.set_ylabel(quality)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


# Where a point's label may go, in points from it: up right first, then the other corners, further out.
LABEL_OFFSETS = [(3, 3), (3, -9), (-6, 5), (-6, -11), (3, 10), (3, -16), (-6, 12), (-6, -18)]


def label_points(fig, ax, labels: Sequence[tuple[str, float, float]]) -> None:
    """Label each point (text, x, y) at the first of LABEL_OFFSETS where the text lies inside the axes and overlaps
    no label placed before it; a label with no such place is left out (its neighbours say where it is)."""
    from matplotlib.transforms import Bbox
    ax.margins(x=0.08, y=0.1)                       # room inside the axes for the labels at the edges
    ax.autoscale_view()
    fig.tight_layout()                              # the layout _save draws, so the boxes measured stay as they are
    renderer = fig.canvas.get_renderer()
    inside, placed = ax.get_window_extent(renderer), []
    for text, x, y in labels:
        note = ax.annotate(text, (x, y), fontsize=7, textcoords="offset points", xytext=LABEL_OFFSETS[0])
        for offset in LABEL_OFFSETS:
            note.set_position(offset)
            box = note.get_window_extent(renderer).expanded(1.05, 1.1)
            within = Bbox.union([box, inside]).bounds == inside.bounds
            if within and not any(box.overlaps(b) for b in placed):
                placed.append(box)
                break
        else:
            note.remove()


def plot_exit_histograms(histograms: dict[str, Sequence[int]], path: str | Path, title: str = "") -> None:
    """The paper's Figure 6: how many samples leave at each layer, one panel per setting, as a PNG."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(histograms), figsize=(2.6 * len(histograms) + 0.6, 2.8), sharey=True,
                             squeeze=False)
    for ax, (name, counts) in zip(axes[0], histograms.items()):
        ax.bar(range(1, len(counts) + 1), counts)
        ax.set_xticks(range(1, len(counts) + 1))
        ax.set_xlabel("exit layer")
        ax.set_title(name, fontsize=9)
    axes[0][0].set_ylabel("samples")
    fig.suptitle(title, fontsize=10)
    _save(fig, path)


def per_layer_title(summary: dict) -> str:
    """per_layer.png's title: the task and the dev examples it was measured on (the report half, or the whole)."""
    half = "dev-report half" if summary.get("dev_protocol") == "halves" else "dev"
    return f"{summary['task']}, {half} ({summary['dev_report_examples']} examples)"


def plot_per_layer(values: Sequence[float], path: str | Path, quality: str, title: str = "") -> None:
    """The paper's Figure 3: each off-ramp's quality when every sample is forced to leave there, as a PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.plot(range(1, len(values) + 1), values, "o-")
    ax.set_xticks(range(1, len(values) + 1))
    ax.set_xlabel("exit layer")
    ax.set_ylabel(quality)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _save(fig, path)


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: str | Path) -> None:
    """The figure laid out and written (save_figure: the format its name says, atomically)."""
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
