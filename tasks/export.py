"""Export a trained multitask run: its encoder as a Hugging Face directory, plus its heads and settings.

    python -m tasks.export runs/multitask-cross-encoder-round-robin-full-model-DATE-TIME/ exported/
    python -m tasks.export checkpoints/multitask-cross-encoder-round-robin-full-model.pt exported/   # an older run

OUT/encoder/ holds config.json, model.safetensors (Hugging Face BERT names; transformers' BertModel.from_pretrained
loads it) and the tokenizer's vocab.txt; OUT/heads.pt the weights outside the encoder (the three heads, PALs if
any); OUT/multitask.json the run's settings and its best epoch's dev figures. python -m tasks.predict OUT predicts
with it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

import minbert

from .core.checkpoints import load_checkpoint
from .core.errors import ConfigurationError, run_cli
from .core.runs import RUN_FILE
from .predict import (
    EXPORT_ENCODER,
    EXPORT_HEADS,
    EXPORT_SETTINGS,
    build_multitask,
    from_run_json,
    load_run,
    load_weights,
)


def export(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the export directory of a multitask checkpoint; returns it."""
    kind, settings, state, encoder = load_run(checkpoint)
    if kind != "multitask" or encoder is not None:
        raise ConfigurationError(f"{checkpoint}: a {kind} {'export' if encoder else 'checkpoint'}; tasks.export takes a "
                         "checkpoint written by python -m tasks.multitask")
    model = build_multitask(settings)
    load_weights(model, state, checkpoint)
    out = Path(out)
    model.bert.save_pretrained(str(out / EXPORT_ENCODER))
    source = minbert.checkpoint.resolve(settings.get("model", "minilm"))
    minbert.Tokenizer.from_pretrained(str(source)).save_pretrained(out / EXPORT_ENCODER)
    if (source / "vocab.txt").is_file():                          # for transformers' BertTokenizer too
        shutil.copyfile(source / "vocab.txt", out / EXPORT_ENCODER / "vocab.txt")
    encoder_keys = {f"bert.{k}" for k in minbert.BertModel(model.bert.config).state_dict()}
    heads = {k: v for k, v in model.state_dict().items() if k not in encoder_keys}
    torch.save(heads, out / EXPORT_HEADS)
    full = load_checkpoint(from_run_json(Path(checkpoint))[2] if (Path(checkpoint) / RUN_FILE).is_file() else checkpoint)
    best = full["history"][full["best_epoch"] - 1] if full.get("history") else {}
    (out / EXPORT_SETTINGS).write_text(json.dumps({
        "kind": "multitask", "settings": settings, "best_epoch": full.get("best_epoch"),
        "dev": {k[4:]: v for k, v in best.items() if k.startswith("dev_")}, "exported_from": str(checkpoint)},
        indent=1))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tasks.export", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a run directory of python -m tasks.multitask, or its checkpoint")
    p.add_argument("out", help="the directory to write")
    args = p.parse_args(argv)
    out = export(args.checkpoint, args.out)
    print(f"wrote {out}/{EXPORT_ENCODER}/ (Hugging Face BERT), {out}/{EXPORT_HEADS}, {out}/{EXPORT_SETTINGS}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
