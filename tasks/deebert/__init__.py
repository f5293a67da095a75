"""DeeBERT early exit (Xin et al., ACL 2020) on the CS224N tasks: two-stage fine-tuning, a sweep of exit
thresholds timed against the model without exits, the paper's figures, and prediction files.

    python -m tasks.deebert --task sst2 --out runs/deebert-sst2                      # batch 1, as the paper
    python -m tasks.deebert --from-run runs/deebert-sst2 --eval-batch-size 32 --out runs/deebert-sst2-b32
    python -m tasks.deebert --task sts --exit patience --out runs/deebert-sts        # PABEE's rule, a regression
    python -m tasks.deebert --resume runs/deebert-sst2                               # continue a killed run

The protocol (--dev-protocol halves, the default): a seeded half of dev selects the epochs of both stages and
the exit setting (the fewest layers within --max-drop), the other half is timed and reported, as the paper chose
S on dev and reported test; the sweep runs every setting, plain included, in a fresh seeded order in each of
--rounds rounds (5) after one untimed pass, and reports the median, the range, and the per-round time saved
against plain and against "no exit" (every off-ramp evaluated, no sample leaving).

sst2 is binary SST built as SST-2 was: labels 0-1 negative, 3-4 positive, 2 dropped (train and dev; the
unlabelled test file is predicted whole). The run directory (--run-dir, or --out, default
runs/deebert-TASK-DATE-TIME) holds run.json (the command and its full settings), stage1.pt and stage2.pt (fit
checkpoints after every epoch: --resume RUN_DIR continues a killed run to the same result; --from-run RUN_DIR
loads its trained model and only sweeps and predicts), sweep.csv and sweep.json, curve.png (quality against time
saved, Figure 2), exit_layers.png (Figure 6), per_layer.png (Figure 3), and predictions/{task}-{dev,test}-output.csv
at the chosen setting (sst2's in the binary Predicted_Sentiment format of cfimdb). `--print-config` prints the
settings as JSON, `--config FILE` reads them back.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path

import torch

import minbert
from minbert import deebert
from minbert.deebert import DeeBert

from ..core import training_setup
from ..core.batching import Split, batches, model_inputs, train_batches
from ..core.checkpoints import check_trained, load_checkpoint
from ..core.data import Records, unlabelled
from ..core.distributed import is_main_process
from ..core.errors import ConfigurationError, ResumeError
from ..core.evaluation import predict_batches, raw_path, write_raw
from ..core.progress import showing
from ..core.recipe import autocast
from ..core.resume import resume_config, stored_values
from ..core.run_files import same_place, trained_checkpoint
from ..core.runs import (
    RUN_FILE,
    STAGE2,
    RunPaths,
    config_file,
    own_paths,
    read_run_json,
    refuse_other_files,
    resume_base,
    rewrite_on_extension,
    run_paths,
    write_run_json,
)
from ..core.settings import build, dump, parse, parser_for, read_config
from ..core.train import FitOptions, Work, fit
from ..core.training_setup import start, write_split
from ..core.tree import STUDENT
from .report import format_choice, format_table, write_outputs
from .settings import DEFAULT_THRESHOLDS, NUM_LABELS, SOURCE, Settings, Sweep  # noqa: F401 (re-exported)
from .sweep import (
    EVAL_BATCH,
    choose,
    exit_predictions,
    exit_rules,
    predictions,
    quality,
    quality_table,
    split_halves,
    sweep_table,
)

BOARD = {"sst": "sst", "sst2": "cfimdb", "cfimdb": "cfimdb", "sts": "sts"}  # prediction-file format
STAGE1 = "stage1.pt"                                  # stage 1's checkpoint in a run; stage 2's: STAGE2


def to_sst2(records: Records) -> tuple[Records, int]:
    """Binary SST as SST-2 (Socher et al., 2013): 0-1 -> 0, 3-4 -> 1, neutral (2) dropped; (records, dropped)."""
    if not records.labelled:
        return records, 0
    kept = [dataclasses.replace(e, label=int(e.label >= 3)) for e in records if e.label != 2]
    return Records(kept, records.path, True, records.skipped), len(records) - len(kept)


def load_split(name: str, path: str | Path, task: str, tokenizer: minbert.Tokenizer, limit: int | None = None,
               seed: int = 0) -> Split:
    """Read a split of a task (sst2 mapped from SST); with `limit`, a seeded random sample of that many rows."""
    def convert(records: Records) -> Records:
        records, dropped = to_sst2(records)
        if dropped:
            print(f"{path}: sst2 leaves out {dropped} neutral rows (label 2)", file=sys.stderr)
        return records
    return training_setup.load_split(name, path, SOURCE[task], tokenizer, limit, seed, convert if task == "sst2" else None)


def stage1_loss(model: DeeBert, batch: dict) -> torch.Tensor:
    """Stage 1: the ordinary fine-tuning loss of the last off-ramp."""
    return deebert.ramp_loss(model(**model_inputs(batch)), batch["labels"])


def stage2_loss(model: DeeBert, batch: dict) -> torch.Tensor:
    """Stage 2: the sum of off-ramps 1..n-1's losses on the frozen backbone's hidden states."""
    return deebert.offramp_loss(model.stage2_logits(**model_inputs(batch)), batch["labels"])


def layer_scores(model: DeeBert, task: str, split_batches: list[dict], device: torch.device) -> list[float]:
    """Every off-ramp's dev quality when all samples are forced to leave there (the paper's Figure 3)."""
    logits = predict_batches(model, split_batches, lambda m, b: m.all_logits(**model_inputs(b)).cpu(),
                             device)                                                    # each (L, B, C)
    labels = [y for b in split_batches for y in b["labels"].tolist()]
    z = torch.cat(logits, dim=1)                                                        # (L, N, C)
    return [quality(task, predictions(task, z[l]), labels) for l in range(z.shape[0])]


def reach_the_sweep(model: DeeBert, task: str, sweep: Sweep, device: torch.device) -> None:
    """In a student tree, before any training: the sweep's functions of minbert/deebert.py (early_exit, and the exit
    rule's step: entropy for --exit entropy) on one two-token sample, so that one not written yet stops the run now
    with the line naming it (run_cli), not after both stages have trained. In eval mode: no dropout, no RNG drawn."""
    rules, no_exit = exit_rules(sweep, model.num_layers)
    rule = next(iter(rules.values()), no_exit)
    ids = torch.zeros(1, 2, dtype=torch.long, device=device)                   # (1, 2): [PAD] [PAD], all attended
    was_training = model.training
    model.eval()
    try:
        deebert.early_exit(model, ids, torch.ones_like(ids), torch.zeros_like(ids), rule)
        rule.step(torch.zeros(1, NUM_LABELS[task], device=device), rule.start(1, device))
    finally:
        model.train(was_training)


def build_model(settings: Settings) -> DeeBert:
    """The DeeBERT model the settings describe: the encoder of --model (with --attention's kernel) and its
    off-ramps."""
    return DeeBert(minbert.load_pretrained(settings.training.model,
                                           attn_implementation=settings.recipe.attn_implementation),
                   settings.ramp_config())


def train(settings: Settings, model: DeeBert, train_split: Split, dev_batches: list[dict], device: torch.device,
          stages: tuple[Path, Path], resumed: bool,
          extended: Callable[[list[str] | None], None] | None = None) -> dict:
    """Both stages through tasks.core.train.fit, each keeping its best dev epoch (DeeBERT, sec. 3.1); a resumed run
    continues each stage from its checkpoint, where it has one (`extended`: FitOptions.extended)."""
    task, tr, recipe = settings.task, settings.training, settings.recipe
    metric = "pearson" if task == "sts" else "accuracy"
    config = resume_config(settings) | {"command": "deebert"}

    def epoch_batches(epoch: int) -> list[dict]:
        return train_batches(train_split, tr.batch_size, tr.seed, epoch, tr.bucket)

    def last_ramp(m: DeeBert) -> dict[str, float]:
        preds = predict_batches(m, dev_batches, lambda net, b: predictions(task, net(**model_inputs(b)).cpu()),
                                device)
        labels = [y for b in dev_batches for y in b["labels"].tolist()]
        return {metric: quality(task, [p for ps in preds for p in ps], labels)}

    def ramps(m: DeeBert) -> dict[str, float]:
        scores = layer_scores(m, task, dev_batches, device)
        return {f"{metric}_ramps": statistics.mean(scores[:-1]), **{f"{metric}_layer{i + 1}": s
                                                                     for i, s in enumerate(scores)}}

    def resume(path: Path) -> Path | None:  # a stage whose checkpoint exists goes on from it
        return path if resumed and path.is_file() else None

    fixed = ("its schedule would be laid out again, which DeeBERT's run.json cannot replay (two stages, one recipe)"
             if recipe.warmup_ratio is not None or recipe.gradual_unfreezing > 0 else None)
    opt = recipe.optimizer_for(model, deebert.stage1_parameters(model), tr.lr, tr.weight_decay)
    first = fit(Work(model, opt, epoch_batches, stage1_loss, last_ramp, metric), recipe,
                FitOptions(tr.epochs, device, tr.seed, stages[0], resume(stages[0]), config | {"stage": 1},
                           fixed_epochs=fixed, part="stage 1", extended=extended, **settings.run.loop_options()))
    model.load_state_dict(first.best_state)
    opt = recipe.optimizer_for(model, deebert.stage2_parameters(model), settings.ramps.ramp_lr,
                             tr.weight_decay)
    ramp_epochs = settings.ramps.ramp_epochs or tr.epochs
    second = fit(Work(model, opt, epoch_batches, stage2_loss, ramps, f"{metric}_ramps"), recipe,
                 FitOptions(ramp_epochs, device, tr.seed + 1, stages[1], resume(stages[1]), config | {"stage": 2},
                            fixed_epochs=fixed, part="stage 2", extended=extended, **settings.run.loop_options()))
    model.load_state_dict(second.best_state)
    return {"stage1": {"best_epoch": first.best_epoch, f"dev_{metric}": first.best_score, "history": first.history},
            "stage2": {"best_epoch": second.best_epoch, f"dev_{metric}_ramps": second.best_score,
                       "history": second.history}}


def load_trained(model: DeeBert, settings: Settings) -> Path:
    """The best state of a finished run's stage 2 (--from-run), which must describe the same model."""
    path = trained_checkpoint(settings.sweep.from_run)
    if not path.is_file():
        raise ResumeError(f"{settings.sweep.from_run}: no trained DeeBERT model ({path} is missing: its stage 2 "
                          "never finished an epoch)")
    state = check_trained(load_checkpoint(path), path, settings.sweep.from_run)
    was = build(Settings, stored_values(Settings, state.get("config", {})))   # flat names of older ones too
    owner = path.parent if (path.parent / RUN_FILE).is_file() else Path(settings.sweep.from_run)   # that trained it
    record = owner / RUN_FILE                             # a relative --model: from the folder that run started in
    start = read_run_json(owner).get("cwd") if record.is_file() else None
    diffs = [f"{k}: {a!r} there, {b!r} now" for k, a, b in _model_fields(was, settings)
             if not (same_place(a, b, start) if k == "model" else a == b)]
    if state.get("config", {}).get("stage") != 2 or diffs:
        raise ConfigurationError(f"{path}: not a trained DeeBERT model for this run"
                                 + (f" ({'; '.join(diffs)})" if diffs else " (no stage-2 checkpoint)"))
    model.load_state_dict(state["best_state"])
    return path


def _model_fields(a: Settings, b: Settings) -> list[tuple[str, object, object]]:
    """What must agree for a trained model to be this run's: the task, the checkpoint, the off-ramps' config."""
    ca, cb = dataclasses.asdict(a.ramp_config()), dataclasses.asdict(b.ramp_config())
    return [("task", a.task, b.task), ("model", a.training.model, b.training.model)] + [
        (k, ca[k], cb[k]) for k in ca if k != "num_labels"]


def run(settings: Settings) -> dict:
    """Train both stages (or load a trained model), sweep the exit setting on dev, write tables, figures, files."""
    task, tr = settings.task, settings.training
    sweep = settings.sweep.resolved(task)
    paths = run_paths(settings.run, "deebert", task, checkpoint_name=STAGE1)   # stage 1's: what a resume needs
    device, tokenizer, recipe = start(settings.run.device, settings.run.threads, tr.seed, tr.model, tr.max_length,
                                      settings.recipe)       # --precision auto resolved, and said once
    settings = replace(settings, recipe=recipe)
    dev = load_split("dev", settings.files.path(task, "dev"), task, tokenizer, settings.max_eval_examples, tr.seed)
    test = load_split("test", settings.files.path(task, "test"), task, tokenizer, settings.max_eval_examples, tr.seed)
    if not dev.records.labelled:
        raise unlabelled(dev.records.path, SOURCE[task])

    model = build_model(settings)
    model.bert.gradient_checkpointing = tr.gradient_checkpointing
    model.to(device)
    if STUDENT:
        reach_the_sweep(model, task, sweep, device)
    select, report = split_halves(dev, tr.seed) if settings.dev_protocol == "halves" else (dev, dev)
    dev_batches = batches(select, EVAL_BATCH, bucket=True)
    summary: dict = {"task": task, "model": tr.model, "exit": sweep.exit, "dev_protocol": settings.dev_protocol,
                     "dev_select_examples": len(select.records), "dev_report_examples": len(report.records),
                     "settings": dump(settings), "run_dir": str(paths.dir)}
    trained = load_trained(model, settings) if settings.sweep.from_run is not None else None
    if trained is None:
        train_split = load_split("train", settings.files.path(task, "train"), task, tokenizer, tr.max_train_examples,
                                 tr.seed)
        if not train_split.records.labelled:
            raise unlabelled(train_split.records.path, SOURCE[task])
    if is_main_process() and paths.resume is None:   # every file read: its data_files; a resumed run's, at its end
        write_run_json(paths, "deebert", settings)
    if trained is not None:
        summary["from_run"] = str(trained)
    else:
        print(f"{task}: {len(train_split.records)} train, {len(dev.records)} dev ({len(select.records)} select "
              f"the epochs and the setting, {len(report.records)} report), {len(test.records)} test; "
              f"{model.num_layers} off-ramps; device {device}; run {paths.dir}", file=sys.stderr)
        summary["training"] = train(settings, model, train_split, dev_batches, device,
                                    (paths.checkpoint, paths.dir / STAGE2), paths.resume is not None,
                                    rewrite_on_extension(paths, "deebert", settings))
    model.eval()
    with autocast(device, settings.recipe.precision):  # as fit() evaluated
        sweep_and_predict(settings, sweep, model, (dev, test, select, report), device, paths, summary)
    result = {k: summary.get(k) for k in ("prediction_setting", "dev_quality", "test_quality", "metric", "from_run")}
    result["chosen"] = (summary.get("chosen") or {}).get("setting")
    result["training"] = {stage: {k: v for k, v in s.items() if k != "history"}
                          for stage, s in summary.get("training", {}).items()}
    if is_main_process():
        write_run_json(paths, "deebert", settings, result=result)
    return summary


def sweep_and_predict(settings: Settings, sweep: Sweep, model: DeeBert, splits: tuple[Split, Split, Split, Split],
                      device: torch.device, paths: RunPaths, summary: dict) -> None:
    """The timed sweep on the report half, the setting chosen on the selection half, the prediction files at it,
    the tables and figures; all into `summary`. `sweep` is settings.sweep resolved for the task."""
    task = settings.task
    dev, test, select, report = splits
    report_batches = batches(report, EVAL_BATCH, bucket=True)
    summary["per_layer"] = layer_scores(model, task, report_batches, device)
    table = sweep_table(task, sweep, model, report, device, settings.run.eval_batch_size,
                        settings.training.seed, settings.run.progress)
    summary.update(table)
    print(format_table(table))
    print(f"forced exit at each layer ({report.name} " + table["metric"] + "): "
          + ", ".join(f"{l + 1}: {s:.4f}" for l, s in enumerate(summary["per_layer"])))
    if sweep.threshold is not None:
        value = sweep.threshold
    else:
        summary["selection"] = quality_table(task, sweep, model, select, device)
        value = choose(summary["selection"], sweep.max_drop)["value"]
    summary["prediction_setting"] = value
    summary["chosen"] = next((r for r in table["rows"][1:-1] if r["value"] == value), None)
    if summary["chosen"] is not None:
        print(format_choice(summary["chosen"], table["metric"], select, report))
    for split in (dev, test):
        with showing(split.name, settings.run.progress):   # a progress bar over its batches
            preds, layers, logits = exit_predictions(model, task, split, sweep.rule(value), device)
        at = (f" at {'S' if sweep.exit == 'entropy' else 'P'}={value:g}: mean exit layer "
              f"{statistics.mean(layers):.2f} of {model.num_layers}")
        if settings.run.raw_outputs:
            write_raw(raw_path(paths.predictions, task, split.name), [e.id for e in split.records], logits)
        q = write_split(paths.predictions / f"{task}-{split.name}-output.csv", BOARD[task], split.records, preds,
                        f"{split.name} {table['metric']}", lambda p, y: quality(task, p, y), after=at, sep=", ")
        if q is not None:
            summary[f"{split.name}_quality"] = q
    write_outputs(paths.dir, table, summary)
    print(f"wrote {paths.dir}/sweep.csv, sweep.json, curve.png, exit_layers.png, per_layer.png")


def build_parser() -> argparse.ArgumentParser:
    """The command line: Settings' flags, --config and --print-config."""
    return parser_for(Settings, "python -m tasks.deebert", __doc__)


def start_from(resume: str | None, resume_training: bool, run_dir: str | None, from_run: str | None,
               replaced: Collection[str] = ()) -> dict:
    """Where the settings start ({dotted path: value}): a resumed run's run.json (--resume DIR, or --resume-training
    with --out DIR), or the run.json of the run whose trained model --from-run loads (all but where that run wrote)."""
    if resume is None and resume_training:
        resume = run_dir
        if resume is None:
            raise ConfigurationError("--resume-training: give the run's directory with --out DIR (or --resume DIR)")
    if resume is not None and from_run is not None:
        raise ConfigurationError("--resume continues training and --from-run loads a trained model: give one")
    if resume is not None:
        where = Path(resume)
        if where.is_dir() and not (where / RUN_FILE).is_file() and (where / STAGE2).is_file():
            raise ResumeError(f"{resume}: a DeeBERT run written before run directories (no {RUN_FILE}): --resume "
                              f"continues training now; to load its trained model and sweep it, give --from-run "
                              f"{resume}")
        return resume_base(str(resume), Settings, replaced) | {"run.resume": str(resume)}
    if from_run is not None:
        directory = Path(from_run) if Path(from_run).is_dir() else Path(from_run).parent
        if (directory / RUN_FILE).is_file():
            return {k: v for k, v in read_config(directory / RUN_FILE, Settings, replaced).items()
                    if not k.startswith("run.")}
    return {}


def parse_settings(argv: list[str] | None = None) -> Settings:
    """The settings from the command line, --config, and --resume DIR's or --from-run DIR's run.json. A run's run.json
    given as --config for a new run in another directory leaves out its --predictions-dir (as parse_run does)."""
    given: dict = {}

    def base(flags: dict) -> dict:
        given.update(flags)
        resume = flags.get("run.resume") or (flags.get("run.run_dir") if flags.get("run.resume_training") else None)
        refuse_other_files(resume, flags, Settings)
        return start_from(*(flags.get(k) for k in ("run.resume", "run.resume_training", "run.run_dir",
                                                   "sweep.from_run")), replaced=set(flags))

    config = config_file(list(sys.argv[1:] if argv is None else argv))
    return parse(Settings, argv, prog="python -m tasks.deebert", description=__doc__, base=base,
                 finish=lambda settings: own_paths(settings, given, config))


def main(argv: list[str] | None = None) -> int:
    run(parse_settings(argv))
    return 0

