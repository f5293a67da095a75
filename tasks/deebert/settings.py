"""The DeeBERT run's settings: what `python -m tasks.deebert` is, as one typed object (tasks/core/settings.py).

    Settings
      task, dev_protocol, max_eval_examples   the task, and how dev selects and reports
      training   stage 1: the model, epochs, learning rate, batch size, seed, the off-ramps' pooling (tasks/core/training_setup.py)
      ramps      stage 2: the off-ramps                                   -> minbert.deebert.DeeBertConfig
      sweep      after training: the exit rule, the settings swept, the timing rounds, --from-run
      recipe     warm-up and decay, clipping, precision, the optimiser  (tasks/core/recipe.py)
      files      the task's train, dev and test file
      run        where it writes (--run-dir, or --out), the hardware, progress (tasks/core/runs.py)

A default the library has is referenced (DeeBertConfig.ramp_pooler, EntropyExit.normalize); the off-ramps' pooling
defaults to the mean, not the paper's [CLS], since the offline MiniLM is a mean-pooling model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from minbert.deebert import RAMP_POOLINGS, DeeBertConfig, EntropyExit, ExitRule, PatienceExit

from ..core.data import TASKS
from ..core.errors import (
    ConfigurationError,
    directory_to_write,
    existing_file,
    existing_path,
    finite_float,
    nonnegative_float,
    positive_float,
    positive_int,
    probability,
    user_path,
)
from ..core.recipe import Recipe
from ..core.runs import RunOptions
from ..core.settings import dropped, section, setting
from ..core.training_setup import Training

SOURCE = {"sst": "sst", "sst2": "sst", "cfimdb": "cfimdb", "sts": "sts"}   # which files a task reads
NUM_LABELS = {"sst": 5, "sst2": 2, "cfimdb": 2, "sts": 1}
DEFAULT_THRESHOLDS = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7]   # two classes; cf. eval_entropy.sh's
EXITS = ("entropy", "patience")


@dataclass
class Sweep:
    """After training: the exit rule, the settings swept, the prediction files' setting and the timing (a resumed
    run, or one that loads a trained model with --from-run, may change these)."""

    from_run: str | None = setting(
        None, parse=existing_path, metavar="DIR", on_resume="free",
        help="skip training: load the model an earlier run trained (its run directory or its stage2.pt) and only "
             "sweep and predict, starting from that run's settings; the task, model, pooling and off-ramps must be "
             "the same (before run directories this was --resume)")
    exit: str | None = setting(
        None, choices=EXITS, on_resume="free",
        help="exit rule: entropy below S (DeeBERT; none: this for classification) or the prediction unchanged for P "
             "layers (PABEE; none: this for sts)")
    thresholds: list[float] | None = setting(
        None, item=float, metavar="S", on_resume="free",
        help=f"entropy thresholds S to sweep, comma- or space-separated (none: "
             f"{' '.join(f'{t:g}' for t in DEFAULT_THRESHOLDS)} for two classes, times ln C / ln 2 for C classes, or "
             "/ ln 2 with --normalize-entropy: from no exit to every sample leaving at layer 1)")
    normalize_entropy: bool = setting(EntropyExit.normalize, on_resume="free",
                                      help="divide the entropy by ln C (S then in [0, 1])")
    patience: list[int] | None = setting(
        None, item=int, metavar="P", on_resume="free",
        help="patience values P to sweep with --exit patience, comma- or space-separated (none: 1 .. L-2)")
    change_threshold: float = setting(
        0.1, parse=nonnegative_float, on_resume="free",
        help="patience on a regression: a change below this counts as unchanged (on sts's 0-5 scale)")
    threshold: float | None = setting(
        None, parse=nonnegative_float, on_resume="free",
        help="the setting (S, or P with --exit patience) of the prediction files (none: the swept setting with the "
             "fewest layers run whose dev quality drop is at most --max-drop)")
    max_drop: float = setting(0.005, parse=finite_float, on_resume="free",
                              help="largest dev quality drop against the plain model when choosing the setting")
    rounds: int = setting(
        5, parse=positive_int, on_resume="free",
        help="timing rounds of the sweep, each setting (plain included) in a fresh seeded order per round, after one "
             "untimed pass of all; the median and the spread are reported")

    def resolved(self, task: str) -> Sweep:
        """The defaults that depend on the task: the exit rule, and the thresholds by the number of classes."""
        rule = self.exit or ("patience" if task == "sts" else "entropy")
        if rule == "entropy" and task == "sts":
            raise ConfigurationError("--exit entropy needs classes; sts is a regression: use --exit patience")
        thresholds = self.thresholds
        if thresholds is None:
            scale = 1.0 if self.normalize_entropy else math.log(max(NUM_LABELS[task], 2))
            thresholds = [round(t * scale / math.log(2), 4) for t in DEFAULT_THRESHOLDS]
        return replace(self, exit=rule, thresholds=thresholds)

    def rule(self, value: float) -> ExitRule:
        """The exit rule at one setting (S, or P), of a resolved Sweep."""
        if self.exit == "entropy":
            return EntropyExit(value, self.normalize_entropy)
        return PatienceExit(int(value), self.change_threshold)


@dataclass
class DeeBertTraining(Training):
    """Stage 1 (the encoder and the last off-ramp): the model, the training sample and the loop."""

    epochs: int = setting(3, parse=positive_int, on_resume="free", help="stage 1 epochs: encoder and last off-ramp")
    lr: float = setting(3e-5, parse=positive_float, help="stage 1 learning rate")
    dropout: float | None = setting(DeeBertConfig.dropout, parse=probability,
                                    help="dropout before each off-ramp's classifier (none: the model's, 0.1)")
    pooling: str = setting("mean", choices=RAMP_POOLINGS,
                           help="the off-ramps' input: the mean of a layer's real tokens (the offline MiniLM is a "
                                "mean-pooling model) or the [CLS] state (the paper's)")
    max_train_examples: int | None = setting(None, parse=positive_int,
                                             help="train on a seeded random sample of N (none: all)")


@dataclass
class OffRamps:
    """Stage 2 (DeeBERT, sec. 3.1): off-ramps 1..n-1, trained on the frozen encoder."""

    ramp_pooler: bool = setting(DeeBertConfig.ramp_pooler,
                                help="off-ramps without the copy of the pretrained pooler (dense + tanh): dropout + "
                                     "linear only")
    ramp_epochs: int | None = setting(None, parse=positive_int, on_resume="free",
                                      help="stage 2 epochs: off-ramps 1..n-1 (none: --epochs)")
    ramp_lr: float = setting(1e-3, parse=positive_float,
                             help="stage 2 learning rate, off-ramps only on a frozen encoder (as a frozen encoder's "
                                  "head; the public DeeBERT code trains both stages at one rate, 2e-5)")


@dataclass
class Files:
    """The task's files (each default: DATA_DIR's file of the task; sst2 reads SST's)."""

    data_dir: str = setting("data", parse=user_path, help="where the default task files live")
    train_file: str | None = setting(None, parse=existing_file, metavar="PATH",
                                     help="training file (none: DATA_DIR's file of the task)")
    dev_file: str | None = setting(None, parse=existing_file, metavar="PATH",
                                   help="dev file: model selection and the sweep (none: DATA_DIR's)")
    test_file: str | None = setting(None, parse=existing_file, metavar="PATH",
                                    help="test file to predict, scored too if labelled (none: DATA_DIR's)")

    def path(self, task: str, split: str) -> str:
        return getattr(self, f"{split}_file") or str(TASKS[SOURCE[task]].path(self.data_dir, split))


@dataclass
class DeeBertRun(RunOptions):
    """Where the run writes, what hardware it uses and how it shows progress (a resumed run may change these)."""

    run_dir: str | None = setting(None, flags=("--run-dir", "--out"), parse=directory_to_write, metavar="DIR",
                                  on_resume="free",
                                  help="the run's directory: run.json, stage1.pt and stage2.pt, the sweep's tables "
                                       "and figures, predictions/ (none: runs/deebert-TASK-DATE-TIME, or under "
                                       "$MINBERT_RUNS); --out is its older spelling")
    resume: str | None = setting(None, parse=existing_path, metavar="DIR", on_resume="free", in_config=False,
                                 help="continue the run in this directory from its stage checkpoints, with the "
                                      "settings it started with, to the same result as an uninterrupted run (a "
                                      "killed run repeats the epoch in progress; with --save-every N, from its "
                                      "last step checkpoint); to load a trained model and only sweep it, see "
                                      "--from-run")
    checkpoint: None = dropped()   # two checkpoints, RUN_DIR/stage1.pt and stage2.pt
    eval_batch_size: int = setting(1, parse=positive_int, on_resume="free",
                                   help="batch size of the timed sweep: 1 is the paper's setting; larger uses batched "
                                        "exit")
    progress: bool = setting(True, on_resume="free", help="no progress bars or timing log")
    resume_training: bool = setting(False, on_resume="free", in_config=False,
                                    help="the older spelling of --resume RUN_DIR: continue the run in --out DIR")


@dataclass
class Settings:
    """python -m tasks.deebert: everything a run is."""

    task: str = setting("sst2", choices=tuple(sorted(NUM_LABELS)),
                        help="sst (5 classes), sst2 (binary SST: 0-1 negative, 3-4 positive, 2 dropped), cfimdb "
                             "(binary), sts (similarity regression; exits by patience)")
    dev_protocol: str = setting("halves", choices=("halves", "same"),
                                help="halves: a seeded half of dev selects the epochs and the exit setting, the other "
                                     "half is timed and reported (as the paper chose S on dev and reported test); "
                                     "same: the whole dev set does both (selection and report on the same "
                                     "examples: optimistic)")
    max_eval_examples: int | None = setting(None, parse=positive_int,
                                            help="use a seeded random sample of N dev (and N test) examples (quick "
                                                 "runs; none: all)")
    training: DeeBertTraining = section(DeeBertTraining)
    ramps: OffRamps = section(OffRamps)
    sweep: Sweep = section(Sweep)
    recipe: Recipe = section(Recipe)
    files: Files = section(Files)
    run: DeeBertRun = section(DeeBertRun)

    def ramp_config(self) -> DeeBertConfig:
        """The off-ramps' shape, the library's config."""
        return DeeBertConfig(NUM_LABELS[self.task], self.training.pooling, self.ramps.ramp_pooler,
                             self.training.dropout)
