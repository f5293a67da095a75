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
improvement. OUT is written at the end, atomically (a temporary directory renamed into place): config.json
and model.safetensors (the plain encoder, Hugging Face names; the training MLP is not part of it), the
tokenizer files of --model, quora-train-stage.csv (the stage's share) and quora-train-rest.csv (the rest,
which tasks.multitask --after-simcse trains on) in the format of data/quora-train.csv, and simcse-summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import minbert
from minbert.checkpoint import resolve
from minbert.hub import OPTIONAL as TOKENIZER_FILES
from minbert.simcse import DISTANCES, OBJECTIVES, SIMCSE_POOLINGS, SimCSE, SimCSEConfig

from .cli import add_common_arguments, run_settings, seeded_sample, setup
from .data import TASKS, Records, batch_indices
from .distributed import world_size
from .errors import existing_file, fraction, nonnegative_float, positive_float, positive_int, run_cli
from .evaluation import pearson
from .multitask_data import hash_seed, pad, token_ids
from .recipe import autocast, loop_kwargs, make_optimizer
from .simcse_quora import QUORA_STAGE, SIMCSE_QUORA_REST, mine_hard_negatives, split_quora, write_rows
from .train import fit

DEFAULTS = {"unsup": {"epochs": 1, "lr": 3e-5}, "sup": {"epochs": 3, "lr": 5e-5}, "margin": {"epochs": 3, "lr": 5e-5}}
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
        if len(self.views) == 1:
            ids, mask = pad([self.views[0][i] for i in index])
            return {"input_ids": ids, "attention_mask": mask}
        out = {}
        for k, view in enumerate(self.views, start=1):
            out[f"input_ids_{k}"], out[f"attention_mask_{k}"] = pad([view[i] for i in index])
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


class Round(Sequence):
    """Evaluation round k: steps [k N, (k + 1) N) of a stream of passes over the examples, each pass shuffled
    from (seed, pass) alone, so a run resumed at a round boundary goes on as an uninterrupted one."""

    def __init__(self, data: Examples, batch_size: int, every: int, seed: int, k: int):
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.first, self.last = k * every, (k + 1) * every
        self.per_pass = -(-len(data) // batch_size)
        self._passes: dict[int, list[list[int]]] = {}

    def __len__(self) -> int:
        return self.last - self.first

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(i)
        p, j = divmod(self.first + i, self.per_pass)
        if p not in self._passes:
            self._passes[p] = batch_indices([0] * len(self.data), self.batch_size, shuffle=True,
                                            seed=hash_seed(self.seed, p))
        return self.data.collate(self._passes[p][j])


@torch.no_grad()
def sts_zero_shot(model: SimCSE, pairs: Examples, gold: list[float], batch_size: int, device: torch.device) -> float:
    """Pearson r of cos(u, v) against the gold similarities, u and v the saved encoder's sentence embeddings."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(pairs)), key=lambda i: len(pairs.views[0][i]) + len(pairs.views[1][i]))
    cos = {}
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        u, v = (model.sentence_embedding(*(t.to(device) for t in pad([view[i] for i in index])))
                for view in pairs.views)
        cos.update(zip(index, F.cosine_similarity(u.float(), v.float(), dim=-1).tolist()))
    model.train(was_training)
    return pearson([cos[i] for i in range(len(pairs))], gold)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tasks.simcse", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objective", choices=OBJECTIVES, default="unsup",
                   help="unsup: dropout views, in-batch negatives; sup: Quora duplicates as positives; margin: the "
                        "report's margin loss on the Quora pairs (default unsup)")
    p.add_argument("--out", default=None, metavar="DIR", help="output directory (default: runs/simcse-OBJECTIVE)")
    p.add_argument("--temperature", type=positive_float, default=0.05, help="SimCSE's temperature t (default 0.05)")
    p.add_argument("--hard-negatives", action="store_true",
                   help="sup: add for each duplicate pair the sentence of the stage's non-duplicate pairs with the "
                        "largest word overlap with its anchor as a hard negative")
    p.add_argument("--hard-negative-weight", type=nonnegative_float, default=0.0,
                   help="sup: added to the logit of each anchor's own hard negative (log alpha; default 0)")
    p.add_argument("--margin", type=nonnegative_float, default=0.5, help="margin m of the margin loss (default 0.5)")
    p.add_argument("--distance", choices=DISTANCES, default="cosine",
                   help="distance d of the margin loss: cosine (1 - cos, default) or euclidean")
    p.add_argument("--quora-fraction", type=fraction, default=0.15,
                   help="share of the labelled Quora training pairs for this stage; the rest go to the multitask "
                        "stage (default 0.15, as the report)")
    p.add_argument("--eval-every", type=positive_int, default=10,
                   help="evaluate STS dev every N training steps (default 10)")
    p.add_argument("--patience", type=positive_int, default=5,
                   help="stop after N evaluations without improvement (default 5)")
    for flag, what in (("sst-train", "SST training"), ("para-train", "Quora training"), ("sts-train", "STS training"),
                       ("sts-dev", "STS dev")):
        p.add_argument(f"--{flag}", default=None, metavar="PATH", type=existing_file,
                       help=f"{what} file (default: in DATA_DIR)")
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint written after every evaluation (default: checkpoints/simcse-NAME.pt, NAME that "
                        "of the --out directory)")
    add_common_arguments(
        p, model={"help": "checkpoint to start from: 'minilm' (offline default), a Hub name or a local directory"},
        epochs={"default": None, "help": "passes over the stage's examples (default 1 for unsup, 3 for sup and "
                                         "margin, as SimCSE)"},
        lr={"help": "learning rate (default 3e-5 unsup, 5e-5 sup and margin)"},
        batch_size={"default": 64, "help": "training batch size: the in-batch negatives (64)"},
        eval_batch_size={"help": "batch size of the STS dev evaluation"},
        max_length={"default": 64, "help": "truncate each sentence to this many tokens (64)"},
        pooling={"choices": SIMCSE_POOLINGS, "help": "training embedding: mean of the real tokens (default; evaluated and "
                                              "used the same way) or cls_mlp ([CLS] through an MLP in training, "
                                              "[CLS] alone in evaluation, as SimCSE)"},
        max_train_examples={"help": "train on a seeded sample of N of the stage's examples (quick runs; the split "
                                    "is unchanged)"},
        seed={"help": "random seed: split, initialisation, order and dropout"},
        resume={"help": "continue the run saved in this checkpoint to the same result as an uninterrupted run"})
    return p


def check_args(args: argparse.Namespace, out: Path) -> None:
    """Clear errors for settings the stage cannot run with, before anything is loaded."""
    if not 0 <= args.quora_fraction < 1 or (args.objective != "unsup" and args.quora_fraction == 0):
        raise SystemExit(f"--quora-fraction {args.quora_fraction}: must be in [0, 1), and above 0 for "
                         f"{args.objective} (it trains on the Quora pairs)")
    for flag in ("epochs", "batch_size", "eval_every", "patience", "max_length", "max_train_examples"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise SystemExit(f"--{flag.replace('_', '-')} must be at least 1, not {getattr(args, flag)}")
    if args.hard_negatives and args.objective != "sup":
        raise SystemExit("--hard-negatives goes with --objective sup")
    if args.grad_accum != 1 or world_size() > 1:
        raise SystemExit("the contrastive losses take their negatives from the whole batch: gradient accumulation "
                         "or data parallelism would cut them to a part of it; use one process and --batch-size")
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / SUMMARY).is_file())):
        raise SystemExit(f"--out {out}: exists and was not written by python -m tasks.simcse; choose another "
                         "directory or remove it")


def stage_examples(args: argparse.Namespace, tokenizer: minbert.Tokenizer, quora: list,
                   path: Callable[[str, str], Path]) -> tuple[Examples, str]:
    """The objective's training examples from the stage's Quora pairs (and, for unsup, SST and STS training)."""
    if args.objective == "unsup":
        sst = TASKS["sst"].read(path("sst", "train"))
        sts = TASKS["sts"].read(path("sts", "train"))
        for records in (sst, sts):
            print(records.summary(), file=sys.stderr)
        texts = [e.sentence for e in sst] + [s for e in list(sts) + quora for s in (e.sentence1, e.sentence2)]
        sentences = list(dict.fromkeys(texts))
        return Examples([token_ids(tokenizer, sentences)]), (f"{len(sentences)} distinct sentences of {len(texts)} "
                                                          f"(SST {len(sst)}, STS {2 * len(sts)}, Quora {2 * len(quora)})")
    if args.objective == "margin":
        return Examples([token_ids(tokenizer, [e.sentence1 for e in quora]), token_ids(tokenizer, [e.sentence2 for e in quora])],
                        [float(e.label) for e in quora]), f"{len(quora)} Quora pairs"
    dups = [e for e in quora if e.label == 1]
    if not dups:
        raise SystemExit("--objective sup: the stage's Quora pairs hold no duplicates; raise --quora-fraction")
    anchors, positives = [e.sentence1 for e in dups], [e.sentence2 for e in dups]
    views = [token_ids(tokenizer, anchors), token_ids(tokenizer, positives)]
    what = f"{len(dups)} Quora duplicate pairs"
    if args.hard_negatives:
        candidates = list(dict.fromkeys(s for e in quora if e.label == 0 for s in (e.sentence1, e.sentence2)))
        if not candidates:
            raise SystemExit("--hard-negatives: the stage's Quora pairs hold no non-duplicates")
        views.append(token_ids(tokenizer, [candidates[j] for j in mine_hard_negatives(anchors, positives, candidates)]))
        what += f", hard negatives from {len(candidates)} sentences of non-duplicate pairs"
    return Examples(views), what


def write_out(out: Path, model: SimCSE, model_dir: Path, quora_path: Path, stage_lines: set[int],
              rest_lines: set[int], summary: dict) -> None:
    """Everything into a temporary directory beside OUT, then renamed into place (an older OUT replaced)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)                          # mkdtemp makes it private; OUT gets the usual mode
        minbert.save_pretrained(model.bert, tmp)
        for name in TOKENIZER_FILES:
            if (model_dir / name).is_file():
                shutil.copyfile(model_dir / name, tmp / name)
        write_rows(quora_path, stage_lines, tmp / QUORA_STAGE)
        write_rows(quora_path, rest_lines, tmp / SIMCSE_QUORA_REST)
        (tmp / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
        if out.exists():
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
            os.replace(out, old / "previous")
            os.replace(tmp, out)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_stage(args: argparse.Namespace, tokenizer: minbert.Tokenizer
               ) -> tuple[Records, list[int], list[int], Examples, str, Examples, list[float]]:
    """The Quora file and its split (stage, rest), the stage's training examples and what they are, the STS dev
    pairs and their gold similarities."""
    def path(task: str, split: str) -> Path:
        given = getattr(args, f"{task}_{split}")
        return Path(given) if given else TASKS[task].path(args.data_dir, split)

    quora = TASKS["para"].read(path("para", "train"))
    print(quora.summary(), file=sys.stderr)
    if not quora.labelled:
        raise SystemExit(f"{quora.path}: the Quora training file must have labels (is_duplicate)")
    stage, rest = split_quora(len(quora), args.quora_fraction, args.seed)
    if not rest:
        raise SystemExit(f"{quora.path}: no Quora pair is left for the multitask stage")
    stage_pairs = [quora[i] for i in stage]
    data, what = stage_examples(args, tokenizer, stage_pairs, path)
    if not len(data):
        raise SystemExit(f"--objective {args.objective}: no training examples ({what}); raise --quora-fraction")
    keep = seeded_sample(len(data), args.max_train_examples, f"{args.seed}-simcse")
    if keep is not None:
        data, what = data.subset(keep), f"a sample of {args.max_train_examples} of " + what
    dev_records = TASKS["sts"].read(path("sts", "dev"))
    print(dev_records.summary(), file=sys.stderr)
    if len(dev_records) < 2 or not dev_records.labelled:
        raise SystemExit(f"{dev_records.path}: the STS dev file needs at least two labelled pairs")
    dev = Examples([token_ids(tokenizer, [e.sentence1 for e in dev_records]),
                    token_ids(tokenizer, [e.sentence2 for e in dev_records])])
    gold = [float(e.label) for e in dev_records]

    return quora, stage, rest, data, what, dev, gold


def run(args: argparse.Namespace) -> dict:
    """Train the contrastive stage, keep the best STS dev round, write OUT; returns the summary."""
    out = Path(args.out or f"runs/simcse-{args.objective}")
    check_args(args, out)
    epochs = args.epochs or DEFAULTS[args.objective]["epochs"]
    lr = args.lr if args.lr is not None else DEFAULTS[args.objective]["lr"]
    model_dir = resolve(args.model)
    device, tokenizer = setup(args)
    quora, stage, rest, data, what, dev, gold = load_stage(args, tokenizer)

    config = SimCSEConfig(args.objective, args.pooling, args.temperature, args.hard_negative_weight, args.margin,
                          args.distance)
    model = SimCSE(minbert.load_pretrained(args.model), config).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params, lr, 0.01, args.optimizer)
    every, rounds = plan(len(data), args.batch_size, epochs, args.eval_every)
    print(f"simcse {args.objective}: {what}; Quora {len(quora)} pairs, {len(stage)} for this stage, {len(rest)} left "
          f"for multitask; {every * rounds} steps of {args.batch_size} ({epochs} epoch{'s' if epochs > 1 else ''} in "
          f"{rounds} rounds of {every}), STS dev evaluated after each round, patience {args.patience}; lr {lr:g}; "
          f"device {device}",
          file=sys.stderr)

    def evaluate(m: SimCSE) -> dict[str, float]:
        return {"sts_pearson": sts_zero_shot(m, dev, gold, args.eval_batch_size, device)}

    with autocast(device, args.precision):
        before = evaluate(model)["sts_pearson"]
    print(f"zero-shot STS dev r before the stage: {before:.4f}", file=sys.stderr)
    run_config = run_settings(args, lr=lr, epochs=epochs)
    checkpoint = args.checkpoint or f"checkpoints/simcse-{out.name}.pt"
    result = fit(model, optimizer, lambda k: Round(data, args.batch_size, every, args.seed, k),
                 lambda m, batch: m.loss(batch), evaluate, metric="sts_pearson", epochs=rounds, device=device,
                 seed=args.seed, checkpoint=checkpoint, resume=args.resume, config=run_config,
                 progress=args.progress, patience=args.patience, unit="round", **loop_kwargs(args))
    model.load_state_dict(result.best_state)
    history = [{"round": h["epoch"], "step": h["epoch"] * every}
               | {k: v for k, v in h.items() if k != "epoch"} for h in result.history]
    summary = {"objective": args.objective, "model": args.model, "sts_dev_pearson_before": before,
               "sts_dev_pearson_best": result.best_score, "best_round": result.best_epoch,
               "best_step": result.best_epoch * every, "steps_planned": every * rounds,
               "examples": what, "quora": {"file": str(quora.path), "pairs": len(quora), "stage": len(stage),
                                           "rest": len(rest), "stage_file": QUORA_STAGE, "rest_file": SIMCSE_QUORA_REST},
               "history": history, "checkpoint": checkpoint, "settings": run_config}
    write_out(out, model, model_dir, Path(quora.path), {quora[i].line for i in stage},
              {quora[i].line for i in rest}, summary)
    print(f"zero-shot STS dev r: {before:.4f} before, {result.best_score:.4f} after (round {result.best_epoch}, "
          f"step {summary['best_step']}); wrote {out} (encoder, tokenizer, {QUORA_STAGE}, {SIMCSE_QUORA_REST}, "
          f"{SUMMARY})")
    return summary


def parse_settings(argv: list[str] | None = None) -> argparse.Namespace:
    """The run's settings from the command line."""
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    run(parse_settings(argv))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
