"""Writing a matplotlib figure: in the format its name says, atomically (every command's and report's figures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minbert.files import replacing


def save_figure(fig: Any, path: str | Path, **savefig: Any) -> Path:
    """Write `fig` to `path` in the format of its extension (a name without one gets .png, as figure_to_write
    names it) through a temporary file (replacing: a failed write keeps the previous figure and leaves nothing),
    then close it; returns the path written. The format is passed: the temporary's name says none."""
    import matplotlib.pyplot as plt
    path = Path(path)
    if not path.suffix:
        path = path.with_name(f"{path.name}.png")
    try:
        with replacing(path, sync=True) as tmp:
            fig.savefig(tmp, format=path.suffix[1:].lower(), **savefig)
    finally:
        plt.close(fig)
    return path
