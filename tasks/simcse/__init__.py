"""SimCSE contrastive pre-training (Gao, Yao & Chen, 2021) as a first stage before multitask fine-tuning, as in
the CS224N report "Less is More" (Qian & Yang, sec. 4.5).

    python -m tasks.simcse --objective sup --out runs/simcse-sup
    python -m tasks.multitask --after-simcse runs/simcse-sup --design bi-encoder

Objectives (minbert.simcse): unsup (each sentence twice through dropout, in-batch negatives; sentences from
the training files of the three tasks: SST, STS and the stage's Quora pairs, deduplicated), sup (the stage's
Quora duplicates as anchor/positive pairs; --hard-negatives adds for each pair a lexically close sentence
from the stage's non-duplicate pairs), margin (the report's loss on all the stage's Quora pairs).

The Quora split: a seeded --quora-fraction (default 0.15) of the labelled Quora training pairs belongs to
this stage, the rest to the multitask stage, for every objective (unsup takes only the stage's pairs'
sentences), so the multitask stage never sees a pair this stage used. The stage evaluates zero-shot STS
(Pearson r of the cosine between the two sentences' embeddings on the STS dev file, no STS training) before
training and every --eval-every steps, keeps the best, and stops after --patience evaluations without
improvement.

The run directory (--run-dir or --out, default runs/simcse-OBJECTIVE-DATE-TIME) holds run.json (the command and
its full settings), the checkpoint written after every evaluation and the curves; `--resume RUN_DIR` continues a
killed run to the same result. At the end the stage writes there, each file renamed into place and config.json
last: config.json and model.safetensors (the plain encoder, Hugging Face names; the training MLP is not part of
it), the tokenizer files of --model, quora-train-stage.csv (the stage's share) and quora-train-rest.csv (the
rest, which tasks.multitask --after-simcse trains on) in the format of data/quora-train.csv, and
simcse-summary.json. `--print-config` prints the settings as JSON, `--config FILE` reads them back.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

import minbert
from minbert.checkpoint import resolve
from minbert.hub import OPTIONAL as TOKENIZER_FILES
from minbert.simcse import SimCSE, SimCSEConfig, margin_loss, sup_simcse_loss, unsup_simcse_loss

from ..core.batching import Passes, batch_indices, pad_views, token_ids
from ..core.curves import curves_path, mark_start
from ..core.data import TASKS, Records, unlabelled
from ..core.distributed import is_main_process, world_size
from ..core.errors import ConfigurationError, ResumeError
from ..core.evaluation import in_order, pearson, predict_batches
from ..core.recipe import autocast, with_schedule_record
from ..core.resume import resume_config
from ..core.runs import (
    RUN_FILE,
    RunPaths,
    parse_run,
    read_run_json,
    rewrite_on_extension,
    run_paths,
    write_run_json,
)
from ..core.settings import parser_for
from ..core.train import FitOptions, Work, fit
from ..core.training_setup import seeded_sample, start
from ..core.tree import STUDENT
from .quora import QUORA_STAGE, SIMCSE_QUORA_REST, mine_hard_negatives, split_quora, write_rows
from .settings import DEFAULTS, Settings

SUMMARY = "simcse-summary.json"


@dataclass
class Examples:
    """The stage's tokenised training examples: one view (sentences) or two or three (pairs, hard negatives)."""

    views: list[list[list[int]]]        # views[k][i]: token ids of example i's k-th sentence
    labels: list[float] | None = None   # margin: 1 paraphrase, 0 not

    def __len__(self) -> int:
        return len(self.views[0])

    def subset(self, keep: list[int]) -> Examples:
        return Examples([[v[i] for i in keep] for v in self.views],
                        None if self.labels is None else [self.labels[i] for i in keep])

    def collate(self, index: Sequence[int]) -> dict:
        """input_ids/attention_mask for sentences; input_ids_k/attention_mask_k (k = 1, 2, 3) and labels for pairs."""
        out = pad_views([[view[i] for i in index] for view in self.views])
        if self.labels is not None:
            out["labels"] = torch.tensor([self.labels[i] for i in index], dtype=torch.float)  # (B,)
        return out


def plan(examples: int, batch_size: int, epochs: int, eval_every: int) -> tuple[int, int]:
    """(steps per round, rounds): rounds of equal length, min(eval_every, all steps), enough to cover `epochs`
    passes (the last round may run up to eval_every - 1 steps into the next pass); equal rounds keep the
    learning-rate schedule, which counts rounds times their length, exact."""
    total = epochs * -(-examples // batch_size)
    every = min(eval_every, total)
    return every, -(-total // every)


def keep_rounds(paths: RunPaths, settings: Settings, examples: int, epochs: int, every: int) -> None:
    """A resume that changes --epochs is refused where it would change the rounds' length (a run shorter than
    --eval-every is one round of all its steps): Recipe.earlier_epochs records the rounds, not their length, so no
    run.json could replay it."""
    if paths.resume is None or not paths.run_json.is_file():
        return
    s, tr = settings.simcse, settings.training
    was = read_run_json(paths.dir)["settings"].get("training", {}).get("epochs") or DEFAULTS[s.objective]["epochs"]
    then, _ = plan(examples, tr.batch_size, was, s.eval_every)
    if then != every:
        raise ResumeError(f"cannot resume {paths.dir} for --epochs {epochs}: its rounds are {then} optimiser steps, "
                          f"and with --epochs {epochs} they would be {every} (a round is --eval-every {s.eval_every} "
                          f"steps, or the whole run's if fewer), which no run.json could replay; resume it with "
                          f"--epochs {was}, or start a new run with --epochs {epochs}")


class Round(Sequence):
    """Evaluation round k: steps [k N, (k + 1) N) of a stream of passes over the examples (tasks.core.batching.Passes),
    each pass shuffled from (seed, pass) alone, so a run resumed at a round boundary goes on as an uninterrupted one."""

    def __init__(self, data: Examples, batch_size: int, every: int, seed: int, k: int):
        self.data, self.passes = data, Passes([0] * len(data), batch_size, seed)
        self.first, self.last = k * every, (k + 1) * every

    def __len__(self) -> int:
        return self.last - self.first

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.data.collate(self.passes.batch(self.first + i))


def pair_cosines(model: SimCSE, batch: dict) -> list[float]:
    """cos(u, v) of each pair of a batch, u and v the two sentences' embeddings."""
    u = model.sentence_embedding(batch["input_ids_1"], batch["attention_mask_1"])     # (B, H)
    v = model.sentence_embedding(batch["input_ids_2"], batch["attention_mask_2"])     # (B, H)
    return F.cosine_similarity(u.float(), v.float(), dim=-1).tolist()


def sts_zero_shot(model: SimCSE, pairs: Examples, gold: list[float], batch_size: int, device: torch.device) -> float:
    """Pearson r of cos(u, v) against the gold similarities, u and v the saved encoder's sentence embeddings."""
    lengths = [len(a) + len(b) for a, b in zip(pairs.views[0], pairs.views[1])]
    # one pool of all the pairs: sorted by length over the whole file, then cut into batches
    index = batch_indices(lengths, batch_size, shuffle=False, bucket=True, pool=max(len(lengths), 1))
    cos = predict_batches(model, (pairs.collate(i) for i in index), pair_cosines, device, total=len(index))
    return pearson(in_order(range(len(pairs)), index, cos), gold)


def reach_the_objective(config: SimCSEConfig, hard_negatives: bool) -> None:
    """In a student tree, before anything is loaded: the objective's loss of minbert/simcse.py (SimCSE.loss's) on two
    tiny batches of embeddings, so that one not written yet stops the run now with the line naming it (run_cli), not
    after the data, the model and the zero-shot evaluation."""
    z = torch.eye(2, 4)                                                         # (B, H): two embeddings
    if config.objective == "unsup":
        unsup_simcse_loss(z, z.flip(0), config.temperature)
    elif config.objective == "margin":
        margin_loss(z, z.flip(0), torch.tensor([1.0, 0.0]), config.margin, config.distance)
    else:
        sup_simcse_loss(z, z.flip(0), z if hard_negatives else None, config.temperature, config.hard_negative_weight)


def check(settings: Settings, paths: RunPaths) -> None:
    """Clear errors for settings the stage cannot run with, before anything is loaded."""
    s = settings.simcse
    if not 0 <= s.quora_fraction < 1 or (s.objective != "unsup" and s.quora_fraction == 0):
        raise ConfigurationError(f"--quora-fraction {s.quora_fraction}: must be in [0, 1), and above 0 for "
                                 f"{s.objective} (it trains on the Quora pairs)")
    if s.hard_negatives and s.objective != "sup":
        raise ConfigurationError("--hard-negatives goes with --objective sup")
    if settings.recipe.grad_accum != 1 or world_size() > 1:
        raise ConfigurationError("the contrastive losses take their negatives from the whole batch: gradient "
                                 "accumulation or data parallelism would cut them to a part of it; use one process "
                                 "and --batch-size")
    out = paths.dir
    if paths.resume is None and out.exists() and not (out.is_dir() and (not any(out.iterdir())
                                                                        or (out / SUMMARY).is_file())):
        raise ConfigurationError(f"--run-dir {out}: exists and was not written by python -m tasks.simcse; choose "
                                 "another directory or remove it")
    resume = settings.run.resume
    if resume is not None and Path(resume).is_file() and settings.run.run_dir is None \
            and not (Path(resume).parent / RUN_FILE).is_file():
        raise ConfigurationError(f"--resume {resume}: a checkpoint file outside a run directory; give the directory "
                                 "the stage writes its encoder to with --run-dir (or --out)")


def stage_examples(objective: str, hard_negatives: bool, tokenizer: minbert.Tokenizer, quora: list,
                   path: Callable[[str, str], Path]) -> tuple[Examples, str]:
    """The objective's training examples from the stage's Quora pairs (and, for unsup, SST and STS training)."""
    if objective == "unsup":
        sst = TASKS["sst"].read(path("sst", "train"))
        sts = TASKS["sts"].read(path("sts", "train"))
        for records in (sst, sts):
            print(records.summary(), file=sys.stderr)
        texts = [e.sentence for e in sst] + [s for e in list(sts) + quora for s in (e.sentence1, e.sentence2)]
        sentences = list(dict.fromkeys(texts))
        return Examples([token_ids(tokenizer, sentences)]), (f"{len(sentences)} distinct sentences of {len(texts)} "
                                                          f"(SST {len(sst)}, STS {2 * len(sts)}, "
                                                          f"Quora {2 * len(quora)})")
    if objective == "margin":
        views = [token_ids(tokenizer, [e.sentence1 for e in quora]), token_ids(tokenizer, [e.sentence2 for e in quora])]
        return Examples(views, [float(e.label) for e in quora]), f"{len(quora)} Quora pairs"
    dups = [e for e in quora if e.label == 1]
    if not dups:
        raise ConfigurationError("--objective sup: the stage's Quora pairs hold no duplicates; raise "
                                 "--quora-fraction")
    anchors, positives = [e.sentence1 for e in dups], [e.sentence2 for e in dups]
    views = [token_ids(tokenizer, anchors), token_ids(tokenizer, positives)]
    what = f"{len(dups)} Quora duplicate pairs"
    if hard_negatives:
        candidates = list(dict.fromkeys(s for e in quora if e.label == 0 for s in (e.sentence1, e.sentence2)))
        if not candidates:
            raise ConfigurationError("--hard-negatives: the stage's Quora pairs hold no non-duplicates")
        views.append(token_ids(tokenizer, [candidates[j] for j in mine_hard_negatives(anchors, positives, candidates)]))
        what += f", hard negatives from {len(candidates)} sentences of non-duplicate pairs"
    return Examples(views), what


def write_out(out: Path, model: SimCSE, model_dir: Path, quora_path: Path, stage_lines: set[int],
              rest_lines: set[int], summary: dict) -> None:
    """The encoder, its tokenizer's files, the Quora split and the summary into the run directory: written in a
    temporary directory inside it, then each renamed into place, config.json last (so that a directory with a
    config.json holds a whole stage's output; an older output's files are replaced)."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(".output-*"):                      # left by a run killed while writing
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".output-"))
    try:
        minbert.save_pretrained(model.bert, tmp)
        for name in TOKENIZER_FILES:
            if (model_dir / name).is_file():
                shutil.copyfile(model_dir / name, tmp / name)
        write_rows(quora_path, stage_lines, tmp / QUORA_STAGE)
        write_rows(quora_path, rest_lines, tmp / SIMCSE_QUORA_REST)
        (tmp / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
        (out / "config.json").unlink(missing_ok=True)
        for name in TOKENIZER_FILES:                        # an older output's tokenizer files that this one lacks
            if not (tmp / name).exists():
                (out / name).unlink(missing_ok=True)
        for path in sorted(tmp.iterdir(), key=lambda p: p.name == "config.json"):
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_stage(settings: Settings, tokenizer: minbert.Tokenizer
               ) -> tuple[Records, list[int], list[int], Examples, str, Examples, list[float]]:
    """The Quora file and its split (stage, rest), the stage's training examples and what they are, the STS dev
    pairs and their gold similarities."""
    s, tr, path = settings.simcse, settings.training, settings.files.path
    quora = TASKS["para"].read(path("para", "train"))
    print(quora.summary(), file=sys.stderr)
    if not quora.labelled:
        raise unlabelled(quora.path, "para", "training")
    stage, rest = split_quora(len(quora), s.quora_fraction, tr.seed)
    if not rest:
        raise ConfigurationError(f"{quora.path}: no Quora pair is left for the multitask stage")
    stage_pairs = [quora[i] for i in stage]
    data, what = stage_examples(s.objective, s.hard_negatives, tokenizer, stage_pairs, path)
    if not len(data):
        raise ConfigurationError(f"--objective {s.objective}: no training examples ({what}); raise --quora-fraction")
    keep = seeded_sample(len(data), tr.max_train_examples, f"{tr.seed}-simcse")
    if keep is not None:
        data, what = data.subset(keep), f"a sample of {tr.max_train_examples} of " + what
    dev_records = TASKS["sts"].read(path("sts", "dev"))
    print(dev_records.summary(), file=sys.stderr)
    if not dev_records.labelled:
        raise unlabelled(dev_records.path, "sts", "dev")
    if len(dev_records) < 2:
        raise ConfigurationError(f"{dev_records.path}: the STS dev file needs at least two labelled pairs")
    dev = Examples([token_ids(tokenizer, [e.sentence1 for e in dev_records]),
                    token_ids(tokenizer, [e.sentence2 for e in dev_records])])
    gold = [float(e.label) for e in dev_records]

    return quora, stage, rest, data, what, dev, gold


def run(settings: Settings) -> dict:
    """Train the contrastive stage, keep the best STS dev round, write the encoder into the run directory; returns
    the summary."""
    s, tr = settings.simcse, settings.training
    paths = run_paths(settings.run, "simcse", s.objective)
    check(settings, paths)
    if STUDENT:
        reach_the_objective(settings.simcse_config(), s.hard_negatives)
    epochs = tr.epochs or DEFAULTS[s.objective]["epochs"]
    lr = tr.lr if tr.lr is not None else DEFAULTS[s.objective]["lr"]
    model_dir = resolve(tr.model)
    device, tokenizer, recipe = start(settings.run.device, settings.run.threads, tr.seed, tr.model, tr.max_length,
                                      settings.recipe)       # --precision auto resolved, and said once
    settings = replace(settings, recipe=recipe)
    quora, stage, rest, data, what, dev, gold = load_stage(settings, tokenizer)

    bert = minbert.load_pretrained(tr.model, attn_implementation=settings.recipe.attn_implementation)
    model = SimCSE(bert, settings.simcse_config()).to(device)
    model.bert.gradient_checkpointing = tr.gradient_checkpointing
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = settings.recipe.optimizer_for(model, params, lr, tr.weight_decay)
    every, rounds = plan(len(data), tr.batch_size, epochs, s.eval_every)
    keep_rounds(paths, settings, len(data), epochs, every)
    if paths.resume is None:   # a resumed run rewrites run.json once it has finished, its settings accepted
        write_run_json(paths, "simcse", settings)
    print(f"simcse {s.objective}: {what}; Quora {len(quora)} pairs, {len(stage)} for this stage, {len(rest)} left "
          f"for multitask; {every * rounds} steps of {tr.batch_size} ({epochs} epoch{'s' if epochs > 1 else ''} in "
          f"{rounds} rounds of {every}), STS dev evaluated after each round, patience {s.patience}; lr {lr:g}; "
          f"device {device}; run {paths.dir}",
          file=sys.stderr)

    def evaluate(m: SimCSE) -> dict[str, float]:
        return {"sts_pearson": sts_zero_shot(m, dev, gold, settings.run.eval_batch_size, device)}

    with autocast(device, settings.recipe.precision):
        before = evaluate(model)["sts_pearson"]
    print(f"zero-shot STS dev r before the stage: {before:.4f}", file=sys.stderr)
    run_config = resume_config(settings) | {"training.lr": lr, "command": "simcse"}
    result = fit(Work(model, optimizer, lambda k: Round(data, tr.batch_size, every, tr.seed, k),
                      lambda m, batch: m.loss(batch), evaluate, "sts_pearson"), settings.recipe,
                 FitOptions(rounds, device, tr.seed, paths.checkpoint, paths.resume, run_config, patience=s.patience,
                            unit="round", extended=rewrite_on_extension(paths, "simcse", settings),
                            **settings.run.loop_options()))
    model.load_state_dict(result.best_state)
    if is_main_process():       # the curves' dev axis in rounds, from the zero-shot score at round 0
        mark_start(curves_path(paths.checkpoint), f"round of {every} optimiser steps", {"sts_pearson": before})
    history = [{"round": h["epoch"], "step": h["epoch"] * every}
               | {k: v for k, v in h.items() if k != "epoch"} for h in result.history]
    summary = {"objective": s.objective, "model": tr.model, "sts_dev_pearson_before": before,
               "sts_dev_pearson_best": result.best_score, "best_round": result.best_epoch,
               "best_step": result.best_epoch * every, "steps_planned": every * rounds,
               "examples": what, "quora": {"file": str(quora.path), "pairs": len(quora), "stage": len(stage),
                                           "rest": len(rest), "stage_file": QUORA_STAGE,
                                           "rest_file": SIMCSE_QUORA_REST},
               "history": history, "checkpoint": str(paths.checkpoint), "run_dir": str(paths.dir),
               "settings": run_config | {"training.epochs": epochs}}
    write_out(paths.dir, model, model_dir, Path(quora.path), {quora[i].line for i in stage},
              {quora[i].line for i in rest}, summary)
    settings = with_schedule_record(settings, result.earlier_epochs)     # a resume that changed --epochs: replayable
    write_run_json(paths, "simcse", settings, result={k: v for k, v in summary.items()
                                                      if k not in ("history", "settings")})
    print(f"zero-shot STS dev r: {before:.4f} before, {result.best_score:.4f} after (round {result.best_epoch}, "
          f"step {summary['best_step']}); wrote {paths.dir} (encoder, tokenizer, {QUORA_STAGE}, {SIMCSE_QUORA_REST}, "
          f"{SUMMARY}, {RUN_FILE})")
    return summary


def build_parser() -> argparse.ArgumentParser:
    """The command line: Settings' flags, --config and --print-config."""
    return parser_for(Settings, "python -m tasks.simcse", __doc__)


def parse_settings(argv: list[str] | None = None) -> Settings:
    """The settings from the command line, --config and --resume DIR."""
    return parse_run(Settings, argv, "python -m tasks.simcse", __doc__)


def main(argv: list[str] | None = None) -> int:
    run(parse_settings(argv))
    return 0

