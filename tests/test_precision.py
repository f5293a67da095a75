"""The precision table (tasks/core/precision.py) over mocked devices: CUDA with and without native bf16, MPS by torch and
macOS version, CPUs with and without avx512_bf16/AMX; --precision auto, and fit() and the CLIs resolving it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TEST_DEVICE

from tasks.core.distributed import pick_device
from tasks.core.errors import ConfigurationError
from tasks.core.precision import (
    PRECISION_CHOICES,
    PRECISIONS,
    RULES,
    check_precision,
    markdown_table,
    resolve_precision,
)
from tasks.core.recipe import autocast

pytestmark = pytest.mark.usefixtures("one_thread")
CUDA, MPS, CPU = torch.device("cuda"), torch.device("mps"), torch.device("cpu")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "training.md"


@pytest.fixture
def gpu(monkeypatch):
    """A mocked CUDA device of a given compute capability; torch.cuda.is_bf16_supported() says yes, as it does on a
    T4 with its default including_emulation=True, so the table must not trust it."""
    def make(capability: tuple[int, int], hip: str | None = None) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
        monkeypatch.setattr(torch.version, "hip", hip)
    return make


@pytest.fixture
def mac(monkeypatch):
    """A mocked MPS device under a given torch version, on macOS 14 or newer or older."""
    def make(version: str, sonoma: bool) -> None:
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
        monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: sonoma and major <= 14)
        monkeypatch.setattr(torch, "__version__", version)
    return make


@pytest.fixture
def cpu(monkeypatch):
    """Mocked CPU probes: avx512_bf16 and AMX present or absent."""
    def make(avx512_bf16: bool, amx: bool = False) -> None:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    return make


def allowed(device: torch.device) -> set[str]:
    out = set()
    for p in PRECISIONS:
        try:
            check_precision(device, p)
            out.add(p)
        except ConfigurationError:
            pass
    return out


def test_a_t4_refuses_bf16_with_the_fp16_advice(gpu):
    gpu((7, 5))                                            # a T4: bf16 only emulated
    with pytest.raises(ConfigurationError, match=r"--precision bf16 on cuda \(no native bf16.*use --precision fp16"):
        check_precision(CUDA, "bf16")
    assert allowed(CUDA) == {"fp16", "fp32"} and resolve_precision(CUDA, "auto") == "fp16"


@pytest.mark.parametrize("capability", [(8, 0), (9, 0)])
def test_ampere_and_later_train_in_bf16_and_auto_picks_it(gpu, capability):
    gpu(capability)
    assert allowed(CUDA) == set(PRECISIONS) and resolve_precision(CUDA, "auto") == "bf16"


def test_rocm_takes_torchs_word_for_bf16(gpu):
    gpu((9, 0), hip="6.2")
    assert resolve_precision(CUDA, "auto") == "bf16"


@pytest.mark.parametrize("version, sonoma, trains_in, auto, advice", [
    ("2.4.1", True, {"fp32"}, "fp32", {"bf16": "from torch 2.6", "fp16": "from torch 2.8"}),
    ("2.5.1", True, {"fp32"}, "fp32", {"bf16": "no bf16 autocast on MPS", "fp16": "no gradient scaler"}),
    ("2.6.0", True, {"bf16", "fp32"}, "bf16", {"fp16": "torch 2.6.0 has no gradient scaler.*use --precision bf16"}),
    ("2.7.1", False, {"fp32"}, "fp32", {"bf16": "macOS 14", "fp16": "no gradient scaler"}),
    ("2.8.0", True, {"fp16", "bf16", "fp32"}, "fp16", {}),
    ("2.8.0", False, {"fp16", "fp32"}, "fp16", {"bf16": "macOS 14.*use --precision fp16"}),
    ("2.10.0.dev20250601+cpu", True, {"fp16", "bf16", "fp32"}, "fp16", {}),   # 2.10 > 2.8, not "2.1"
])
def test_mps_by_torch_and_macos_version(mac, version, sonoma, trains_in, auto, advice):
    mac(version, sonoma)
    assert allowed(MPS) == trains_in and resolve_precision(MPS, "auto") == auto
    for precision, pattern in advice.items():
        with pytest.raises(ConfigurationError, match=rf"--precision {precision} on mps .*{pattern}"):
            check_precision(MPS, precision)


@pytest.mark.parametrize("avx512_bf16, amx, auto", [(True, False, "bf16"), (False, True, "bf16"),
                                                    (False, False, "fp32")])
def test_cpu_with_and_without_native_bf16(cpu, avx512_bf16, amx, auto):
    cpu(avx512_bf16, amx)
    assert allowed(CPU) == {"fp32", "bf16"} and resolve_precision(CPU, "auto") == auto
    with pytest.raises(ConfigurationError, match=rf"--precision fp16 on cpu .*use --precision {auto}"):
        check_precision(CPU, "fp16")


def test_a_device_without_rules_trains_in_fp32_only():
    meta = torch.device("meta")
    assert allowed(meta) == {"fp32"} and resolve_precision(meta, "auto") == "fp32"


def test_every_row_trains_in_fp32_and_says_what_to_use_for_each_refusal():
    for row in RULES:
        refused = set(PRECISIONS) - set(row.allowed)
        assert "fp32" in row.allowed and set(row.instead) == refused, row.when
        assert all("use --precision " in advice for advice in row.instead.values()), row.when
    with pytest.raises(ValueError, match="precision must be one of"):
        check_precision(CPU, "fp8")


def test_the_docs_show_the_table():
    assert markdown_table() in DOCS.read_text()


def test_auto_is_a_flag_choice_and_autocast_wants_it_resolved():
    from tasks.classifier import parse_settings
    assert parse_settings(["--precision", "auto"]).recipe.precision == "auto" and "auto" in PRECISION_CHOICES
    with pytest.raises(ValueError):
        autocast(CPU, "auto")


def test_fit_resolves_auto_once_and_says_to_what(cpu, monkeypatch):
    from conftest import fit_with

    import tasks.core.train

    cpu(False)                                           # auto on a CPU without native bf16: fp32
    asked = []
    monkeypatch.setattr(tasks.core.train, "resolve_precision", lambda d, p: asked.append(p) or resolve_precision(d, p))
    said: list[str] = []
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    batches = [{"x": torch.randn(3, 4), "y": torch.tensor([0, 1, 0])}]
    fit_with(model, torch.optim.SGD(model.parameters(), lr=0.1), lambda epoch: batches,
             lambda m, b: torch.nn.functional.cross_entropy(m(b["x"]), b["y"]), lambda m: {"zero": 0.0},
             metric="zero", epochs=2, device=CPU, progress=False, log=said.append, precision="auto")
    assert asked == ["auto"] and "--precision auto: fp32 on cpu" in said


def test_the_cli_stores_what_auto_resolved_to_and_says_it_once(tiny_dir, tmp_path, monkeypatch, capsys):
    from tasks import deebert

    seen = []

    class Stop(Exception):
        pass

    def fake_fit(work, recipe, options, terms=None):
        seen.append({"precision": recipe.precision, "config": options.config})
        raise Stop

    monkeypatch.setattr(deebert, "fit", fake_fit)
    argv = ["--model", str(tiny_dir), "--device", TEST_DEVICE, "--no-progress", "--max-train-examples", "8",
            "--max-eval-examples", "8", "--out", str(tmp_path / "run"), "--precision", "auto"]
    with pytest.raises(Stop):
        deebert.run(deebert.parse_settings(argv))
    expected = resolve_precision(torch.device(TEST_DEVICE), "auto")
    assert seen[0]["precision"] == expected and seen[0]["config"]["recipe.precision"] == expected
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("--precision auto")]
    assert said == [f"--precision auto: {expected} on {pick_device(TEST_DEVICE)}"], said   # docs/training.md
