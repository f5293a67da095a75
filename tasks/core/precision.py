"""Which precision trains on which device: one table, RULES, read top to bottom; the first row that matches the
device decides (mixed precision: Micikevicius et al., 2018).

A row names a device kind, the condition it holds under, the precisions that train there, fastest first
(`--precision auto` takes the first), and for each one it refuses, what to use instead. check_precision raises that
advice; resolve_precision turns "auto" into the row's first precision. docs/training.md shows the table
(markdown_table(); a test keeps the two equal).

The version facts, read from torch's own macOS arm64 wheels (torch/amp/autocast_mode.py, torch/amp/grad_scaler.py
and the kernels registered in torch/lib/libtorch_cpu.dylib of 2.4.0, 2.5.0, 2.6.0, 2.7.0 and 2.8.0):
- MPS autocast arrived in torch 2.5, float16 only (2.4 has no AutocastMPS dispatch key);
- bfloat16 autocast on MPS arrived in 2.6, and only on macOS 14 or newer: below that torch warns and switches
  autocast off, so a bf16 run would silently train in fp32; we refuse it instead;
- torch.amp.GradScaler works on MPS from 2.8 (its MPS _amp_update_scale_ and unscale kernels, absent in 2.7, where
  scaler.step fails converting the scale to float64), so fp16 on MPS needs 2.8: without a scaler, small fp16
  gradients underflow to 0.
- CUDA: torch.cuda.is_bf16_supported() defaults to including_emulation=True and then says yes on any GPU that can
  hold a bf16 tensor, a T4 (compute capability 7.5) included, where bf16 is emulated and slow. We read the compute
  capability instead: bf16 is native from 8.0 (Ampere) on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .errors import ConfigurationError

PRECISIONS = ("fp32", "bf16", "fp16")             # what autocast() and fit() run in
PRECISION_CHOICES = (*PRECISIONS, "auto")          # what --precision takes: "auto" is resolved per device


def torch_version() -> tuple[int, int]:
    """torch's (major, minor): '2.8.0+cpu' -> (2, 8), '2.10.0.dev20250101' -> (2, 10)."""
    major, minor = re.match(r"(\d+)\.(\d+)", str(torch.__version__)).groups()
    return int(major), int(minor)


def cuda_has_bf16(device: torch.device) -> bool:
    """Whether the GPU computes bf16 natively: compute capability 8.0 or newer (Ampere on), or ROCm (torch's answer
    there). Not torch.cuda.is_bf16_supported(), which says yes on a T4 (module docstring)."""
    if torch.version.hip:
        return True
    return torch.cuda.get_device_capability(device)[0] >= 8


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (avx512_bf16 or AMX); without, bf16 autocast is slower than fp32."""
    probes = [getattr(torch.cpu, f, None) for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(probe is not None and probe() for probe in probes)


def macos14() -> bool:
    """Whether MPS runs on macOS 14 (Sonoma) or newer, as torch's MPS autocast checks it for bf16."""
    return torch.backends.mps.is_macos_or_newer(14, 0)


@dataclass(frozen=True)
class Rule:
    """One row of the table: on `device` (a torch.device type), when `applies`, train in `allowed`."""

    device: str
    when: str                                   # the condition in words, for errors and docs
    applies: Callable[[torch.device], bool]
    allowed: tuple[str, ...]                    # fastest first: --precision auto takes allowed[0]
    instead: dict[str, str]                     # each refused precision -> what to use ({torch}: the version)


def _always(device: torch.device) -> bool:
    return True


def _torch_from(major: int, minor: int, *, sonoma: bool = False) -> Callable[[torch.device], bool]:
    return lambda device: torch_version() >= (major, minor) and (not sonoma or macos14())


_NO_SCALER = "torch {torch} has no gradient scaler on MPS (from torch 2.8)"
_NO_SONOMA = "bf16 on MPS needs macOS 14 (Sonoma) or newer"

RULES: tuple[Rule, ...] = (
    Rule("cuda", "native bf16: compute capability 8.0 or newer (A100, L4, RTX 30xx, H100) or ROCm",
         cuda_has_bf16, ("bf16", "fp16", "fp32"), {}),
    Rule("cuda", "no native bf16: compute capability below 8.0 (T4, V100, P100, RTX 20xx)", _always,
         ("fp16", "fp32"), {"bf16": "this GPU would emulate bf16, slowly: use --precision fp16 (with its gradient "
                                    "scaler) or fp32"}),
    Rule("mps", "torch 2.8 or newer, macOS 14 or newer", _torch_from(2, 8, sonoma=True), ("fp16", "bf16", "fp32"), {}),
    Rule("mps", "torch 2.8 or newer, macOS 13 or older", _torch_from(2, 8), ("fp16", "fp32"),
         {"bf16": f"{_NO_SONOMA}: use --precision fp16 (with its gradient scaler) or fp32"}),
    Rule("mps", "torch 2.6 or 2.7, macOS 14 or newer", _torch_from(2, 6, sonoma=True), ("bf16", "fp32"),
         {"fp16": f"{_NO_SCALER}: use --precision bf16, or upgrade torch for fp16"}),
    Rule("mps", "torch 2.6 or 2.7, macOS 13 or older", _torch_from(2, 6), ("fp32",),
         {"bf16": f"{_NO_SONOMA}: use --precision fp32",
          "fp16": f"{_NO_SCALER}: use --precision fp32, or upgrade torch for fp16"}),
    Rule("mps", "torch 2.5 or older", _always, ("fp32",),
         {"bf16": "torch {torch} has no bf16 autocast on MPS (from torch 2.6, on macOS 14): use --precision fp32, "
                  "or upgrade torch",
          "fp16": f"{_NO_SCALER}: use --precision fp32, or upgrade torch"}),
    Rule("cpu", "avx512_bf16 or AMX: native bf16", lambda device: cpu_has_bf16(), ("bf16", "fp32"),
         {"fp16": "fp16 trains on CUDA and MPS, with a gradient scaler, not on a CPU: use --precision bf16 "
                  "(native here) or fp32"}),
    Rule("cpu", "neither avx512_bf16 nor AMX: bf16 is emulated, slower than fp32", _always, ("fp32", "bf16"),
         {"fp16": "fp16 trains on CUDA and MPS, with a gradient scaler, not on a CPU: use --precision fp32 (bf16 "
                  "runs too, but emulated here, slower)"}),
)


def rule(device: torch.device) -> Rule:
    """The first row of RULES for this device; fp32 alone on a device the table does not know."""
    for row in RULES:
        if row.device == device.type and row.applies(device):
            return row
    return Rule(device.type, "a device minbert has no precision rules for", _always, ("fp32",),
                {p: "use --precision fp32" for p in PRECISIONS if p != "fp32"})


def check_precision(device: torch.device, precision: str) -> None:
    """A clear error, naming what to use, for a precision the device cannot train in (RULES); "auto" always passes."""
    if precision not in PRECISION_CHOICES:
        raise ValueError(f"precision must be one of {PRECISION_CHOICES}, not {precision!r}")
    row = rule(device)
    if precision != "auto" and precision not in row.allowed:
        advice = row.instead[precision].format(torch=torch.__version__)
        raise ConfigurationError(f"--precision {precision} on {device.type} ({row.when}): {advice}")


def resolve_precision(device: torch.device, precision: str) -> str:
    """The precision to train in: "auto" becomes this device's fastest safe one; any other is checked and kept."""
    check_precision(device, precision)
    return rule(device).allowed[0] if precision == "auto" else precision


def markdown_table() -> str:
    """RULES as the table in docs/training.md."""
    lines = ["| device | when | trains in (auto: the first) | refused: what to use |", "|---|---|---|---|"]
    for row in RULES:
        refused = "; ".join(f"{p}: {advice.format(torch='X.Y')}" for p, advice in row.instead.items()) or "-"
        lines.append(f"| {row.device} | {row.when} | {', '.join(row.allowed)} | {refused} |")
    return "\n".join(lines)
