"""Multitask fine-tuning on the three CS224N tasks (SST sentiment, Quora paraphrase, STS similarity) at once.

    python -m tasks.multitask --design cross-encoder --schedule round-robin --fine-tune-mode full-model

One encoder, three heads (minbert.multitask). After every epoch it prints each task's training loss and
the dev table: SST accuracy, Quora accuracy, STS Pearson r and the overall score
(SST + Quora + (r + 1) / 2) / 3; the best epoch by overall score is kept, and its predictions are written
as predictions/{sst,para,sts}-{dev,test}-output.csv, the six files of the course leaderboard
(python -m tasks.score and python -m tasks.submit read them). A checkpoint is written after every
epoch; --resume on it continues a killed run to the same result as an uninterrupted one.

Quora here: quora-train.csv and quora-dev.csv are a fixed split of the course's Quora dev file (see
data/README.md), so Quora scores are not comparable with the course leaderboard's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import minbert
from minbert.multitask import DESIGNS, TASK_NAMES, MultitaskBert, MultitaskConfig
from minbert.pals import VARIANTS, PalsConfig
from minbert.pooling import POOLINGS
from minbert.schedules import SCHEDULES, TaskSchedule
from minbert.smart import PRESETS, SmartConfig

from .cli import ListFlag, add_common_arguments, run_settings, setup, write_split
from .data import TASKS, Records, batch_indices, to_device
from .distributed import is_main_process, world_size
from .errors import existing_file, fraction, nonnegative_float, positive_float, positive_int, probability, run_cli
from .evaluation import accuracy, overall_score, pearson, prediction_path, write_text
from .finetune import add_mode_arguments, fine_tune_of, get_mode
from .multitask_data import Encoded, EpochBatches, collate, load
from .recipe import autocast, loop_kwargs, make_optimizer
from .simcse_quora import SIMCSE_QUORA_REST
from .starter_flags import translate
from .toolkit import (
    SurgeryBatches,
    ToolkitLog,
    add_toolkit_arguments,
    check_toolkit,
    model_class,
    raw_path,
    toolkit_loss,
    toolkit_settings,
    write_raw,
)
from .train import FitResult, fit
from .unfinished import explain_unfinished

METRICS = {"sst": "sst_accuracy", "para": "para_accuracy", "sts": "sts_pearson"}
DEFAULT_FILES = {"sst": "ids-sst", "para": "quora", "sts": "sts"}
HELP_NAMES = {"sst": "SST sentiment", "para": "Quora paraphrase", "sts": "STS similarity"}


@torch.no_grad()
def outputs(model: MultitaskBert, data: Encoded, batch_size: int, device: torch.device,
            precision: str = "fp32") -> torch.Tensor:
    """The model's raw output for every record in file order: SST logits (N, C), or one value per pair (N,)."""
    was_training = model.training
    model.eval()
    out: dict[int, torch.Tensor] = {}
    for index in batch_indices(data.lengths, batch_size, shuffle=False, bucket=True):
        batch = to_device(collate(data, index), device)
        with autocast(device, precision):
            out.update(zip(index, model.predict(data.task, batch).float().cpu()))
    model.train(was_training)
    return torch.stack([out[i] for i in range(len(data.records))])


def predict(model: MultitaskBert, data: Encoded, batch_size: int, device: torch.device,
            precision: str = "fp32") -> list[float | int]:
    """Predictions for every record in file order: the SST class, the Quora 0/1, or the STS score."""
    return decide(data.task, outputs(model, data, batch_size, device, precision))


def decide(task: str, y: torch.Tensor) -> list[float | int]:
    """Predictions from raw outputs: the SST class, the Quora 0/1, or the STS score."""
    if task == "sst":
        return y.argmax(-1).tolist()                            # (N, 5) -> class
    if task == "para":
        return (y > 0).long().tolist()                          # logit > 0 <=> sigmoid > 0.5
    return y.tolist()                                           # the 0-5 similarity score


def score(task: str, preds: list, records: Records) -> float:
    labels = [e.label for e in records]
    return pearson(preds, labels) if task == "sts" else accuracy(preds, labels)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tasks.multitask", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--design", choices=DESIGNS, default="cross-encoder",
                   help="sentence-pair design: bi-encoder (each sentence alone, [u, v, |u - v|] into the head; the "
                        "report's design 1) or cross-encoder (one pass over [CLS] s1 [SEP] s2 [SEP]; design 2). "
                        "Default cross-encoder")
    p.add_argument("--schedule", choices=SCHEDULES, default="round-robin",
                   help="which task each batch comes from: sequential (each task to the end in turn), round-robin "
                        "(one batch of each in turn, the default), proportional (drawn by size), annealed (by "
                        "size ** alpha, alpha from 1 to 0.2 over the epochs; Stickland & Murray)")
    p.add_argument("--when-exhausted", choices=("drop", "cycle"), default="drop",
                   help="round-robin, when a smaller task runs out of batches: drop (it leaves the rotation; every "
                        "example once an epoch; default) or cycle (it starts another pass until the largest is done)")
    p.add_argument("--tasks", action=ListFlag, joined=True, default="sst,para,sts", metavar="TASK",
                   help="the tasks to train and evaluate, comma- or space-separated (default all three; one task "
                        "gives the single-task reference)")
    p.add_argument("--after-simcse", default=None, metavar="DIR",
                   help="start from the encoder python -m tasks.simcse wrote to DIR and train Quora on the pairs "
                        f"it left unused (DIR/{SIMCSE_QUORA_REST}): sets --model and --para-train")
    add_mode_arguments(p)
    p.add_argument("--weight-decay", type=nonnegative_float, default=0.0,
                   help="AdamW's decoupled weight decay (default 0)")
    p.add_argument("--head-hidden", type=positive_int, default=512,
                   help="hidden width of each task head's MLP (default 512)")
    p.add_argument("--dropout", type=probability, default=None, help="dropout before each head (default: the model's)")
    p.add_argument("--sts-head-bias", type=float, default=0.0,
                   help="initial output bias of the STS head (default 0; 2.5, the middle of the 0-5 scale, lets short "
                        "runs learn the similarity instead of first fitting its mean)")
    p.add_argument("--swap-pairs", action="store_true",
                   help="train on each Quora/STS pair in a random order, (s1, s2) or (s2, s1), drawn anew every epoch "
                        "(both tasks are symmetric; the designs' inputs are not)")
    p.add_argument("--symmetric-pairs", action="store_true",
                   help="predict each Quora/STS pair (dev and test) as the mean of the outputs for (s1, s2) and "
                        "(s2, s1); the pair tasks' prediction then takes two passes")
    p.add_argument("--no-bucket", dest="bucket", action="store_false",
                   help="batch training examples in random order instead of by similar length")
    for t in TASK_NAMES:
        for split in ("train", "dev", "test"):
            default = f"{DEFAULT_FILES[t]}-{'test-student' if split == 'test' else split}.csv"
            extra = "; scored too if it has labels" if split == "test" else ""
            p.add_argument(f"--{t}-{split}", f"--{t}_{split}", dest=f"{t}_{split}", default=None, metavar="PATH",
                           type=existing_file,
                           help=f"{HELP_NAMES[t]} {split} file (default: DATA_DIR/{default}){extra}")
    p.add_argument("--predictions-dir", default="predictions",
                   help="where the six {sst,para,sts}-{dev,test}-output.csv files go (default: predictions)")
    p.add_argument("--no-predictions", dest="predictions", action="store_false",
                   help="write no prediction files and predict no test file: report the best epoch's dev scores "
                        "(ablation runs)")
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint written after every epoch (default: checkpoints/multitask-DESIGN-SCHEDULE-MODE.pt)")
    add_common_arguments(
        p, model={"help": "checkpoint: 'minilm' (the offline default), a Hub name such as bert-base-uncased, or a "
                          "local directory (e.g. one written by python -m tasks.simcse)"},
        batch_size={"help": "training batch size, every task (default 32)"},
        pooling={"choices": POOLINGS, "help": "sentence vector: mean of the real tokens' final states (default; the "
                                              "offline MiniLM was trained with it), the [CLS] state, or the pooler "
                                              "output"},
        max_length={"help": "truncate each sentence to this many tokens"},
        max_train_examples={"help": "train on a random sample of N examples per task, drawn with --seed (quick runs)"})
    add_smart_pals_arguments(p)
    add_toolkit_arguments(p)
    return p


def add_smart_pals_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of SMART (minbert.smart) and PALs (minbert.pals)."""
    s = p.add_argument_group("SMART", "Smoothness-inducing adversarial regularisation and Bregman proximal point "
                             "optimisation (Jiang et al., 2020), on the encoder's input embeddings; lambda_s, K, mu and beta "
                             "default to the paper's, the perturbation to the SMART authors' code (--smart-perturbation)."
                             " With --smart-steps 1 a training step runs 3 encoder passes and 2 backward passes "
                             "instead of 1 and 1 (benchmarks/smart_cost.py measures the time)")
    s.add_argument("--smart", action="store_true", help="add lambda_s R_s (and with --smart-bregman mu D_Breg) to "
                   "every training loss")
    s.add_argument("--smart-lambda", type=nonnegative_float, default=1.0, metavar="L",
                   help="lambda_s, R_s's weight (default 1; "
                   "the paper tries 1, 3, 5; the CS224N report used 5)")
    s.add_argument("--smart-steps", type=positive_int, default=1, metavar="K", help="ascent steps on the perturbation (default 1)")
    s.add_argument("--smart-perturbation", choices=tuple(PRESETS), default="mt-dnn", help="the perturbation "
                   "step's preset, each with its public code's defaults (minbert/smart.py): mt-dnn (the default: the "
                   "SMART authors' own code, namisan/mt-dnn; per-token rescale to infinity norm ~1, eta 1e-5, eps "
                   "1e-6, sigma 1e-5), vat (archinetai/vat-pytorch, named by the CS224N report: the same rescale, eta "
                   "1e-3), paper (Algorithm 1 literally: projection onto the eps ball, eta 1e-3, eps 1e-5, sigma 1e-5). --smart-eta/--smart-epsilon/--smart-sigma override the preset")
    s.add_argument("--smart-eta", type=positive_float, default=None, metavar="ETA", help="the perturbation's step size "
                   "(default: the preset's)")
    s.add_argument("--smart-epsilon", type=nonnegative_float, default=None, metavar="EPS", help="paper: the infinity-norm ball's "
                   "radius; mt-dnn, vat: the division's guard (default: the preset's)")
    s.add_argument("--smart-sigma", type=positive_float, default=None, metavar="SIGMA", help="std of the perturbation's starting "
                   "noise (default: the preset's)")
    s.add_argument("--smart-bregman", action="store_true", help="also the Bregman proximal point term with momentum, "
                   "mu l_s(f(x; theta), f(x; theta~)), theta~ a moving average of the trainable parameters")
    s.add_argument("--smart-mu", type=nonnegative_float, default=1.0, metavar="MU",
                   help="mu, the Bregman term's weight (default 1)")
    s.add_argument("--smart-beta", type=fraction, default=0.99, metavar="BETA",
                   help="momentum: theta~ <- (1 - beta) theta + beta theta~ "
                   "after each step (default 0.99)")
    s.add_argument("--smart-dropout", choices=("on", "off"), default="on", help="off: the regulariser's clean, "
                   "perturbation and adversarial passes run without dropout (default on; the Bregman term's two "
                   "passes always run without dropout, so that it is 0 at theta~ = theta)")
    g = p.add_argument_group("PALs", "Projected attention layers (Stickland & Murray, 2019): task-specific "
                             "attention beside every layer. PALs always train, in every --fine-tune-mode: they are "
                             "task parameters, like the heads")
    g.add_argument("--pals", choices=VARIANTS, default=None, help="standard: added inside each layer's last "
                   "LayerNorm (the paper); concat: beside the first self-attention, [h1; PAL(x)] projected to H "
                   "(the CS224N report's variant). Default: none")
    g.add_argument("--pals-size", type=positive_int, default=204, metavar="D",
                   help="the PALs' projected width (default 204)")
    g.add_argument("--pals-heads", type=positive_int, default=6, metavar="N",
                   help="attention heads in the projected space (default 6)")


def add_smart_pals(model: MultitaskBert, args: argparse.Namespace, params: list[nn.Parameter]) -> list[nn.Parameter]:
    """PALs (trained whatever the fine-tune mode) and SMART (after them: its copy follows every trained parameter)."""
    try:
        if args.pals is not None:
            params = params + list(model.add_pals(PalsConfig(args.pals, args.pals_size, args.pals_heads)).parameters())
        if args.smart:
            model.add_smart(SmartConfig.preset(
                args.smart_perturbation, lambda_s=args.smart_lambda, steps=args.smart_steps, eta=args.smart_eta,
                epsilon=args.smart_epsilon, sigma=args.smart_sigma, bregman=args.smart_bregman, mu=args.smart_mu,
                beta=args.smart_beta, dropout=args.smart_dropout == "on"))
    except ValueError as e:
        raise SystemExit(f"python -m tasks.multitask: {e}") from None
    return params


def smart_post_step(post_step: Callable[[nn.Module], None] | None) -> Callable[[nn.Module], None] | None:
    """The fine-tune mode's post_step, then SMART's momentum update of theta~ (when it keeps one)."""
    def step(m: nn.Module) -> None:
        if post_step is not None:
            post_step(m)
        if m.smart is not None and m.smart.names:
            m.smart.update(m)
    return step


def smart_epoch_stats(model: MultitaskBert, log: list[dict]) -> None:
    """At an epoch's end: SMART's mean R_s and D_Breg and their shares of the loss, logged and appended to `log`;
    then the sums restart. (This process's batches only: under torchrun, rank 0's.)"""
    stats = model.smart.epoch_stats()
    model.smart.reset_stats()
    log.append(stats)
    if is_main_process():
        print(f"  smart: R_s {stats['smart_r_s']:.3e} (lambda R_s {stats['smart_r_s_share']:.1%} of the loss), "
              f"D_Breg {stats['smart_bregman']:.3e} ({stats['smart_bregman_share']:.1%})", file=sys.stderr)


def dev_table(scores: dict[str, float]) -> str:
    """One line: each task's dev metric and, with all three, the overall score."""
    names = {"sst_accuracy": "SST acc", "para_accuracy": "Quora acc", "sts_pearson": "STS r", "overall": "overall"}
    return "  ".join(f"{names[k]} {v:.4f}" for k, v in scores.items())


def apply_after_simcse(args: argparse.Namespace) -> None:
    """--after-simcse DIR: --model DIR and --para-train DIR/quora-train-rest.csv, checked to exist."""
    if getattr(args, "after_simcse", None) is None:
        return
    d = Path(args.after_simcse)
    missing = [name for name in ("config.json", SIMCSE_QUORA_REST) if not (d / name).is_file()]
    if missing:
        raise SystemExit(f"--after-simcse {d}: no {' or '.join(missing)} there; write the directory with "
                         f"python -m tasks.simcse --out {d}")
    if args.model != "minilm" or args.para_train:
        raise SystemExit("--after-simcse sets --model and --para-train itself: give neither with it")
    args.model, args.para_train = str(d), str(d / SIMCSE_QUORA_REST)


def chosen_tasks(args: argparse.Namespace) -> tuple[list[str], str]:
    """--tasks in TASK_NAMES, and the dev metric that selects the epoch: overall for all three, else the one task's."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASK_NAMES]
    if unknown or not tasks:
        raise SystemExit(f"--tasks {args.tasks!r}: choose from {', '.join(TASK_NAMES)}")
    tasks = [t for t in TASK_NAMES if t in tasks]
    if len(tasks) == 2:
        raise SystemExit("--tasks: give all three tasks (selected by overall score) or one")
    return tasks, "overall" if len(tasks) == 3 else METRICS[tasks[0]]


def load_files(args: argparse.Namespace, tasks: list[str], tokenizer: minbert.Tokenizer
               ) -> tuple[dict[str, Encoded], dict[str, Encoded], dict[str, Encoded]]:
    """Each task's training, dev and (unless --no-predictions, and where it exists) test file, tokenised."""
    def path(t: str, split: str) -> Path:
        given = getattr(args, f"{t}_{split}")
        return Path(given) if given else TASKS[t].path(args.data_dir, split)

    train = {t: load(t, "train", path(t, "train"), tokenizer, args.max_train_examples, args.seed) for t in tasks}
    dev = {t: load(t, "dev", path(t, "dev"), tokenizer) for t in tasks}
    test = {t: load(t, "test", path(t, "test"), tokenizer) for t in tasks
            if args.predictions and path(t, "test").is_file()}
    for t in tasks:
        if not (train[t].records.labelled and dev[t].records.labelled):
            raise SystemExit(f"{t}: the training and dev files must have labels "
                             f"({train[t].records.path}, {dev[t].records.path})")
    return train, dev, test


def run(args: argparse.Namespace) -> dict:
    """Train the multitask model, select on dev, write the prediction files; returns the scores and history."""
    apply_after_simcse(args)
    tasks, metric = chosen_tasks(args)
    check_toolkit(args, world_size())
    mode = get_mode(args.fine_tune_mode)
    lr = args.lr if args.lr is not None else mode.default_lr
    device, tokenizer = setup(args)
    train, dev, test = load_files(args, tasks, tokenizer)

    config = MultitaskConfig(args.design, args.pooling, args.head_hidden, args.dropout,
                             similarity_bias=args.sts_head_bias, symmetric_pairs=args.symmetric_pairs)
    model = model_class(vars(args))(minbert.load_pretrained(args.model), config)
    params = mode.setup(model, fine_tune_of(args), args.seed)
    params = add_smart_pals(model, args, params)
    model.to(device)
    optimizer = make_optimizer(params, lr, args.weight_decay, args.optimizer)
    schedule = TaskSchedule(args.schedule, args.when_exhausted)
    sizes = ", ".join(f"{t} {len(train[t].records)}/{len(dev[t].records)}" for t in tasks)
    print(f"multitask {args.design}, {args.schedule}: train/dev examples {sizes}; {args.fine_tune_mode} trains "
          f"{sum(p.numel() for p in params):,} of {sum(p.numel() for p in model.parameters()):,} parameters; "
          f"lr {lr:g}; device {device}; {args.precision}", file=sys.stderr)

    def epoch_batches(epoch: int) -> EpochBatches | SurgeryBatches:
        batches = EpochBatches(train, schedule, args.batch_size, epoch, args.epochs, args.seed, args.bucket,
                               args.swap_pairs)
        return SurgeryBatches(batches) if args.gradient_surgery != "none" else batches

    evaluated: list[dict[str, list]] = []  # the dev predictions of each epoch this process evaluated, in order
    smart_log: list[dict] = []  # SMART's per-epoch means, for the epochs this process trained
    if args.smart:
        model.smart.reset_stats()
    toolkit_log, toolkit_epochs = ToolkitLog(), []  # the embedding losses' and PCGrad's per-epoch means, likewise

    def evaluate(m: nn.Module) -> dict[str, float]:
        if args.smart:
            smart_epoch_stats(model, smart_log)
        toolkit_log.epoch_end(toolkit_epochs)
        evaluated.append({t: predict(m, dev[t], args.eval_batch_size, device, args.precision) for t in tasks})
        scores = {METRICS[t]: score(t, evaluated[-1][t], dev[t].records) for t in tasks}
        if len(tasks) == 3:
            scores["overall"] = overall_score(scores["sst_accuracy"], scores["para_accuracy"], scores["sts_pearson"])
        if is_main_process():
            print(f"  dev: {dev_table(scores)}", file=sys.stderr)
        return scores

    run_config = toolkit_settings(run_settings(args, lr=lr))
    checkpoint = args.checkpoint or f"checkpoints/multitask-{args.design}-{args.schedule}-{args.fine_tune_mode}.pt"
    post_step = (lambda m: mode.post_step(m, fine_tune_of(args))) if mode.post_step is not None else None
    post_step = smart_post_step(post_step) if args.smart else post_step
    result = fit(model, optimizer, epoch_batches, toolkit_loss(args, device, toolkit_log), evaluate, metric=metric,
                 epochs=args.epochs, device=device, seed=args.seed, checkpoint=checkpoint, resume=args.resume,
                 config=run_config, post_step=post_step, progress=args.progress, **loop_kwargs(args))
    if not is_main_process():
        return {"best_epoch": result.best_epoch, f"dev_{metric}": result.best_score}

    model.load_state_dict(result.best_state)
    if mode.after_fit is not None:
        mode.after_fit(model, fine_tune_of(args), {k: v for k, v in vars(args).items() if k in (
            "model", "pooling", "fine_tune_mode", "bitfit_terms") and v is not None})
    summary: dict = {"tasks": tasks, "best_epoch": result.best_epoch, f"dev_{metric}": result.best_score,
                     "history": result.history, "checkpoint": checkpoint, "trainable": sum(p.numel() for p in params),
                     "dev": {}, "test": {}}
    if args.smart:  # per epoch this process trained: mean R_s, D_Breg and their shares of the loss
        summary["smart"] = smart_log
    if toolkit_epochs:  # likewise: the embedding losses' values and shares, PCGrad's conflicts and change
        summary["toolkit"] = toolkit_epochs
    # The best epoch's dev predictions, made with the weights just loaded, unless it was evaluated before a resume.
    k = result.best_epoch - 1 - (len(result.history) - len(evaluated))
    write_outputs(args, model, result, dev, test, evaluated[k] if 0 <= k < len(evaluated) else {}, summary, device)
    if args.predictions:
        write_text(Path(args.predictions_dir) / "multitask-summary.json", json.dumps(   # atomic
            summary | {"settings": run_config}, indent=1))
    return summary


def write_outputs(args: argparse.Namespace, model: MultitaskBert, result: FitResult, dev: dict[str, Encoded],
                  test: dict[str, Encoded], best_dev: dict[str, list], summary: dict, device: torch.device) -> None:
    """The six prediction files (and with --raw-outputs the raw outputs) and their scores into `summary`; with
    --no-predictions the best epoch's own dev scores."""
    if not args.predictions:  # the best epoch's own dev evaluation
        best = result.history[result.best_epoch - 1]
        summary["dev"] = {k[len("dev_"):]: v for k, v in best.items() if k.startswith("dev_")}
    for split, data in (("dev", dev if args.predictions else {}), ("test", test)):
        for t, d in data.items():
            if args.raw_outputs:  # the raw outputs beside the course file, and the predictions made from them
                y = outputs(model, d, args.eval_batch_size, device, args.precision)
                preds = decide(t, y)
                write_raw(raw_path(args.predictions_dir, t, split), [e.id for e in d.records], y)
            else:
                preds = best_dev[t] if split == "dev" and t in best_dev else predict(
                    model, d, args.eval_batch_size, device, args.precision)
            value = write_split(prediction_path(args.predictions_dir, t, split), t, d.records, preds,
                                f"{split} {METRICS[t]}", lambda p, _, t=t, d=d: score(t, p, d.records))
            if value is not None:
                summary[split][METRICS[t]] = value
    if len(summary["tasks"]) == 3 and args.predictions:
        d = summary["dev"]
        d["overall"] = overall_score(d["sst_accuracy"], d["para_accuracy"], d["sts_pearson"])
    print(f"best epoch {result.best_epoch}; dev {dev_table(summary['dev'])}")


def parse_settings(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's settings from the command line (the course's starter spellings too)."""
    return build_parser().parse_args(translate(argv, "multitask"))


def main(argv: list[str] | None = None) -> int:
    args = parse_settings(argv)
    with explain_unfinished():
        run(args)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
