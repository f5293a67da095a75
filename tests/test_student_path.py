"""The student's tree trains with the student's own code: a student tree defaults to --attention eager and
--optimizer course, so that an unwritten part stops the first training command with one line naming it and the
check to run; the reference keeps torch's fused paths, and its eager/course path does call attention() and
minbert.AdamW.step. fused_attention equals the kernel's output with the heads merged, and no line outside the solution
regions of minbert/model.py and minbert/optim.py states a solution."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import warm
from conftest import DATA, ROOT, TEST_DEVICE, each_as_main
from test_kit_cli import assert_names_the_part, train_classifier_in
from test_kit_tree import _partly_done

import minbert
from assignments.make import find_regions, generate, regions_by_function, stubbed_files
from tasks import classifier, deebert, multitask, simcse

pytestmark = pytest.mark.usefixtures("one_thread")
COMMANDS = {"classifier": classifier, "multitask": multitask, "simcse": simcse, "deebert": deebert}
# the parts the first training command runs: the function, the file that holds it
FIRST_COMMAND_PARTS = {"attention": "minbert/model.py", "BertEmbeddings.forward": "minbert/model.py",
                       "BertLayer.after_attention": "minbert/model.py", "AdamW.step": "minbert/optim.py",
                       "SentimentClassifier.forward": "tasks/classifier.py", "pool": "minbert/pooling.py"}


def student_tree(tmp_path: Path, unwritten: str | None = None) -> Path:
    """The generated student tree of the full profile (its tasks/core/tree.py names the profile, so STUDENT is set)
    with every part written from the reference but `unwritten`."""
    tree = tmp_path / "tree"
    generate(tree, data=False, profile="full")
    assert 'PROFILE = "full"\n' in (tree / "tasks" / "core" / "tree.py").read_text()
    for rel in stubbed_files():
        reference = (ROOT / rel).read_text()
        done = set(regions_by_function(reference, str(rel))) - {unwritten}
        (tree / rel).write_text(_partly_done(reference, done, str(rel)))
    return tree


@pytest.mark.parametrize("function", sorted(FIRST_COMMAND_PARTS))
def test_the_first_training_command_stops_at_the_one_unwritten_part(function: str, tmp_path: Path) -> None:
    tree = student_tree(tmp_path, function)
    proc = train_classifier_in(tree, "--task", "sst", "--fine-tune-mode", "full-model", "--epochs", "1",
                               "--max-train-examples", "16", "--data-dir", str(DATA), "--run-dir", str(tmp_path / "run"))
    # pool() is part 1's too, but the run names its own part's check (part 2 and the extensions call it as well)
    assert_names_the_part(proc, function, FIRST_COMMAND_PARTS[function], "classifier_head" if function == "pool" else "core")


def test_a_student_tree_defaults_to_its_own_attention_and_adamw(tmp_path: Path, capsys) -> None:
    """--print-config of every training command: eager and course in a student tree, fused and fused here; the
    multitask command with the leaderboard run's committed config (the handout's `--config
    tasks/multitask/main-job.json`), which must leave both to the tree's defaults, as every config a tree carries."""
    tree = student_tree(tmp_path)
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    first = next(iter(COMMANDS))                  # one real `python -m`, then every command as it runs them
    proc = subprocess.run([sys.executable, "-m", f"tasks.{first}", "--print-config"], cwd=tree, capture_output=True,
                          text=True, check=False, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    main_job = ["--config", "tasks/multitask/main-job.json"]
    argv = {name: [*(main_job if name == "multitask" else []), "--print-config"] for name in COMMANDS}
    said = each_as_main(argv, tree, env)
    assert said[first] == (0, proc.stdout)
    for name, module in COMMANDS.items():
        code, printed = said[name]
        assert code == 0, (name, printed)
        recipe = json.loads(printed)["recipe"]
        assert (recipe["attention"], recipe["optimizer"]) == ("eager", "course"), name
        with pytest.raises(SystemExit) as done:
            module.parse_settings([str(ROOT / a) if a.endswith(".json") else a for a in argv[name]])
        assert done.value.code == 0
        recipe = json.loads(capsys.readouterr().out)["recipe"]
        assert (recipe["attention"], recipe["optimizer"]) == ("fused", "fused"), name
    carried = sorted((tree / "tasks").rglob("*.json"))
    assert (tree / "tasks" / "multitask" / "main-job.json") in carried
    for path in carried:                          # a config's recipe section, or a search space's "recipe.X" keys
        assert not re.search(r'"(recipe\.)?(attention|optimizer)"\s*:', path.read_text()), path


def test_the_extension_commands_stop_before_training_at_their_unwritten_function(tiny_dir: Path, tmp_path: Path) -> None:
    """Parts 1 and 2 written, DeeBERT and SimCSE not: tasks.deebert stops at early_exit() before either stage trains
    (the sweep would be the first to call it) and tasks.simcse at its objective's loss before it loads anything, each
    with the one line naming the function and its check (run_cli, as every command); one interpreter runs both."""
    tree = student_tree(tmp_path)
    for rel in ("minbert/deebert.py", "minbert/simcse.py"):
        (tree / rel).write_text(_partly_done((ROOT / rel).read_text(), set(), rel))
    def piece(source: str, stop: int) -> str:
        lines = (DATA / source).read_text(encoding="utf-8").splitlines(keepends=True)
        (tmp_path / source).write_text(lines[0] + "".join(lines[1:1 + stop]), encoding="utf-8")
        return str(tmp_path / source)
    common = ["--model", str(tiny_dir), "--device", "cpu", "--threads", "1", "--no-progress"]
    argv = {"deebert": [*common, "--task", "sst2", "--out", str(tmp_path / "deebert"), "--epochs", "1",
                        "--batch-size", "8", "--train-file", piece("ids-sst-train.csv", 48),
                        "--dev-file", piece("ids-sst-dev.csv", 40), "--test-file", piece("ids-sst-test-student.csv", 8)],
            "simcse": [*common, "--out", str(tmp_path / "simcse"), "--batch-size", "8", "--sts-dev",
                       piece("sts-dev.csv", 24), "--para-train", piece("quora-train.csv", 40)]}
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    said = each_as_main(argv, tree, env, stderr=True)
    for name, function, check in (("deebert", "early_exit", "deebert"), ("simcse", "unsup_simcse_loss", "simcse")):
        code, _, stderr = said[name]
        assert_names_the_part(SimpleNamespace(returncode=code, stderr=stderr), function, f"minbert/{name}.py", check)
    assert not list(tmp_path.glob("*/*.pt")) and not list(tmp_path.glob("*/*.curves.jsonl"))   # nothing trained
    assert "zero-shot" not in said["simcse"][2]                                 # nor the model evaluated


def test_tasks_attention_in_a_fresh_part1_tree_names_the_first_stub(tiny_dir: Path, tmp_path: Path) -> None:
    """The attention map runs the tree's encoder, whose embeddings come first: a fresh part 1 tree stops there with
    the one line."""
    tree = tmp_path / "tree"
    generate(tree, data=False, profile="part1")
    proc = warm.run([sys.executable, "-m", "tasks.attention", "--model", str(tiny_dir), "--out",
                     str(tmp_path / "a.png")], cwd=tree, capture_output=True, text=True, check=False, timeout=120,
                    env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert_names_the_part(proc, "BertEmbeddings.forward", "minbert/model.py")
    assert not (tmp_path / "a.png").exists()


def test_tasks_attention_in_a_student_tree_draws_the_students_attention(tiny_dir: Path, tmp_path: Path) -> None:
    """Everything written but attention(): tasks.attention stops at attention() (the maps are the student's own
    function's, --attention eager by default in a tree); with --attention fused it draws them with torch's kernel.
    With attention() written but missing its 1/sqrt(hs), the tree's eager maps differ from torch's kernel's."""
    tree = student_tree(tmp_path, unwritten="attention")
    common = ["--model", str(tiny_dir), "--text", "The cat sat.", "--layer", "2"]
    argv = {"eager": [*common, "--out", str(tmp_path / "eager.png")],
            "fused": [*common, "--out", str(tmp_path / "fused.png"), "--attention", "fused"]}
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    said = each_as_main({"attention#eager": argv["eager"], "attention#fused": argv["fused"]}, tree, env, stderr=True)
    code, _, stderr = said["attention#eager"]
    assert_names_the_part(SimpleNamespace(returncode=code, stderr=stderr), "attention", "minbert/model.py")
    assert not (tmp_path / "eager.png").exists()
    code, stdout, stderr = said["attention#fused"]
    assert code == 0, stderr
    assert (tmp_path / "fused.png").read_bytes().startswith(b"\x89PNG") and "wrote" in stdout
    # attention() written with a classic mistake (no 1/sqrt(hs)): the tree's maps are the mistake's, not torch's
    reference = (ROOT / "minbert" / "model.py").read_text()
    written = _partly_done(reference, set(regions_by_function(reference, "minbert/model.py")), "minbert/model.py")
    right = "scores = q @ k.transpose(-2, -1) / math.sqrt(hs)"
    assert written.count(right) == 1
    (tree / "minbert" / "model.py").write_text(written.replace(right, "scores = q @ k.transpose(-2, -1)"))
    probe = ("import minbert, torch\nfrom tasks.attention import layer_attention\n"
             f"d = {str(tiny_dir)!r}\ntok = minbert.Tokenizer.from_pretrained(d)\n"
             "maps = [layer_attention(minbert.load_pretrained(d, attn_implementation=i), tok, 'The cat sat.', None, 2)[0]"
             " for i in ('eager', 'sdpa')]\n"
             "print(round((maps[0] - maps[1]).abs().max().item(), 4), torch.allclose(maps[0].sum(-1), torch.tensor(1.)))")
    done = warm.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    differs, rows_sum_to_1 = done.stdout.split()
    assert float(differs) > 1e-3 and rows_sum_to_1 == "True", done.stdout


def test_deebert_s_check_before_training_reaches_the_exit_rule_and_leaves_the_model_as_it_was(tiny_config) -> None:
    """reach_the_sweep: with minbert's functions it passes, leaving the model's mode and the RNG as they were; with
    entropy unwritten it stops (the sweep's rule for sst2 is entropy's), with --exit patience it does not need it."""
    from minbert.deebert import DeeBert, DeeBertConfig
    from tasks.deebert import reach_the_sweep
    from tasks.deebert.settings import Sweep
    model = DeeBert(minbert.BertModel(tiny_config), DeeBertConfig(2))
    state = torch.get_rng_state()
    reach_the_sweep(model, "sst2", Sweep().resolved("sst2"), torch.device("cpu"))
    assert model.training and torch.equal(torch.get_rng_state(), state)

    def unwritten(*args, **kwargs):
        raise NotImplementedError
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(minbert.deebert, "entropy", unwritten)
        with pytest.raises(NotImplementedError):
            reach_the_sweep(model, "sst2", Sweep().resolved("sst2"), torch.device("cpu"))
        assert model.training
        reach_the_sweep(model, "sst2", Sweep(exit="patience").resolved("sst2"), torch.device("cpu"))


def test_simcse_s_check_before_loading_passes_with_every_objective() -> None:
    from minbert.simcse import OBJECTIVES, SimCSEConfig
    from tasks.simcse import reach_the_objective
    for objective in OBJECTIVES:
        for hard_negatives in (False, True) if objective == "sup" else (False,):
            reach_the_objective(SimCSEConfig(objective), hard_negatives)


def tiny_classifier_run(tiny_dir: Path, tmp_path: Path, *flags: str) -> dict:
    def piece(name: str, stop: int, start: int = 0) -> str:
        lines = (DATA / name).read_text(encoding="utf-8").splitlines(keepends=True)
        path = tmp_path / f"{start}-{stop}-{name}"
        path.write_text(lines[0] + "".join(lines[1 + start:1 + stop]), encoding="utf-8")
        return str(path)
    return classifier.run(classifier.parse_settings([
        "--model", str(tiny_dir), "--device", TEST_DEVICE, "--batch-size", "8", "--epochs", "1", "--no-progress",
        "--train-file", piece("ids-sst-train.csv", 16), "--dev-file", piece("ids-sst-dev.csv", 8),
        "--test-file", piece("ids-sst-dev.csv", 16, 8), "--run-dir", str(tmp_path / "-".join(flags or ("plain",))),
        *flags]))


def test_eager_and_course_train_with_attention_and_the_course_adamw(tiny_dir, tmp_path, monkeypatch) -> None:
    """--attention eager --optimizer course: every layer's attention is minbert.model.attention and every step
    minbert.AdamW.step; the defaults (fused, fused) call neither."""
    calls = {"attention": 0, "step": 0}
    attention, step = minbert.model.attention, minbert.AdamW.step

    def counted_attention(*args, **kwargs):
        calls["attention"] += 1
        return attention(*args, **kwargs)

    def counted_step(self, *args, **kwargs):
        calls["step"] += 1
        return step(self, *args, **kwargs)
    monkeypatch.setattr(minbert.model, "attention", counted_attention)   # read when BertLayer is built
    monkeypatch.setattr(minbert.AdamW, "step", counted_step)
    result = tiny_classifier_run(tiny_dir, tmp_path)
    assert calls == {"attention": 0, "step": 0} and result["best_epoch"] == 1
    result = tiny_classifier_run(tiny_dir, tmp_path, "--attention", "eager", "--optimizer", "course")
    layers = minbert.load_pretrained(str(tiny_dir)).config.num_hidden_layers
    assert calls["step"] == 2                                             # 16 examples in batches of 8
    assert calls["attention"] >= layers * (2 + 1 + 1)                    # 2 training batches, dev, test at least
    recipe = json.loads((Path(result["run_dir"]) / "run.json").read_text())["settings"]["recipe"]
    assert (recipe["attention"], recipe["optimizer"]) == ("eager", "course")            # what predict will build


def test_fused_attention_merges_the_heads_bit_for_bit() -> None:
    """fused_attention = the kernel's (B, nh, T, hs) output with the heads side by side, (B, T, nh * hs), exactly."""
    g = torch.Generator().manual_seed(0)
    B, nh, T, hs = 3, 4, 7, 8
    q, k, v = (torch.randn(B, nh, T, hs, generator=g) for _ in range(3))
    keep = torch.ones(B, T)
    keep[1, 5:] = keep[2, 3:] = 0
    for mask in (minbert.model.mask_to_bias(keep, q.dtype), torch.zeros(B, 1, 1, T)):   # padded, and none
        kernel = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if mask.any() else None)   # (B, nh, T, hs)
        heads_side_by_side = torch.cat([kernel[:, h] for h in range(nh)], dim=-1)                 # (B, T, nh * hs)
        assert torch.equal(minbert.model.fused_attention(q, k, v, mask), heads_side_by_side)
        torch.testing.assert_close(minbert.model.attention(q, k, v, mask), heads_side_by_side, atol=1e-6, rtol=0)


def normalised(line: str) -> str:
    """A line's code without its comment and with no whitespace."""
    return re.sub(r"\s+", "", line.split("#", 1)[0])


@pytest.mark.parametrize("rel", ["minbert/model.py", "minbert/optim.py"])
def test_no_line_outside_the_regions_states_a_solution(rel: str) -> None:
    """Every statement of every region of the file (normalised), against every line of the file outside them."""
    text = (ROOT / rel).read_text()
    regions = find_regions(text, rel)
    inside = {i for r in regions for i in range(r.begin, r.end + 1)}
    solution = {normalised(s) for r in regions for s in r.solution} - {"", "else:", "return"}
    assert len(solution) >= 6
    outside = [(i, s) for i, s in enumerate(text.splitlines(), 1) if i not in inside]
    stated = [f"{rel}:{i}: {s.strip()}" for i, s in outside if normalised(s) in solution]
    assert not stated, "\n".join(stated)


def test_the_checkpoint_size_students_md_computes_from_is_a_real_runs(tiny_dir, tmp_path) -> None:
    """docs/students.md sizes a checkpoint at about 16 bytes a parameter, from the tests' tiny model's: a real run's
    checkpoint.pt and parameter count are the figures it gives, and MiniLM's and bert-base's follow from them."""
    from tasks.core.checkpoints import load_checkpoint
    run_dir = Path(tiny_classifier_run(tiny_dir, tmp_path)["run_dir"])
    params = sum(v.numel() for v in load_checkpoint(run_dir / "checkpoint.pt")["model"].values())
    size = (run_dir / "checkpoint.pt").stat().st_size
    per_param = size / params
    assert 16 <= per_param < 16.5                      # weights, best weights, AdamW's two moments, in fp32
    text = " ".join((ROOT / "docs" / "students.md").read_text().split())
    assert f"{size / 1e6:.1f} MB for the tests' {params / 1e6:.2f} M-parameter model" in text
    minilm = sum(p.numel() for p in minbert.load_pretrained("minilm").parameters())
    base = 109_482_240                                 # bert-base-uncased's BertModel (12 layers, H=768, with pooler)
    assert "about 16 bytes a parameter" in text        # the tiny run's fixed part (history, RNG states) is a few %
    assert f"about {minilm * 16 / 1e9:.2f} GB for MiniLM and {base * 16 / 1e9:.1f} GB for bert-base" in text
