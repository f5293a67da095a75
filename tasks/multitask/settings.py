"""The multitask run's settings: what `python -m tasks.multitask` is, as one typed object (tasks/core/settings.py).

    Settings
      design     the pair design, the task schedule, the heads          -> minbert.multitask.MultitaskConfig
      fine_tune  which parameters train                                  (tasks/core/finetune.py)
      training   the model, epochs, learning rate, batch size, seed      (tasks/core/training_setup.py)
      recipe     warm-up and decay, clipping, precision, the optimiser  (tasks/core/recipe.py)
      smart      SMART's regulariser                                     -> minbert.smart.SmartConfig
      pals       projected attention layers                              -> minbert.pals.PalsConfig
      rdrop      R-Drop's regulariser                                    -> minbert.rdrop
      toolkit    PCGrad and the sentence-embedding objectives            (tasks/multitask/toolkit.py)
      files      each task's train, dev and test file
      run        where it writes, the hardware, progress                 (tasks/core/runs.py)

Every default here is the library's where the library has one (SmartConfig.mu, PalsConfig.size, ...), but
--smart-perturbation: it defaults to the mt-dnn preset (SmartConfig.preset("mt-dnn"), the SMART authors' code), where
SmartConfig() is the paper's Algorithm 1 (its help says why). SMART's numbers are checked by SmartConfig's own checks.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minbert.multitask import DESIGNS, TASK_NAMES, MultitaskConfig
from minbert.pals import VARIANTS, PalsConfig
from minbert.schedules import SCHEDULES, TaskSchedule
from minbert.smart import PRESETS, SmartConfig

from ..core.data import SIMCSE_QUORA_REST, TASKS
from ..core.errors import (
    ConfigurationError,
    existing_file,
    finite_float,
    nonnegative_float,
    positive_int,
    probability,
    token_limit,
    user_path,
)
from ..core.finetune import FineTune
from ..core.recipe import Recipe
from ..core.runs import RunOptions
from ..core.settings import section, setting
from ..core.training_setup import Training
from ..core.tree import command
from .toolkit import ToolkitSettings

METRICS = {"sst": "sst_accuracy", "para": "para_accuracy", "sts": "sts_pearson"}
DEFAULT_FILES = {"sst": "ids-sst", "para": "quora", "sts": "sts"}
HELP_NAMES = {"sst": "SST sentiment", "para": "Quora paraphrase", "sts": "STS similarity"}


def smart_number(name: str) -> Callable[[str], float | int]:
    """The parser of the flag of SmartConfig's number `name`: a finite number that SmartConfig's own check accepts."""
    kind = int if name == "steps" else float

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {'an integer' if kind is int else 'a number'}: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, not {text}")
        try:
            SmartConfig.check(name, value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value
    return parse


def _task_name(name: str) -> str:
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASK_NAMES)}")
    return name


@dataclass
class Design:
    """The pair design, the task schedule and the heads (minbert.multitask)."""

    design: str = setting(
        MultitaskConfig.design, choices=DESIGNS,
        help="sentence-pair design: bi-encoder (each sentence alone, [u, v, |u - v|] into the head; the report's "
             "design 1) or cross-encoder (one pass over [CLS] s1 [SEP] s2 [SEP]; design 2)")
    schedule: str = setting(
        "round-robin", choices=SCHEDULES,
        help="which task each batch comes from: sequential (each task to the end in turn), round-robin (one batch "
             "of each in turn), proportional (drawn by size), annealed (by size ** alpha, alpha from 1 to 0.2 over "
             "the epochs; Stickland & Murray)")
    when_exhausted: str = setting(
        TaskSchedule.when_exhausted, choices=("drop", "cycle"),
        help="round-robin, when a smaller task runs out of batches: drop (it leaves the rotation; every example once "
             "an epoch) or cycle (it starts another pass until the largest is done)")
    tasks: str = setting(
        "sst,para,sts", item=_task_name, metavar="TASK",
        help="the tasks to train and evaluate, comma- or space-separated (all three, selected by the overall score, "
             "or one: the single-task reference)")
    head_hidden: int = setting(MultitaskConfig.head_hidden, parse=positive_int,
                               help="hidden width of each task head's MLP")
    sts_head_bias: float = setting(
        MultitaskConfig.similarity_bias, parse=finite_float,
        help="initial output bias of the STS head; 2.5 (main-job.json's, make train's) starts it in the middle of the "
             "0-5 scale, so that short runs learn the similarity instead of first fitting its mean")
    swap_pairs: bool = setting(
        False, help="train on each Quora/STS pair in a random order, (s1, s2) or (s2, s1), drawn anew every epoch "
                    "(both tasks are symmetric; the designs' inputs are not)")
    symmetric_pairs: bool = setting(
        MultitaskConfig.symmetric_pairs,
        help="predict each Quora/STS pair (dev and test) as the mean of the outputs for (s1, s2) and (s2, s1); the "
             "pair tasks' prediction then takes two passes")

    def chosen(self) -> tuple[list[str], str]:
        """The tasks in TASK_NAMES order, and the dev metric that selects the epoch: overall for all three, else the
        one task's."""
        tasks = [t for t in TASK_NAMES if t in self.tasks.split(",")]
        if len(tasks) == 2:
            raise ConfigurationError("--tasks: give all three tasks (selected by overall score) or one")
        return tasks, "overall" if len(tasks) == 3 else METRICS[tasks[0]]


@dataclass
class MultitaskTraining(Training):
    """The model, the training sample and the loop's size."""

    model: str = setting(Training.model, parse=user_path, help="checkpoint: 'minilm' (the offline default), a Hub name such as "
                                        f"bert-base-uncased, or a local directory (e.g. one written by "
                                        f"{command('simcse')})")
    batch_size: int = setting(Training.batch_size, parse=positive_int, help="training batch size, every task")
    dropout: float | None = setting(None, parse=probability,
                                    help="dropout before each head (none: the model's hidden dropout)")
    max_length: int | None = setting(None, parse=token_limit,
                                     help="truncate each sentence to this many tokens (none: the model's limit)")
    max_train_examples: int | None = setting(None, parse=positive_int,
                                             help="train on a random sample of N examples per task, drawn with "
                                                  "--seed (quick runs; none: all)")


@dataclass
class Smart:
    """SMART (Jiang et al., 2020): smoothness-inducing adversarial regularisation and Bregman proximal point
    optimisation on the encoder's input embeddings. With --smart-steps 1 a training step runs 3 encoder passes and
    2 backward passes instead of 1 and 1 (benchmarks/smart_cost.py)."""

    smart: bool = setting(False, help="add lambda_s R_s (and with --smart-bregman mu D_Breg) to every training loss")
    smart_lambda: float = setting(SmartConfig.lambda_s, parse=smart_number("lambda_s"), metavar="L",
                                  help="lambda_s, R_s's weight (the paper tries 1, 3, 5; the CS224N report used 5)")
    smart_steps: int = setting(SmartConfig.steps, parse=smart_number("steps"), metavar="K",
                               help="ascent steps on the perturbation")
    smart_perturbation: str = setting(
        "mt-dnn", choices=tuple(PRESETS),
        help="the perturbation step's preset, each with its public code's defaults (minbert/smart.py): mt-dnn (the "
             "SMART authors' own code, namisan/mt-dnn; per-token rescale to infinity norm ~1, eta 1e-5, eps 1e-6, "
             "sigma 1e-5), vat (archinetai/vat-pytorch, named by the CS224N report: the same rescale, eta 1e-3), "
             "paper (Algorithm 1 literally: projection onto the eps ball, eta 1e-3, eps 1e-5, sigma 1e-5). "
             "--smart-eta/--smart-epsilon/--smart-sigma override the preset. Default: mt-dnn, not SmartConfig()'s "
             "paper (SmartConfig.preset('mt-dnn')): at the report's epsilon the paper's projection is numerically a "
             "no-op (the reference repository's docs/smart-pals.md), and mt-dnn is the step the SMART authors' code "
             "takes")
    smart_eta: float | None = setting(None, parse=smart_number("eta"), metavar="ETA",
                                      help="the perturbation's step size (none: the preset's)")
    smart_epsilon: float | None = setting(None, parse=smart_number("epsilon"), metavar="EPS",
                                          help="paper: the infinity-norm ball's radius; mt-dnn, vat: the division's "
                                               "guard (none: the preset's)")
    smart_sigma: float | None = setting(None, parse=smart_number("sigma"), metavar="SIGMA",
                                        help="std of the perturbation's starting noise (none: the preset's)")
    smart_bregman: bool = setting(False, help="also the Bregman proximal point term with momentum, mu l_s(f(x; "
                                              "theta), f(x; theta~)), theta~ a moving average of the trainable "
                                              "parameters")
    smart_mu: float = setting(SmartConfig.mu, parse=smart_number("mu"), metavar="MU",
                              help="mu, the Bregman term's weight")
    smart_beta: float = setting(SmartConfig.beta, parse=smart_number("beta"), metavar="BETA",
                                help="momentum: theta~ <- (1 - beta) theta + beta theta~ after each step")
    smart_dropout: str = setting(
        "on", choices=("on", "off"),
        help="off: the regulariser's clean, perturbation and adversarial passes run without dropout (the Bregman "
             "term's two passes always run without dropout, so that it is 0 at theta~ = theta)")

    def config(self) -> SmartConfig | None:
        """The library's SmartConfig, or None when SMART is off."""
        if not self.smart:
            return None
        try:
            return SmartConfig.preset(self.smart_perturbation, lambda_s=self.smart_lambda, steps=self.smart_steps,
                                      eta=self.smart_eta, epsilon=self.smart_epsilon, sigma=self.smart_sigma,
                                      bregman=self.smart_bregman, mu=self.smart_mu, beta=self.smart_beta,
                                      dropout=self.smart_dropout == "on")
        except ValueError as e:
            raise ConfigurationError(f"SMART: {e}") from None


@dataclass
class Pals:
    """Projected attention layers (Stickland & Murray, 2019): task-specific attention beside every layer. PALs always
    train, in every --fine-tune-mode: they are task parameters, like the heads."""

    pals: str | None = setting(None, choices=VARIANTS,
                               help="standard: added inside each layer's last LayerNorm (the paper); concat: beside "
                                    "each layer's self-attention (before Wm1), in every layer, [h1; PAL(x)] projected to H "
                                    "(the CS224N report's variant); none: no PALs")
    pals_size: int = setting(PalsConfig.size, parse=positive_int, metavar="D", help="the PALs' projected width")
    pals_heads: int = setting(PalsConfig.heads, parse=positive_int, metavar="N",
                              help="attention heads in the projected space")

    def config(self) -> PalsConfig | None:
        """The library's PalsConfig, or None without PALs."""
        if self.pals is None:
            return None
        try:
            return PalsConfig(self.pals, self.pals_size, self.pals_heads)
        except ValueError as e:
            raise ConfigurationError(f"PALs: {e}") from None


@dataclass
class RDrop:
    """R-Drop (Liang et al., 2021): every training batch through the model twice, with independent dropout masks;
    the mean of the two task losses plus alpha times the divergence of the two outputs (minbert/rdrop.py). A
    training step then runs two forward passes instead of one, and its backward goes through both."""

    rdrop_alpha: float = setting(0.0, parse=nonnegative_float, metavar="ALPHA", before=0.0,
                                 help="alpha, the weight of the divergence between the two passes' outputs (symmetric "
                                      "KL for SST and Quora, squared difference for STS); 0: off")


def _file_setting(task: str, split: str) -> object:
    default = f"{DEFAULT_FILES[task]}-{'test-student' if split == 'test' else split}.csv"
    extra = "; scored too if it has labels" if split == "test" else ""
    return setting(None, parse=existing_file, metavar="PATH", flags=(f"--{task}-{split}", f"--{task}_{split}"),
                   help=f"{HELP_NAMES[task]} {split} file (none: DATA_DIR/{default}){extra}")


@dataclass
class Files:
    """Each task's files (the defaults: DATA_DIR's), or a SimCSE stage's output to start from."""

    data_dir: str = setting("data", parse=user_path, help="where the default task files live")
    after_simcse: str | None = setting(
        None, parse=user_path, metavar="DIR",
        help=f"start from the encoder a SimCSE stage ({command('simcse')}) wrote to DIR and train Quora on the "
             f"pairs it left unused (DIR/{SIMCSE_QUORA_REST}): sets --model and --para-train")
    sst_train: str | None = _file_setting("sst", "train")
    sst_dev: str | None = _file_setting("sst", "dev")
    sst_test: str | None = _file_setting("sst", "test")
    para_train: str | None = _file_setting("para", "train")
    para_dev: str | None = _file_setting("para", "dev")
    para_test: str | None = _file_setting("para", "test")
    sts_train: str | None = _file_setting("sts", "train")
    sts_dev: str | None = _file_setting("sts", "dev")
    sts_test: str | None = _file_setting("sts", "test")

    def path(self, task: str, split: str) -> Path:
        given = getattr(self, f"{task}_{split}")
        return Path(given) if given else TASKS[task].path(self.data_dir, split)


@dataclass
class MultitaskRun(RunOptions):
    """Where the run writes, what hardware it uses and how it shows progress (a resumed run may change these)."""

    predictions: bool = setting(True, on_resume="free",
                                help="write no prediction files and predict no test file: report the best epoch's "
                                     "dev scores (ablation runs)")
    raw_outputs: bool = setting(False, on_resume="free",
                                help="also write each prediction's raw output beside the course files, "
                                     "{task}-{split}-raw.csv (SST logits, Quora logit, STS score), for "
                                     f"{command('ensemble')}")


@dataclass
class Settings:
    """python -m tasks.multitask: everything a run is."""

    design: Design = section(Design)
    fine_tune: FineTune = section(FineTune)
    training: MultitaskTraining = section(MultitaskTraining)
    recipe: Recipe = section(Recipe)
    smart: Smart = section(Smart)
    pals: Pals = section(Pals)
    rdrop: RDrop = section(RDrop)
    toolkit: ToolkitSettings = section(ToolkitSettings)
    files: Files = section(Files)
    run: MultitaskRun = section(MultitaskRun)

    def model_config(self) -> MultitaskConfig:
        """The library's MultitaskConfig for these settings."""
        return MultitaskConfig(self.design.design, self.training.pooling, self.design.head_hidden,
                               self.training.dropout, similarity_bias=self.design.sts_head_bias,
                               symmetric_pairs=self.design.symmetric_pairs)
