"""Draw what one layer attends to: a PNG grid of its heads' attention probabilities for a sentence (or a pair).

    python -m tasks.attention --text "The cat sat on the mat." --layer 3 --out attention.png
    python -m tasks.attention --text "A man plays a guitar." --pair "Someone makes music." --layer 6 --model minilm
    python -m tasks.attention --model runs/classifier-sst-full-model-DATE-TIME --layer 6   # after fine-tuning

Each panel is one head: row i is what token i (the query) attends to, column j is token j (the key), and each row
sums to 1 (BertModel's output_attentions: softmax(QK^T / sqrt(hs) + mask), eval mode). Layers are counted from 1.
--model is a checkpoint, or a trained run's directory (tasks.classifier, multitask, simcse, deebert): its best epoch's
encoder, to set beside the checkpoint it started from.
The probabilities come from the attention function the model runs (--attention): in a student tree by default your
attention() in minbert/model.py, so a mistake in it shows in the maps.
"""

from __future__ import annotations

if not __package__:  # run as a file (python tasks/attention.py): this tree is not on the path
    import sys
    print("error: run it as python -m tasks.attention from the tree's root (the folder holding minbert/ and tasks/), "
          "not as a file", file=sys.stderr)
    sys.exit(2)

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

import minbert

from .core.checkpoints import trained_encoder
from .core.errors import ConfigurationError, MissingFileError, figure_to_write, run_cli, user_path
from .core.figures import save_figure
from .core.recipe import ATTENTIONS, ATTN_IMPLEMENTATION, DEFAULT_ATTENTION
from .core.run_files import trained_checkpoint, trained_files
from .core.runs import RUN_FILE, no_checkpoint, read_run_json
from .core.settings import parse, setting


@dataclass
class Settings:
    text: str = setting("The cat sat on the mat.", help="the sentence")
    pair: str | None = setting(None, help="a second sentence, for a sentence pair ([SEP] between, segment 1)")
    layer: int = setting(1, help="the layer to draw, 1 to the model's number of layers")
    model: str = setting("minilm", parse=user_path, help="a checkpoint (minilm, a Hugging Face name or a directory), or a trained run's "
                                        "directory: its best epoch's encoder")
    out: str = setting("attention.png", parse=figure_to_write,
                       help="the PNG to write (a name without an extension gets .png)")
    attention: str = setting(
        DEFAULT_ATTENTION, choices=ATTENTIONS,
        help="the attention function the maps come from: eager, minbert/model.py's attention() (yours, in a student "
             "tree: the default there); fused, torch's scaled_dot_product_attention (the reference code's default)")


def layer_attention(model: minbert.BertModel, tokenizer: minbert.Tokenizer, text: str, pair: str | None,
                    layer: int) -> tuple[torch.Tensor, list[str]]:
    """Layer `layer`'s (1-based) attention probabilities for one sentence or pair, (nh, T, T), and its T tokens."""
    L = model.config.num_hidden_layers
    if not 1 <= layer <= L:
        raise ConfigurationError(f"--layer {layer}: the model has layers 1 to {L}")
    batch = tokenizer(text, pair)
    with torch.no_grad():
        probs = model.eval()(**batch, output_attentions=True).attentions[layer - 1][0]  # (nh, T, T)
    return probs, [tokenizer.backend.id_to_token(i) for i in batch.input_ids[0].tolist()]


def draw(probs: torch.Tensor, tokens: list[str], title: str, out: str | Path) -> Path:
    """One panel per head, tokens on both axes (rows: queries, columns: keys), on one 0-1 colour scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nh, T = probs.shape[0], len(tokens)
    cols = min(nh, 4)
    rows = math.ceil(nh / cols)
    side = 1.2 + 0.22 * T
    # constrained: room for the title above the top row and for the colour bar, whatever the sentence's length
    fig, axes = plt.subplots(rows, cols, figsize=(cols * side + 1, rows * side + 0.4), squeeze=False,
                             layout="constrained")
    for h, ax in enumerate(axes.flat):
        if h >= nh:
            ax.axis("off")
            continue
        image = ax.imshow(probs[h].numpy(), vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"head {h + 1}", fontsize=9)
        ax.set_xticks(range(T), tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(T), tokens, fontsize=7)
    fig.colorbar(image, ax=axes, shrink=0.6, label="attention probability")
    fig.suptitle(title)
    return save_figure(fig, out, dpi=100)


def encoder(model: str, attention: str) -> tuple[minbert.BertModel, str, str]:
    """(the encoder to draw, the checkpoint whose tokenizer it reads, its name for the title): --model's checkpoint,
    or a run directory's trained encoder (its best state's bert.* weights on the run's own --model)."""
    attn = ATTN_IMPLEMENTATION[attention]
    run = Path(model)
    if run.is_dir() and not (run / RUN_FILE).is_file() and not (run / "config.json").is_file():
        raise MissingFileError(f"{run}: neither a checkpoint (no config.json) nor a run directory (no {RUN_FILE})")
    if not (run / RUN_FILE).is_file():
        return minbert.load_pretrained(model, attn_implementation=attn), model, model
    record = read_run_json(run)
    settings = record.get("settings") or {}
    base = trained_files(record).get("training.model") or (settings.get("training") or {}).get("model")   # a dir
    if not base:
        raise ConfigurationError(f"{run}: a run of python -m tasks.{record.get('command')}, which trains no encoder; "
                                 "give a run of tasks.classifier, multitask, simcse or deebert, or a checkpoint")
    if (settings.get("pals") or {}).get("pals") not in (None, "none"):
        raise ConfigurationError(f"{run}: a run with PALs, whose layers add a task's PAL to the attention's output: "
                                 "the encoder's maps alone would not be what the run computes")
    checkpoint = trained_checkpoint(run)
    if not checkpoint.is_file():
        raise no_checkpoint(run, record.get("command") or "COMMAND", checkpoint)
    bert, full = trained_encoder(checkpoint, base, attn, run=run, kind=record.get("command"))
    return bert, base, f"{run.name} (epoch {full.get('best_epoch')})"


def main(argv: list[str] | None = None) -> int:
    s = parse(Settings, argv, prog="python -m tasks.attention", description=__doc__)
    model, tokenizer_from, name = encoder(s.model, s.attention)
    tokenizer = minbert.Tokenizer.from_pretrained(tokenizer_from)
    probs, tokens = layer_attention(model, tokenizer, s.text, s.pair, s.layer)
    title = f"{name}: layer {s.layer} of {model.config.num_hidden_layers}, {probs.shape[0]} heads (rows attend to columns)"
    print(f"wrote {draw(probs, tokens, title, s.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
