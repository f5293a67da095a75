"""The files of an export directory (python -m tasks.export): its settings and kind (multitask.json), the weights
outside the encoder (heads.pt) and the encoder as a Hugging Face directory; read back by tasks.predict, and the one
check that a checkpoint's weights fit the model its settings describe (load_weights)."""

from __future__ import annotations

from pathlib import Path

import torch

from .config_files import read_json
from .errors import ConfigurationError
from .terms import without_term_weights

KINDS = ("classifier", "multitask", "deebert")
EXPORT_SETTINGS = "multitask.json"   # an export directory's settings (tasks/export.py)
EXPORT_HEADS = "heads.pt"            # its weights outside the encoder: the heads, PALs
EXPORT_ENCODER = "encoder"           # its encoder, a Hugging Face directory


def read_export(path: Path) -> tuple[str, dict, dict[str, torch.Tensor]]:
    """(kind, stored settings, heads) of an export directory; a damaged multitask.json or heads.pt is one line."""
    where = path / EXPORT_SETTINGS
    meta = read_json(where, "export settings file")
    if not isinstance(meta, dict) or not isinstance(meta.get("settings"), dict) or meta.get("kind") not in KINDS:
        why = (f"kind {meta['kind']!r} is not one of {', '.join(KINDS)}" if isinstance(meta, dict) and "kind" in meta
               and meta["kind"] not in KINDS else 'not an export\'s settings (an object with "kind" and "settings")')
        raise ConfigurationError(f"{where}: {why}: export the run again (python -m tasks.export RUN_DIR OUT)")
    heads = path / EXPORT_HEADS
    try:
        state = torch.load(heads, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, EOFError, UnpicklingError, ...
        detail = next((line for line in str(e).splitlines() if line.strip()), "no details").split(". ")[0][:200]
        raise ConfigurationError(f"{heads}: cannot read the export's weights ({type(e).__name__}: {detail}); it is "
                                 "truncated or damaged: copy the export again, or export the run again") from None
    if not isinstance(state, dict):
        raise ConfigurationError(f"{heads}: not an export's weights (a dict of tensors): export the run again")
    return meta["kind"], meta["settings"], state


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], path: str | Path, strict: bool = True) -> None:
    """load_state_dict, its mismatch reported as a refusal that names the checkpoint."""
    state = without_term_weights(state, model)   # what a term keeps in the model (SMART's theta~): training only
    try:
        missing, unexpected = model.load_state_dict(state, strict=strict)
    except RuntimeError as e:
        raise ConfigurationError(f"{path}: its weights do not fit the model its settings describe: {e}") from None
    outside = [k for k in missing if not k.startswith("bert.")]  # without strict: the encoder comes from elsewhere
    if unexpected or outside:
        raise ConfigurationError(f"{path}: weights unexpected {unexpected[:5]}, missing {outside[:5]}")
