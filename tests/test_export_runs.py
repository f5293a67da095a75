"""tasks.export of every kind of run (its run.json says which): a classifier's, a DeeBERT's and a SimCSE's encoder as a
Hugging Face directory that minbert and transformers load, equal to the run's best state; what cannot export says
why. (A multitask run's export: tests/test_typed_multitask.py and tests/test_toolkit_cli.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import warm
from conftest import ROOT
from test_typed_runs import classifier_argv, deebert_argv, simcse_argv

import minbert
from tasks import classifier, export
from tasks.core.checkpoints import load_checkpoint
from tasks.core.errors import ConfigurationError, MissingFileError, run_cli
from tasks.core.runs import run_paths, write_run_json

pytestmark = pytest.mark.usefixtures("one_thread")


def encoder_of(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The encoder's weights in a checkpoint's best state, under BertModel's own names."""
    best = load_checkpoint(checkpoint)["best_state"]
    return {k[len("bert."):]: v for k, v in best.items() if k.startswith("bert.")}


def exported_equals(run_dir: Path, checkpoint: Path, out: Path, kind: str) -> None:
    """export RUN_DIR OUT: minbert loads OUT with the best state's encoder bit for bit; transformers loads it too and
    computes the same hidden states, and its AutoTokenizer truncates where minbert's does."""
    transformers = pytest.importorskip("transformers")
    assert export.main([str(run_dir), str(out)]) == 0
    want, ours = encoder_of(checkpoint), minbert.load_pretrained(str(out))
    got = ours.state_dict()
    assert want and got.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(got[key], value), key
    record = json.loads((out / export.EXPORT_RECORD).read_text())
    assert record["kind"] == kind and record["checkpoint"] == str(checkpoint)
    tok = minbert.Tokenizer.from_pretrained(str(out))                         # the run's tokenizer beside it
    theirs = transformers.AutoTokenizer.from_pretrained(str(out))             # truncating at the model's limit
    assert theirs.model_max_length == tok.max_length == ours.config.max_position_embeddings
    long = "a fine film " * 200
    assert theirs(long, truncation=True)["input_ids"] == tok.encode(long) and len(tok.encode(long)) == tok.max_length

    hf = transformers.BertModel.from_pretrained(str(out)).eval()
    ids = torch.tensor([[101, 7592, 2088, 102]])
    with torch.no_grad():
        expected = ours.eval()(ids, torch.ones_like(ids)).last_hidden_state
        actual = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_a_classifier_run_exports_its_best_encoder_and_what_cannot_export_says_why(tiny_dir, tmp_path):
    argv = classifier_argv(tiny_dir, tmp_path) + ["--epochs", "2"]
    run = tmp_path / "run"
    classifier.run(classifier.parse_settings(argv + ["--run-dir", str(run)]))
    exported_equals(run, run / "checkpoint.pt", tmp_path / "exp", "classifier")

    (tmp_path / "plain").mkdir()
    with pytest.raises(ConfigurationError, match=r"plain: not a run directory \(no run.json\)"):
        export.export(tmp_path / "plain", tmp_path / "x")
    stopped = tmp_path / "stopped"                                   # run.json written, killed before a checkpoint
    settings = classifier.parse_settings(argv + ["--run-dir", str(stopped)])
    write_run_json(run_paths(settings.run, "classifier"), "classifier", settings)
    with pytest.raises(MissingFileError, match=r"stopped: no checkpoint .*checkpoint.pt is missing.*: python -m tasks.classifier --config .*stopped.run.json --run-dir .*stopped$"):
        export.export(stopped, tmp_path / "x")
    assert run_cli(lambda: export.main([str(stopped), str(tmp_path / "x")])) == 1     # one line, exit 1
    assert not (tmp_path / "x").exists()


def test_a_deebert_run_exports_its_fine_tuned_encoder(tiny_dir, tmp_path):
    from tasks import deebert
    run = tmp_path / "run"
    deebert.run(deebert.parse_settings(deebert_argv(tiny_dir, tmp_path) + ["--out", str(run)]))
    exported_equals(run, run / "stage2.pt", tmp_path / "exp", "deebert")
    stage1 = encoder_of(run / "stage1.pt")                 # stage 2 trains the off-ramps alone: stage 1's encoder
    assert all(torch.equal(v, stage1[k]) for k, v in encoder_of(run / "stage2.pt").items())
    (run / "stage2.pt").unlink()
    with pytest.raises(MissingFileError, match=r"no checkpoint .*stage2.pt is missing.*python -m tasks.deebert --resume .*run first"):
        export.export(run, tmp_path / "x")


def test_a_simcse_run_exports_the_encoder_it_wrote(tiny_dir, tmp_path):
    from tasks import simcse
    run = tmp_path / "run"
    simcse.run(simcse.parse_settings(simcse_argv(tiny_dir, tmp_path) + ["--out", str(run)]))
    exported_equals(run, run / "checkpoint.pt", tmp_path / "exp", "simcse")
    exported = minbert.load_pretrained(str(tmp_path / "exp")).state_dict()
    for key, value in minbert.load_pretrained(str(run)).state_dict().items():      # the stage's own encoder
        assert torch.equal(exported[key], value), key


@pytest.mark.parametrize("command", ["predict", "export"])
def test_out_naming_an_existing_file_is_one_line_of_error_and_exit_2(tmp_path, command):
    """python -m tasks.predict RUN --out FILE (and tasks.export RUN FILE) with FILE an existing file: argparse's usage
    and one error line naming FILE, exit status 2, no traceback (it was a FileExistsError traceback)."""
    taken = tmp_path / "taken.csv"
    taken.write_text("not a directory\n")
    out = ["--out", str(taken)] if command == "predict" else [str(taken)]
    proc = warm.run([sys.executable, "-m", f"tasks.{command}", str(tmp_path), *out], cwd=ROOT,
                    capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    flag = "--out" if command == "predict" else "out"
    want = f"python -m tasks.{command}: error: argument {flag}: {taken} is a file, not a directory: give a directory"
    assert errors == [want + " to write into"]
    assert "Traceback" not in proc.stderr and taken.read_text() == "not a directory\n"
