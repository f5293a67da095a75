"""The examples the pages show, run or computed as written: README's First use block, docs/leaderboard.md's measured
figures and stated defaults, the handout's part 2 and extension defaults, its not-written example (its line taken from
a made part1 tree, its message from that tree's command), its wrong-shape example (the model's own message) and
docs/training.md's new command on the shared loop (run as `python -m tasks.mycommand`, one epoch)."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import re
from pathlib import Path

import pytest
import torch
from test_doc_claims import HANDOUT, ROOT, flat


def test_the_readmes_first_use_snippet_runs_and_finds_the_two_sentences_alike() -> None:
    """README's "First use" block, run as it is: it loads the offline MiniLM, and the printed cosine of the two
    paraphrases is a number well above an unrelated pair's."""
    block = re.search(r"## First use\n\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)[1]

    def printed(code: str) -> float:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md (First use)", "exec"), {})  # noqa: S102 (the README's own block, as read)
        return float(out.getvalue().strip())
    cosine = printed(block)
    assert 0.5 < cosine < 1.0, cosine
    assert printed(block.replace("A kitten was sitting on a rug.", "Stock prices fell sharply on Monday.")) < cosine - 0.3


def test_docs_leaderboards_figures_are_its_benchmark_pages_and_the_codes() -> None:
    """docs/leaderboard.md's measurements are copied from benchmarks/leaderboard.md: every number of its Measurements
    paragraph is on that page; its stated defaults (CoSENT's lambda, MNRL's scale, predict's batch) are the code's."""
    from minbert.sentence_losses import cosent_loss, mnrl_loss
    from tasks import predict
    page = (ROOT / "docs" / "leaderboard.md").read_text()
    bench = (ROOT / "benchmarks" / "leaderboard.md").read_text()
    para = page[page.index("**Measurements.**"):]
    para = para[:para.find("\n\n")] if "\n\n" in para else para
    numbers = re.findall(r"(?<![\d.])[-+]?\d+(?:\.\d+)?", re.sub(r"(\d)-(\d)", r"\1 \2", para))   # a-b: a range
    assert len(numbers) > 20
    assert [n for n in numbers if n.lstrip("+") not in bench] == []
    lam = inspect.signature(cosent_loss).parameters["lam"].default
    scale = inspect.signature(mnrl_loss).parameters["scale"].default
    assert f"CoSENT (Su, 2022; lambda {lam:g})" in page and f"(Henderson et al., 2017; scale {scale:g})" in page
    from tasks.core.runs import RunOptions
    assert {a.dest: a.default for a in predict.build_parser()._actions}["eval_batch_size"] is None   # the run's
    assert (f"`--eval-batch-size` defaults to the run's (from its run.json; {RunOptions().eval_batch_size} for a "
            "checkpoint without one" in " ".join(page.split()))


# ---------------------------------------------------------------- 11. the handout's part 2 and extension defaults

def test_the_handout_s_part_2_and_extension_defaults_are_the_codes() -> None:
    """The head's width (Linear(d_in, 512)), PALs' d (204) and SimCSE's temperature (0.05), as the handout states
    them, are the defaults of the code and of the commands' flags."""
    from minbert.multitask import MultitaskConfig
    from minbert.pals import PalsConfig
    from minbert.simcse import SimCSEConfig, sup_simcse_loss, unsup_simcse_loss
    from tasks.multitask.settings import Design, Pals
    text = flat(HANDOUT)
    width = int(re.search(r"is an MLP, dropout, Linear\(d_in, (\d+)\), GELU, Linear\((\d+), d_out\)", text)[1])
    assert width == MultitaskConfig.head_hidden == Design().head_hidden
    assert f"Linear({width}, d_out)" in text
    d = int(re.search(r"\(d = (\d+) for bert-base\)", text)[1])
    assert d == PalsConfig.size == Pals().pals_size
    t = float(re.search(r"The temperature t \(([\d.]+) by default\)", text)[1])
    assert t == SimCSEConfig.temperature
    for loss in (unsup_simcse_loss, sup_simcse_loss):
        assert inspect.signature(loss).parameters["temperature"].default == t


def test_the_handout_s_not_written_example_is_the_message_a_part1_tree_prints(tmp_path: Path) -> None:
    """The handout's example of a run stopped by a stub (`error: BertEmbeddings.forward in minbert/model.py:LINE is not
    written yet ... check it with python -m assignments.check core`) is the start and the end of the message a part1
    tree prints, LINE being the stub's raise line there (taken from the made tree, so the example cannot drift from
    model.py's edits)."""
    import sys

    import warm

    from assignments.make import generate
    example = re.search(r"e\.g\. `(error: BertEmbeddings\.forward in minbert/model\.py:(\d+) is not written yet "
                        r"\.\.\. [^`]*)`", flat(HANDOUT))
    assert example, "the handout's not-written example is gone"
    tree = tmp_path / "p1"
    generate(tree, data=False, profile="part1")
    stubbed = (tree / "minbert" / "model.py").read_text()
    node = next(n for n in ast.walk(ast.parse(stubbed)) if isinstance(n, ast.ClassDef) and n.name == "BertEmbeddings")
    forward = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    raises = [n.lineno for n in ast.walk(forward) if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Name)
              and n.exc.id == "NotImplementedError"]
    assert len(raises) == 1 and int(example[2]) == raises[0], (example[0], raises)
    code = ("import sys, torch; from tasks.core.errors import run_cli; from minbert.model import BertEmbeddings; "
            "from assignments.common import _tiny_config; "
            "sys.exit(run_cli(lambda: BertEmbeddings(_tiny_config())(torch.zeros(1, 3, dtype=torch.long))))")
    proc = warm.run([sys.executable, "-c", code], cwd=tree, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)},
                    capture_output=True, text=True, timeout=120, check=False)
    message = " ".join(proc.stderr.split())
    start, end = example[1].split(" ... ")
    assert proc.returncode == 1 and message.startswith(start) and end in message, (proc.stderr, example[1])


def test_the_handouts_wrong_shape_example_is_the_message_the_model_raises() -> None:
    """The handout's example of a wrong-shaped attention() is BertLayer's own message for that shape."""
    from minbert.model import BertConfig, BertLayer
    from minbert.shapes import ShapeError
    layer = BertLayer(BertConfig(vocab_size=10, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                 intermediate_size=8, max_position_embeddings=16)).eval()
    layer.attend = lambda q, k, v, mask, p, training: q                   # the heads never merged: (B, nh, T, hs)
    with pytest.raises(ShapeError) as e:
        layer(torch.zeros(8, 11, 32), torch.zeros(8, 1, 1, 11))
    shown = re.search(r"e\.g\. `error: (attention\(\) returned shape .*?), \.\.\.`", flat(HANDOUT))[1]
    assert str(e.value).startswith(shown), (str(e.value), shown)


def test_the_training_pages_new_cli_runs_as_written_one_epoch(tmp_path: Path, tiny_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/training.md's "A new CLI on the shared loop" block, run unchanged as `python -m tasks.mycommand` would run
    it (as __main__, its flags on the command line) on the tiny random model and a few rows of SST in data/: one epoch
    trains, and runs/mycommand-DATE-TIME/ holds run.json (the command, its settings, its result), the checkpoint and
    the curves; the exit status is 0."""
    import importlib.machinery
    import json
    import sys
    import types

    from conftest import DATA

    from tasks.core.runs import CHECKPOINT
    page = (ROOT / "docs" / "training.md").read_text()
    block = re.search(r"## A new CLI on the shared loop\n.*?```python\n(.*?)```", page, re.DOTALL)[1]
    (tmp_path / "data").mkdir()
    for name, rows in (("ids-sst-train.csv", 16), ("ids-sst-dev.csv", 8)):
        lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (tmp_path / "data" / name).write_text("".join(lines[:1 + rows]), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["mycommand", "--model", str(tiny_dir), "--epochs", "1", "--batch-size", "8",
                                      "--device", "cpu", "--threads", "1", "--no-progress"])
    main = types.ModuleType("__main__")                        # what `python -m tasks.mycommand` runs the file as
    main.__spec__ = importlib.machinery.ModuleSpec("tasks.mycommand", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    with pytest.raises(SystemExit) as exited:
        exec(compile(block, "docs/training.md (A new CLI)", "exec", dont_inherit=True), main.__dict__)  # noqa: S102
    assert exited.value.code == 0
    run, = (tmp_path / "runs").iterdir()                      # $MINBERT_RUNS (the tests' runs/): runs/mycommand-DATE-TIME
    assert re.fullmatch(r"mycommand-\d{8}-\d{6}", run.name), run.name
    record = json.loads((run / "run.json").read_text())
    assert record["command"] == "mycommand" and record["settings"]["training"]["epochs"] == 1
    assert record["result"]["best_epoch"] == 1 and 0 <= record["result"]["dev_accuracy"] <= 1
    assert (run / CHECKPOINT).is_file() and list(run.glob("*curves*"))
