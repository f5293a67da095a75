"""The SimCSE stage's settings: what `python -m tasks.simcse` is, as one typed object (tasks/core/settings.py).

    Settings
      simcse     the objective and its loss, the Quora split, evaluation and stopping -> minbert.simcse.SimCSEConfig
      training   the encoder to start from, epochs, learning rate, batch size, seed   (tasks/core/training_setup.py, SimCSE's defaults)
      recipe     warm-up and decay, clipping, precision, the optimiser               (tasks/core/recipe.py)
      files      the training files and the STS dev file
      run        the run directory (--out), the hardware, progress                    (tasks/core/runs.py)

Every default here is the library's where the library has one (SimCSEConfig.temperature, .margin, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from minbert.simcse import DISTANCES, OBJECTIVES, SIMCSE_POOLINGS, SimCSEConfig

from ..core.data import TASKS
from ..core.errors import (
    directory_to_write,
    existing_file,
    file_to_write,
    fraction,
    nonnegative_float,
    positive_float,
    positive_int,
    token_limit,
    user_path,
)
from ..core.recipe import Recipe
from ..core.runs import RunOptions
from ..core.settings import dropped, section, setting
from ..core.training_setup import Training

# SimCSE's appendix A: 1 epoch at 3e-5 unsupervised, 3 at 5e-5 supervised (the margin loss as sup)
DEFAULTS = {"unsup": {"epochs": 1, "lr": 3e-5}, "sup": {"epochs": 3, "lr": 5e-5}, "margin": {"epochs": 3, "lr": 5e-5}}


@dataclass
class Stage:
    """The stage: the objective and its loss (minbert.simcse.SimCSEConfig), the Quora split, evaluation, stopping."""

    objective: str = setting(SimCSEConfig.objective, choices=OBJECTIVES,
                             help="unsup: dropout views, in-batch negatives; sup: Quora duplicates as positives; "
                                  "margin: the report's margin loss on the Quora pairs")
    temperature: float = setting(SimCSEConfig.temperature, parse=positive_float, help="SimCSE's temperature t")
    hard_negatives: bool = setting(False, help="sup: add for each duplicate pair the sentence of the stage's "
                                               "non-duplicate pairs with the largest word overlap with its anchor "
                                               "as a hard negative")
    hard_negative_weight: float = setting(SimCSEConfig.hard_negative_weight, parse=nonnegative_float,
                                          help="sup: added to the logit of each anchor's own hard negative (log "
                                               "alpha)")
    margin: float = setting(SimCSEConfig.margin, parse=nonnegative_float, help="margin m of the margin loss")
    distance: str = setting(SimCSEConfig.distance, choices=DISTANCES,
                            help="distance d of the margin loss: cosine (1 - cos) or euclidean")
    quora_fraction: float = setting(0.15, parse=fraction,
                                    help="share of the labelled Quora training pairs for this stage, drawn with "
                                         "--seed; the rest go to the multitask stage (0.15 as the report)")
    eval_every: int = setting(10, parse=positive_int, help="evaluate STS dev every N training steps")
    patience: int = setting(5, parse=positive_int, help="stop after N evaluations without improvement")


@dataclass
class StageTraining(Training):
    """The encoder to start from, the stage's sample and the loop's size (batch 64 as SimCSE's unsup, length 64)."""

    model: str = setting(Training.model, parse=user_path, help="checkpoint to start from: 'minilm' (the offline default), a Hub name such "
                                        "as bert-base-uncased, or a local directory")
    epochs: int | None = setting(None, parse=positive_int, on_resume="free",
                                 help="passes over the stage's examples (none: "
                                      + ", ".join(f"{v['epochs']} for {k}" for k, v in DEFAULTS.items())
                                      + ", as SimCSE)")
    lr: float | None = setting(None, parse=positive_float,
                               help="learning rate (none: " + ", ".join(f"{v['lr']:g} for {k}"
                                                                        for k, v in DEFAULTS.items()) + ")")
    batch_size: int = setting(64, parse=positive_int, help="training batch size: the in-batch negatives")
    weight_decay: float = setting(0.01, parse=nonnegative_float, help="AdamW's decoupled weight decay")
    dropout: None = dropped()          # no head: SimCSE's noise is the encoder's own dropout
    pooling: str = setting(SimCSEConfig.pooling, choices=SIMCSE_POOLINGS,
                           help="training embedding: mean of the real tokens (evaluated and used the same way) or "
                                "cls_mlp ([CLS] through an MLP in training, [CLS] alone in evaluation, as SimCSE's unsup; for "
                                "every objective here, since only the encoder is saved)")
    max_length: int | None = setting(64, parse=token_limit,
                                     help="truncate each sentence to this many tokens (none: the model's limit)")
    seed: int = setting(Training.seed, parse=int, help="random seed: the Quora split, the sample, initialisation, order "
                                               "and dropout")
    max_train_examples: int | None = setting(None, parse=positive_int,
                                             help="train on a seeded sample of N of the stage's examples (quick "
                                                  "runs; the Quora split is unchanged; none: all)")
    bucket: None = dropped()           # batches are drawn in random order: the in-batch negatives


@dataclass
class Files:
    """The training files and the STS dev file (each default: in DATA_DIR)."""

    data_dir: str = setting("data", parse=user_path, help="where the default task files live")
    sst_train: str | None = setting(None, parse=existing_file, metavar="PATH",
                                    help="SST training file (unsup; none: DATA_DIR/ids-sst-train.csv)")
    para_train: str | None = setting(None, parse=existing_file, metavar="PATH",
                                     help="Quora training file, split between this stage and the next (none: "
                                          "DATA_DIR/quora-train.csv)")
    sts_train: str | None = setting(None, parse=existing_file, metavar="PATH",
                                    help="STS training file (unsup; none: DATA_DIR/sts-train.csv)")
    sts_dev: str | None = setting(None, parse=existing_file, metavar="PATH",
                                  help="STS dev file, the zero-shot evaluation (none: DATA_DIR/sts-dev.csv)")

    def path(self, task: str, split: str) -> Path:
        given = getattr(self, f"{task}_{split}")
        return Path(given) if given else TASKS[task].path(self.data_dir, split)


@dataclass
class Run(RunOptions):
    """Where the run writes (the encoder too), what hardware it uses and how it shows progress."""

    run_dir: str | None = setting(None, flags=("--run-dir", "--out"), parse=directory_to_write, metavar="DIR",
                                  on_resume="free",
                                  help="the run's directory: run.json, the checkpoint, the curves, and at the end "
                                       "the encoder with its tokenizer, the Quora split and simcse-summary.json, "
                                       "which tasks.multitask --after-simcse DIR reads (none: "
                                       "runs/simcse-OBJECTIVE-DATE-TIME, or under $MINBERT_RUNS)")
    checkpoint: str | None = setting(None, parse=file_to_write, metavar="PATH", on_resume="free",
                                     help="the training checkpoint, written after every evaluation (none: RUN_DIR/"
                                          "checkpoint.pt)")
    predictions_dir: None = dropped()  # the stage predicts nothing
    raw_outputs: None = dropped()
    eval_batch_size: int = setting(RunOptions.eval_batch_size, parse=positive_int, on_resume="free",
                                   help="batch size of the STS dev evaluation")


@dataclass
class Settings:
    """python -m tasks.simcse: everything a run is."""

    simcse: Stage = section(Stage)
    training: StageTraining = section(StageTraining)
    recipe: Recipe = section(Recipe)
    files: Files = section(Files)
    run: Run = section(Run)

    def simcse_config(self) -> SimCSEConfig:
        """The library's config of the model and its loss."""
        s = self.simcse
        return SimCSEConfig(s.objective, self.training.pooling, s.temperature, s.hard_negative_weight, s.margin,
                            s.distance)
