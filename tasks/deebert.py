"""DeeBERT early exit (Xin et al., ACL 2020) on the CS224N tasks: two-stage fine-tuning, a sweep of exit
thresholds timed against the model without exits, the paper's figures, and prediction files.

    python -m tasks.deebert --task sst2 --out runs/deebert-sst2                      # batch 1, as the paper
    python -m tasks.deebert --task sst2 --resume runs/deebert-sst2 --eval-batch-size 32 --out runs/deebert-sst2-b32
    python -m tasks.deebert --task sts --exit patience --out runs/deebert-sts        # PABEE's rule, a regression

The protocol (--dev-protocol halves, the default): a seeded half of dev selects the epochs of both stages and
the exit setting (the fewest layers within --max-drop), the other half is timed and reported, as the paper chose
S on dev and reported test; the sweep runs every setting, plain included, in a fresh seeded order in each of
--rounds rounds (5) after one untimed pass, and reports the median, the range, and the per-round time saved
against plain and against "no exit" (every off-ramp evaluated, no sample leaving).

sst2 is binary SST built as SST-2 was: labels 0-1 negative, 3-4 positive, 2 dropped (train and dev; the
unlabelled test file is predicted whole). OUT gets stage1.pt and stage2.pt (fit checkpoints; --resume
loads the trained model from stage2.pt), sweep.csv and sweep.json, curve.png (quality against time saved,
Figure 2), exit_layers.png (Figure 6), per_layer.png (Figure 3), and predictions/{task}-{dev,test}-output.csv
at the chosen setting (sst2's in the binary Predicted_Sentiment format of cfimdb).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import torch

import minbert
from minbert import deebert
from minbert.deebert import DeeBert, DeeBertConfig, EntropyExit, PatienceExit

from . import cli
from .checkpoints import load_checkpoint
from .cli import ListFlag, Split, add_common_arguments, run_settings, setup, write_split
from .data import TASKS, Collator, Records, batches, model_inputs, to_device
from .deebert_report import format_choice, format_table, write_outputs
from .deebert_sweep import (
    EVAL_BATCH,
    NUM_LABELS,
    choose,
    exit_predictions,
    predictions,
    quality,
    quality_table,
    split_halves,
    sweep_table,
)
from .errors import existing_file, existing_path, nonnegative_float, positive_float, positive_int, probability, run_cli
from .recipe import autocast, loop_kwargs, make_optimizer
from .train import fit

SOURCE = {"sst": "sst", "sst2": "sst", "cfimdb": "cfimdb", "sts": "sts"}   # which files a task reads
BOARD = {"sst": "sst", "sst2": "cfimdb", "cfimdb": "cfimdb", "sts": "sts"}  # prediction-file format
DEFAULT_THRESHOLDS = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7]
MODEL_KEYS = ("task", "model", "pooling", "ramp_pooler")   # what a resumed model must agree on


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
    return cli.load_split(name, path, SOURCE[task], tokenizer, limit, seed, convert if task == "sst2" else None)


def stage1_loss(model: DeeBert, batch: dict) -> torch.Tensor:
    """Stage 1: the ordinary fine-tuning loss of the last off-ramp."""
    return deebert.ramp_loss(model(**model_inputs(batch)), batch["labels"])


def stage2_loss(model: DeeBert, batch: dict) -> torch.Tensor:
    """Stage 2: the sum of off-ramps 1..n-1's losses on the frozen backbone's hidden states."""
    return deebert.offramp_loss(model.stage2_logits(**model_inputs(batch)), batch["labels"])


@torch.no_grad()
def layer_scores(model: DeeBert, task: str, split_batches: list[dict], device: torch.device) -> list[float]:
    """Every off-ramp's dev quality when all samples are forced to leave there (the paper's Figure 3)."""
    model.eval()
    logits, labels = [], []
    for b in split_batches:
        logits.append(model.all_logits(**model_inputs(to_device(b, device))).cpu())    # (L, B, C)
        labels += b["labels"].tolist()
    z = torch.cat(logits, dim=1)                                                        # (L, N, C)
    return [quality(task, predictions(task, z[l]), labels) for l in range(z.shape[0])]


def train(args: argparse.Namespace, model: DeeBert, train_split: Split, dev_batches: list[dict], collate: Collator,
          device: torch.device, out: Path, config: dict) -> dict:
    """Both stages through tasks.train.fit, each keeping its best dev epoch (DeeBERT, sec. 3.1)."""
    metric = "pearson" if args.task == "sts" else "accuracy"

    def epoch_batches(epoch: int) -> list[dict]:
        return batches(train_split.records, collate, args.batch_size, shuffle=True,
                       seed=args.seed * 1_000_003 + epoch, bucket=True, lengths=train_split.lengths)

    def last_ramp(m: DeeBert) -> dict[str, float]:
        preds, labels = [], []
        for b in dev_batches:
            preds += predictions(args.task, m(**model_inputs(to_device(b, device))).cpu())
            labels += b["labels"].tolist()
        return {metric: quality(args.task, preds, labels)}

    def ramps(m: DeeBert) -> dict[str, float]:
        scores = layer_scores(m, args.task, dev_batches, device)
        return {f"{metric}_ramps": statistics.mean(scores[:-1]), **{f"{metric}_layer{i + 1}": s
                                                                     for i, s in enumerate(scores)}}

    def resume(name: str) -> Path | None:  # --resume-training: a stage whose checkpoint exists goes on from it
        return out / name if args.resume_training and (out / name).is_file() else None

    opt = make_optimizer(deebert.stage1_parameters(model), args.lr, args.weight_decay, args.optimizer)
    first = fit(model, opt, epoch_batches, stage1_loss, last_ramp, metric=metric, epochs=args.epochs, device=device,
                seed=args.seed, checkpoint=out / "stage1.pt", config=config | {"stage": 1}, progress=args.progress,
                resume=resume("stage1.pt"), **loop_kwargs(args))
    model.load_state_dict(first.best_state)
    opt = make_optimizer(deebert.stage2_parameters(model), args.ramp_lr, args.weight_decay, args.optimizer)
    second = fit(model, opt, epoch_batches, stage2_loss, ramps, metric=f"{metric}_ramps", epochs=args.ramp_epochs,
                 device=device, seed=args.seed + 1, checkpoint=out / "stage2.pt", config=config | {"stage": 2},
                 progress=args.progress, resume=resume("stage2.pt"), **loop_kwargs(args))
    model.load_state_dict(second.best_state)
    return {"stage1": {"best_epoch": first.best_epoch, f"dev_{metric}": first.best_score, "history": first.history},
            "stage2": {"best_epoch": second.best_epoch, f"dev_{metric}_ramps": second.best_score,
                       "history": second.history}}


def load_trained(model: DeeBert, path: str | Path, config: dict) -> Path:
    """The best state of a finished run's stage 2 (its checkpoint, or the --out directory holding stage2.pt)."""
    path = Path(path)
    if path.is_dir():
        path = path / "stage2.pt"
    state = load_checkpoint(path)
    stored = state.get("config", {})
    diffs = [f"{k}: {stored.get(k)!r} there, {config.get(k)!r} now" for k in MODEL_KEYS if stored.get(k) != config.get(k)]
    if stored.get("stage") != 2 or diffs:
        raise SystemExit(f"{path}: not a trained DeeBERT model for this run"
                         + (f" ({'; '.join(diffs)})" if diffs else " (no stage-2 checkpoint)"))
    model.load_state_dict(state["best_state"])
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tasks.deebert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=sorted(NUM_LABELS), default="sst2",
                   help="sst (5 classes), sst2 (binary SST: 0-1 negative, 3-4 positive, 2 dropped), cfimdb (binary), "
                        "sts (similarity regression; exits by patience)")
    p.add_argument("--no-ramp-pooler", dest="ramp_pooler", action="store_false",
                   help="off-ramps without the copy of the pretrained pooler (dense + tanh): dropout + linear only")
    p.add_argument("--dropout", type=probability, default=None, help="dropout before each off-ramp's classifier "
                                                               "(default: the model's, 0.1)")
    p.add_argument("--ramp-epochs", type=positive_int, default=None,
                   help="stage 2 epochs: off-ramps 1..n-1 (default: --epochs)")
    p.add_argument("--ramp-lr", type=positive_float, default=1e-3,
                   help="stage 2 learning rate, off-ramps only on a frozen encoder (default 1e-3, as a frozen "
                        "encoder's head)")
    p.add_argument("--weight-decay", type=nonnegative_float, default=0.0,
                   help="AdamW's decoupled weight decay (default 0)")
    p.add_argument("--exit", choices=["entropy", "patience"], default=None,
                   help="exit rule: entropy below S (DeeBERT; default for classification) or the prediction "
                        "unchanged for P layers (PABEE; default for sts)")
    p.add_argument("--thresholds", action=ListFlag, item=float, default=None, metavar="S",
                   help=f"entropy thresholds S to sweep, comma- or space-separated (default: the paper's {' '.join(f'{t:g}' for t in DEFAULT_THRESHOLDS)}"
                        " for two classes, times ln C / ln 2 for C classes, or / ln 2 with --normalize-entropy: "
                        "from no exit to every sample leaving at layer 1)")
    p.add_argument("--normalize-entropy", action="store_true", help="divide the entropy by ln C (S then in [0, 1])")
    p.add_argument("--patience", action=ListFlag, item=int, default=None, metavar="P",
                   help="patience values P to sweep with --exit patience, comma- or space-separated (default 1 .. L-2)")
    p.add_argument("--change-threshold", type=float, default=0.1,
                   help="patience on a regression: a change below this counts as unchanged (default 0.1, on 0-5)")
    p.add_argument("--threshold", type=float, default=None,
                   help="the setting (S, or P with --exit patience) of the prediction files (default: the swept "
                        "setting with the fewest layers run whose dev quality drop is at most --max-drop)")
    p.add_argument("--max-drop", type=float, default=0.005,
                   help="largest dev quality drop against the plain model when choosing the setting (default 0.005)")
    p.add_argument("--rounds", type=positive_int, default=5, help="timing rounds of the sweep, each setting (plain included) "
                   "in a fresh seeded order per round, after one untimed pass of all; the median and the spread "
                   "are reported (default 5)")
    p.add_argument("--dev-protocol", choices=("halves", "same"), default="halves",
                   help="halves (default): a seeded half of dev selects the epochs and the exit setting, the other "
                        "half is timed and reported (as the paper chose S on dev and reported test); same: the "
                        "whole dev set does both (selection and report on the same examples: optimistic)")
    p.add_argument("--max-eval-examples", type=positive_int, default=None,
                   help="use a seeded random sample of N dev (and N test) examples (quick runs)")
    p.add_argument("--train-file", default=None, type=existing_file,
                   help="training file (default: DATA_DIR's file of the task)")
    p.add_argument("--dev-file", default=None, type=existing_file, help="dev file: model selection and the sweep")
    p.add_argument("--test-file", default=None, type=existing_file,
                   help="test file to predict (scored too if labelled)")
    p.add_argument("--out", default=None, help="output directory (default: runs/deebert-{task})")
    p.add_argument("--resume-training", action="store_true",
                   help="continue a killed run from the checkpoints in --out (stage1.pt, stage2.pt, written after "
                        "each epoch) to the same result as an uninterrupted run; the settings must be the same")
    add_common_arguments(
        p, pooling={"choices": deebert.RAMP_POOLINGS, "help": "the off-ramps' input: the mean of a layer's real tokens "
                    "(default, the offline MiniLM is a mean-pooling model) or the [CLS] state (the paper)"},
        epochs={"help": "stage 1 epochs: encoder and last off-ramp (default 3)"},
        lr={"default": 3e-5, "help": "stage 1 learning rate (default 3e-5)"},
        eval_batch_size={"default": 1, "help": "batch size of the timed sweep: 1 is the paper's setting; larger uses "
                                               "batched exit"},
        max_train_examples={"help": "train on a seeded random sample of N"},
        resume={"type": existing_path, "help": "skip training: load the model trained by an earlier run (its --out "
                "directory or its stage2.pt); the task, model, pooling and pooler must be the same"},
        progress={"help": "no progress bars or timing log"})
    return p


# the sweep's settings: a resumed or reloaded model may be swept with others
SWEEP_SETTINGS = ("rounds", "threshold", "resume_training", "max_drop", "thresholds", "patience", "exit",
                  "normalize_entropy", "change_threshold")


def settle(args: argparse.Namespace) -> None:
    """The defaults that depend on other flags: the exit rule by task, stage 2's epochs, the thresholds by classes."""
    if args.exit is None:
        args.exit = "patience" if args.task == "sts" else "entropy"
    if args.exit == "entropy" and args.task == "sts":
        raise SystemExit("--exit entropy needs classes; sts is a regression: use --exit patience")
    args.ramp_epochs = args.epochs if args.ramp_epochs is None else args.ramp_epochs
    if args.thresholds is None:
        scale = 1.0 if args.normalize_entropy else math.log(max(NUM_LABELS[args.task], 2))
        args.thresholds = [round(t * scale / math.log(2), 4) for t in DEFAULT_THRESHOLDS]


def run(args: argparse.Namespace) -> dict:
    """Train both stages (or load a trained model), sweep the exit setting on dev, write tables, figures, files."""
    settle(args)
    device, tokenizer = setup(args)
    out = Path(args.out or f"runs/deebert-{args.task}")
    files = TASKS[SOURCE[args.task]]
    dev = load_split("dev", args.dev_file or files.path(args.data_dir, "dev"), args.task, tokenizer,
                     args.max_eval_examples, args.seed)
    test = load_split("test", args.test_file or files.path(args.data_dir, "test"), args.task, tokenizer,
                      args.max_eval_examples, args.seed)
    if not dev.records.labelled:
        raise SystemExit(f"{dev.records.path}: the dev file must have labels")
    collate = Collator(tokenizer, float_labels=args.task == "sts")
    config = run_settings(args, SWEEP_SETTINGS)

    model = DeeBert(minbert.load_pretrained(args.model), DeeBertConfig(NUM_LABELS[args.task], args.pooling,
                                                                       args.ramp_pooler, args.dropout))
    model.to(device)
    select, report = split_halves(dev, args.seed) if args.dev_protocol == "halves" else (dev, dev)
    dev_batches = batches(select.records, collate, EVAL_BATCH, bucket=True, lengths=select.lengths)
    summary: dict = {"task": args.task, "model": args.model, "exit": args.exit, "dev_protocol": args.dev_protocol,
                     "dev_select_examples": len(select.records), "dev_report_examples": len(report.records),
                     "settings": {k: v for k, v in vars(args).items() if k != "thresholds" or args.exit == "entropy"}}
    if args.resume:
        summary["resumed_from"] = str(load_trained(model, args.resume, config))
    else:
        train_split = load_split("train", args.train_file or files.path(args.data_dir, "train"), args.task, tokenizer,
                                 args.max_train_examples, args.seed)
        if not train_split.records.labelled:
            raise SystemExit(f"{train_split.records.path}: the training file must have labels")
        print(f"{args.task}: {len(train_split.records)} train, {len(dev.records)} dev ({len(select.records)} select "
              f"the epochs and the setting, {len(report.records)} report), {len(test.records)} test; "
              f"{model.num_layers} off-ramps; device {device}", file=sys.stderr)
        summary["training"] = train(args, model, train_split, dev_batches, collate, device, out, config)
    model.eval()
    with autocast(device, args.precision):  # as fit() evaluated
        sweep_and_predict(args, model, (dev, test, select, report), collate, device, out, summary)
    return summary


def sweep_and_predict(args: argparse.Namespace, model: DeeBert, splits: tuple[Split, Split, Split, Split],
                      collate: Collator, device: torch.device, out: Path, summary: dict) -> None:
    """The timed sweep on the report half, the setting chosen on the selection half, the prediction files at it,
    the tables and figures; all into `summary`."""
    dev, test, select, report = splits
    report_batches = batches(report.records, collate, EVAL_BATCH, bucket=True, lengths=report.lengths)
    summary["per_layer"] = layer_scores(model, args.task, report_batches, device)
    table = sweep_table(args, model, report, collate, device)
    summary.update(table)
    print(format_table(table))
    print(f"forced exit at each layer ({report.name} " + table["metric"] + "): "
          + ", ".join(f"{l + 1}: {s:.4f}" for l, s in enumerate(summary["per_layer"])))
    if args.threshold is not None:
        value = args.threshold
    else:
        summary["selection"] = quality_table(args, model, select, collate, device)
        value = choose(summary["selection"], args.max_drop)["value"]
    summary["prediction_setting"] = value
    summary["chosen"] = next((r for r in table["rows"][1:-1] if r["value"] == value), None)
    if summary["chosen"] is not None:
        print(format_choice(summary["chosen"], table["metric"], select, report))
    rule = EntropyExit(value, args.normalize_entropy) if args.exit == "entropy" else \
        PatienceExit(int(value), args.change_threshold)
    for split in (dev, test):
        preds, layers = exit_predictions(model, args.task, split, collate, rule, device)
        at = (f" at {'S' if args.exit == 'entropy' else 'P'}={value:g}: mean exit layer "
              f"{statistics.mean(layers):.2f} of {model.num_layers}")
        q = write_split(out / "predictions" / f"{args.task}-{split.name}-output.csv", BOARD[args.task],
                        split.records, preds, f"{split.name} {table['metric']}",
                        lambda p, y: quality(args.task, p, y), after=at, sep=", ")
        if q is not None:
            summary[f"{split.name}_quality"] = q
    write_outputs(out, table, summary)
    print(f"wrote {out}/sweep.csv, sweep.json, curve.png, exit_layers.png, per_layer.png")


def parse_settings(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's settings from the command line."""
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    run(parse_settings(argv))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
