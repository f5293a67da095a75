"""Export a trained run's encoder as a Hugging Face directory (with a multitask run: its heads and settings too).

    python -m tasks.export runs/multitask-cross-encoder-round-robin-full-model-DATE-TIME/ exported/
    python -m tasks.export runs/classifier-sst-full-model-DATE-TIME/ exported/     # also deebert-..., simcse-...
    python -m tasks.export checkpoints/multitask-cross-encoder-round-robin-full-model.pt exported/   # an older run

The run's run.json says which command wrote it. A multitask run: OUT/encoder/ holds config.json, model.safetensors
(Hugging Face BERT names; transformers' BertModel.from_pretrained loads it) and the tokenizer (vocab.txt,
tokenizer.json and tokenizer_config.json, which gives transformers' AutoTokenizer the model's max length);
OUT/heads.pt the weights outside the encoder (the three heads, PALs if any); OUT/multitask.json the run's settings
and its best epoch's dev figures; python -m tasks.predict OUT predicts with it. A classifier, DeeBERT or SimCSE run:
OUT itself is the Hugging Face directory of its best state's encoder (its head, off-ramps or SimCSE's MLP are left
out), with export.json saying where it came from; minbert.load_pretrained(OUT), --model OUT and transformers'
BertModel.from_pretrained(OUT) read it. OUT is new or empty (a non-empty one is refused, naming what it holds;
--force moves it aside to OUT.backup-TIME), and is written whole or not at all: into a hidden sibling, renamed at the
end.
"""

from __future__ import annotations

if not __package__:  # run as a file (python tasks/export.py): this tree is not on the path
    import sys
    print("error: run it as python -m tasks.export from the tree's root (the folder holding minbert/ and tasks/), "
          "not as a file", file=sys.stderr)
    sys.exit(2)

import argparse
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

import minbert

from .core.checkpoints import load_checkpoint, trained_encoder
from .core.errors import ConfigurationError, MissingFileError, directory_to_write, run_cli, user_path
from .core.exports import EXPORT_ENCODER, EXPORT_HEADS, EXPORT_SETTINGS, load_weights
from .core.runs import RUN_FILE, no_checkpoint, read_run_json
from .core.settings import dump
from .predict import command, from_run_json, load_run

ENCODER_KINDS = ("classifier", "deebert", "simcse")   # runs whose export is their encoder alone
EXPORT_RECORD = "export.json"                         # beside such an export: the run it came from


def export(checkpoint: str | Path, out: str | Path, force: bool = False) -> Path:
    """Write the export directory of a run (a run directory, a checkpoint in one, or an older multitask checkpoint);
    returns it. OUT is new or empty (force: a non-empty one is moved aside to OUT.backup-TIME once the export is
    whole); the files go to a hidden sibling first, renamed to OUT at the end, so a failed export leaves no OUT."""
    out = Path(out)
    check_out(Path(checkpoint), out, force)
    with staged(out) as tmp:
        _export(checkpoint, tmp)
    return out


def check_out(source: Path, out: Path, force: bool) -> None:
    """Refuse an OUT that is a file, or a non-empty directory without --force (naming what it holds), or with it a
    folder that holds the run exported, or the current folder or one above it (the export replaces OUT whole)."""
    here = Path.cwd().resolve()
    if out.resolve() == here or out.resolve() in here.parents:
        raise ConfigurationError(f"{out} is the current folder{'' if out.resolve() == here else ' or above it'}: the "
                                 "export replaces its folder whole; give a new folder, such as exported/")
    if out.exists() and not out.is_dir():
        raise ConfigurationError(f"{out} is a file, not a directory: give a directory to write into")
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if not held:
        return
    run_dir = (source if source.is_dir() else source.parent).resolve()
    if force and (out.resolve() == run_dir or out.resolve() in run_dir.parents):
        raise ConfigurationError(f"{out} holds the run being exported ({source}); --force would move it aside: give "
                                 "a new directory, such as exported/")
    if not force:
        shown = ", ".join(held[:4]) + (f", ... ({len(held)} entries)" if len(held) > 4 else "")
        raise ConfigurationError(f"{out} is not empty ({shown}); nothing was written. Give an empty or new directory, "
                                 "or --force to move it aside to a backup first")


def backup_path(out: Path) -> Path:
    """A free name beside out for its backup: OUT.backup-YYYYmmdd-HHMMSS (with -2, -3, ... when taken)."""
    base = out.with_name(f"{out.name}.backup-{time.strftime('%Y%m%d-%H%M%S')}")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A new hidden directory beside `out` for the block to fill; when the block ends it becomes `out` in one rename
    (a non-empty `out`, which check_out let through with --force, first moved to backup_path), and when the block
    fails it is removed, `out` left as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.export-{secrets.token_hex(4)}"
    tmp.mkdir()                                   # the mode a new directory gets (mkdtemp's is private)
    try:
        yield tmp
        if out.is_dir() and any(out.iterdir()):
            backup = backup_path(out)
            os.replace(out, backup)
            print(f"moved the existing {out} to {backup}", file=sys.stderr)
        elif out.is_dir():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _export(checkpoint: str | Path, out: Path) -> Path:
    """Write the export of `checkpoint` into the directory `out` (which exists)."""
    path = Path(checkpoint)
    run_dir = path if path.is_dir() else path.parent
    if path.is_dir() and not (path / RUN_FILE).is_file():
        raise ConfigurationError(f"{path}: not a run directory (no {RUN_FILE}); tasks.export takes the directory that "
                                 "python -m tasks.classifier, multitask, deebert or simcse wrote (or a checkpoint "
                                 "file of an older multitask run)")
    if (run_dir / RUN_FILE).is_file():
        kind = read_run_json(run_dir)["command"]                    # run.json says which command wrote the run
        if kind not in ENCODER_KINDS + ("multitask",):
            raise ConfigurationError(f"{run_dir}: a run of python -m tasks.{kind}, which trains no encoder of its own; "
                                     "tasks.export takes a run of tasks.classifier, multitask, deebert or simcse")
        kind, settings, trained = from_run_json(run_dir)            # its settings, as the command's Settings
        if kind in ENCODER_KINDS:
            return export_encoder(run_dir, kind, settings, path if path.is_file() else trained, out)
        if not (path if path.is_file() else trained).is_file():
            raise missing_checkpoint(run_dir, kind, trained)
    run = load_run(checkpoint)
    if run.kind != "multitask":
        raise ConfigurationError(f"{checkpoint}: a {run.kind} checkpoint outside a run directory; tasks.export takes a "
                                 "run directory, or a checkpoint file of an older multitask run")
    model = command("multitask").build_model(run.settings)
    load_weights(model, run.state, checkpoint)
    write_encoder(model.bert, run.settings.training.model, out / EXPORT_ENCODER)
    encoder_keys = {f"bert.{k}" for k in minbert.BertModel(model.bert.config).state_dict()}
    heads = {k: v for k, v in model.state_dict().items() if k not in encoder_keys}
    torch.save(heads, out / EXPORT_HEADS)
    full = load_checkpoint(from_run_json(Path(checkpoint))[2] if (Path(checkpoint) / RUN_FILE).is_file() else checkpoint)
    best = full["history"][full["best_epoch"] - 1] if full.get("history") else {}
    (out / EXPORT_SETTINGS).write_text(json.dumps({
        "kind": "multitask", "settings": dump(run.settings), "best_epoch": full.get("best_epoch"),
        "dev": {k[4:]: v for k, v in best.items() if k.startswith("dev_")}, "exported_from": str(checkpoint)},
        indent=1))
    return out


def write_encoder(bert: minbert.BertModel, model: str, directory: Path) -> None:
    """config.json and model.safetensors (Hugging Face names), and the tokenizer of the run's --model `model`."""
    bert.save_pretrained(str(directory))
    source = minbert.checkpoint.resolve(model)
    minbert.Tokenizer.from_pretrained(str(source)).save_pretrained(directory)
    if (source / "vocab.txt").is_file():                          # for transformers' BertTokenizer too
        shutil.copyfile(source / "vocab.txt", directory / "vocab.txt")


def missing_checkpoint(run_dir: Path, kind: str, checkpoint: Path) -> MissingFileError:
    return no_checkpoint(run_dir, kind, checkpoint)


def export_encoder(run_dir: Path, kind: str, settings: Any, checkpoint: Path, out: Path) -> Path:
    """OUT as a Hugging Face BERT directory: the encoder of the checkpoint's best state (the weights named bert.*:
    not the classifier's head, DeeBERT's off-ramps or SimCSE's MLP), the tokenizer of the run's --model, and
    export.json."""
    if not checkpoint.is_file():
        raise missing_checkpoint(run_dir, kind, checkpoint)
    model = settings.training.model
    bert, full = trained_encoder(checkpoint, model, run=run_dir, kind=kind)
    write_encoder(bert, model, out)
    (out / EXPORT_RECORD).write_text(json.dumps({
        "kind": kind, "command": read_run_json(run_dir).get("argv"), "exported_from": str(run_dir),
        "checkpoint": str(checkpoint), "best_epoch": full.get("best_epoch"), "settings": dump(settings)}, indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tasks.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=user_path, help="a run directory of python -m tasks.classifier, multitask, deebert or simcse, "
                                      "or its checkpoint")
    p.add_argument("out", type=directory_to_write, help="the directory to write: new or empty")
    p.add_argument("--force", action="store_true",
                   help="write even if OUT is not empty, after moving it aside to OUT.backup-TIME")
    args = p.parse_args(argv)
    out = export(args.checkpoint, args.out, args.force)
    if (out / EXPORT_RECORD).is_file():
        print(f"wrote {out}/ (Hugging Face BERT: the run's encoder), {out}/{EXPORT_RECORD}")
    else:
        print(f"wrote {out}/{EXPORT_ENCODER}/ (Hugging Face BERT), {out}/{EXPORT_HEADS}, {out}/{EXPORT_SETTINGS}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
