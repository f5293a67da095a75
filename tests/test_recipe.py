"""The fine-tuning recipe in the shared loop: warm-up and decay, clipping, accumulation, mixed precision, the
optimiser, the flags."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, fit_with, kill_after
from torch import nn

import minbert
from tasks.classifier import SentimentClassifier, build_parser, classification_loss, parse_settings
from tasks.core.checkpoints import check_config, load_checkpoint
from tasks.core.recipe import OPTIMIZERS, LinearSchedule, make_optimizer
from tasks.core.resume import resume_config
from tasks.core.train import Interrupted, watching

pytestmark = pytest.mark.usefixtures("one_thread")
# the recipe flags at their defaults, written out here (tasks.core.recipe.Recipe is what they are checked against)
LOOP_DEFAULTS = {"precision": "fp32", "warmup_ratio": 0.1, "max_grad_norm": 1.0, "grad_accum": 1,
                 "gradual_unfreezing": 0.0, "compile": "off", "cuda_graphs": False}
# what a run took before the recipe flags existed: a constant learning rate, no clipping
BEFORE_FLAGS = {"precision": "fp32", "warmup_ratio": None, "max_grad_norm": None, "grad_accum": 1,
                 "gradual_unfreezing": 0.0, "compile": "off", "cuda_graphs": False}
CPU = torch.device("cpu")


def classifier(tiny_config: minbert.BertConfig) -> SentimentClassifier:
    """A tiny random BERT with a 5-way head, dropout off everywhere, from seed 0."""
    tiny_config.hidden_dropout_prob = tiny_config.attention_probs_dropout_prob = 0.0
    torch.manual_seed(0)
    return SentimentClassifier(minbert.BertModel(tiny_config), 5, dropout=0.0)


def random_batches(sizes: list[int], seed: int = 0) -> list[dict]:
    """Batches of the given sizes over one stream of examples of 3..12 tokens, each padded to its longest."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        lengths = torch.randint(3, 13, (n,), generator=g)
        T = int(lengths.max())
        mask = (torch.arange(T)[None] < lengths[:, None]).long()                   # (n, T)
        ids = torch.randint(1000, 5000, (n, T), generator=g) * mask
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
                    "labels": torch.randint(0, 5, (n,), generator=g)})
    return out


def merge(batches: list[dict]) -> dict:
    """One batch holding the rows of several, padded to the longest."""
    T = max(b["input_ids"].shape[1] for b in batches)
    pad = [{k: nn.functional.pad(v, (0, T - v.shape[1])) if v.dim() == 2 else v for k, v in b.items()} for b in batches]
    return {k: torch.cat([b[k] for b in pad]) for k in pad[0]}


def quiet_fit(model: nn.Module, optimizer: torch.optim.Optimizer, epoch_batches, **kwargs):
    return fit_with(model, optimizer, epoch_batches, classification_loss, lambda m: {"zero": 0.0}, metric="zero",
               device=CPU, progress=False, log=lambda s: None, **kwargs)


class RecordingSGD(torch.optim.SGD):
    """SGD that records the learning rate of every step."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lrs: list[float] = []

    def step(self, closure=None):
        self.lrs.append(self.param_groups[0]["lr"])
        return super().step(closure)


def test_warmup_then_linear_decay_by_hand_and_across_a_resume(tiny_config, tmp_path):
    """2 epochs of 5 batches, 2 per step: 3 steps an epoch, 6 in all; ratio 0.3 -> ceil(1.8) = 2 warm-up steps."""
    expected = [0.5 * 0.1, 1.0 * 0.1, 4 / 4 * 0.1, 3 / 4 * 0.1, 2 / 4 * 0.1, 1 / 4 * 0.1]  # (s+1)/2, then (6-s)/(6-2)
    assert [LinearSchedule(2, 6).factor(s) * 0.1 for s in range(6)] == pytest.approx(expected, abs=0)
    batches = random_batches([4] * 5)
    model = classifier(tiny_config)
    opt = RecordingSGD(model.parameters(), lr=0.1)
    quiet_fit(model, opt, lambda epoch: batches, epochs=2, warmup_ratio=0.3, grad_accum=2,
              checkpoint=tmp_path / "whole.pt")
    assert opt.lrs == pytest.approx(expected, rel=1e-15)

    model = classifier(tiny_config)
    with pytest.raises(Interrupted), watching(kill_after(1)):
        quiet_fit(model, RecordingSGD(model.parameters(), lr=0.1), lambda e: batches, epochs=2, warmup_ratio=0.3,
                  grad_accum=2, checkpoint=tmp_path / "split.pt")
    model = classifier(tiny_config)
    opt = RecordingSGD(model.parameters(), lr=0.1)
    quiet_fit(model, opt, lambda e: batches, epochs=2, warmup_ratio=0.3, grad_accum=2,
              checkpoint=tmp_path / "split.pt", resume=tmp_path / "split.pt")
    assert opt.lrs == pytest.approx(expected[3:], rel=1e-15)          # the resumed run continues the schedule
    a, b = load_checkpoint(tmp_path / "whole.pt"), load_checkpoint(tmp_path / "split.pt")
    assert a["optimizer_steps"] == b["optimizer_steps"] == 6 and a["base_lrs"] == b["base_lrs"] == [0.1]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_accumulating_k_batches_equals_one_batch_k_times_the_size(tiny_config):
    """4 + 4 + 3 rows accumulated = one batch of 11 rows, and again for the next step (tolerance 1e-6)."""
    micro = random_batches([4, 4, 3, 4, 4, 3], seed=1)
    whole = [merge(micro[:3]), merge(micro[3:])]
    runs = []
    for batches, k in ((micro, 3), (whole, 1)):
        model = classifier(tiny_config)
        quiet_fit(model, minbert.AdamW(model.parameters(), lr=1e-3), lambda e, b=batches: b, epochs=1,
                  grad_accum=k)
        runs.append(model.state_dict())
    moved = 0
    for key, value in runs[1].items():
        torch.testing.assert_close(runs[0][key], value, rtol=0, atol=1e-6, msg=key)
        moved += not torch.equal(value, classifier(tiny_config).state_dict()[key])
    assert moved > 10                                                   # it did train


def test_clipping_bounds_the_update(tiny_config):
    """Plain SGD at lr 1: the parameters move by exactly the clipped gradient norm."""
    batches = random_batches([8])
    moves = {}
    for clip in (None, 1e-3):
        model = classifier(tiny_config)
        before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
        quiet_fit(model, torch.optim.SGD(model.parameters(), lr=1.0), lambda e: batches, epochs=1, max_grad_norm=clip)
        moves[clip] = (torch.cat([p.detach().flatten() for p in model.parameters()]) - before).norm().item()
    assert moves[None] > 0.01
    assert moves[1e-3] == pytest.approx(1e-3, rel=1e-3)


def test_bf16_autocast_stays_close_to_fp32(minilm, tokenizer):
    """MiniLM under bf16 autocast: hidden states within 2% (relative norm) of fp32, every token's cosine > 0.999."""
    batch = tokenizer(["A cat sat on the mat.", "The film is a charming, funny and moving portrait of a family.",
                       "Bad."])
    with torch.no_grad():
        ref = minilm(**batch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = minilm(**batch)
    keep = batch.attention_mask.bool()
    x, y = ref.last_hidden_state[keep], low.last_hidden_state[keep].float()     # (N, H)
    assert not torch.equal(x, y)                                                 # bf16 did change the arithmetic
    assert ((x - y).norm() / x.norm()).item() < 2e-2
    assert torch.cosine_similarity(x, y, dim=-1).min().item() > 0.999


def test_bf16_training_keeps_fp32_parameters_gradients_and_loss(tiny_config):
    model = classifier(tiny_config)
    before = model.head.weight.detach().clone()
    grads: set[torch.dtype] = set()
    quiet_fit(model, minbert.AdamW(model.parameters(), lr=1e-3), lambda e: random_batches([4, 4]), epochs=1,
              precision="bf16", post_step=lambda m: grads.update(p.grad.dtype for p in m.parameters()
                                                                  if p.grad is not None))
    assert grads == {torch.float32} and all(p.dtype == torch.float32 for p in model.parameters())
    assert not torch.equal(model.head.weight, before)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert classification_loss(model, random_batches([4])[0]).dtype == torch.float32  # losses stay fp32


def test_fp16_is_refused_on_a_cpu(tiny_config):
    model = classifier(tiny_config)
    with pytest.raises(ValueError, match=r"--precision fp16 on cpu \(.*: use --precision"):
        quiet_fit(model, minbert.AdamW(model.parameters()), lambda e: random_batches([4]), epochs=1, precision="fp16")


def test_loop_flags_defaults_and_help():
    assert parse_settings([]).recipe.loop() == LOOP_DEFAULTS              # a plain run: the recommended recipe, fp32
    recipe = parse_settings(["--precision", "bf16", "--warmup-ratio", "0.2", "--max-grad-norm", "2",
                             "--grad-accum", "4"]).recipe
    assert recipe.loop() == {"precision": "bf16", "warmup_ratio": 0.2, "max_grad_norm": 2.0, "grad_accum": 4,
                             "gradual_unfreezing": 0.0, "compile": "off", "cuda_graphs": False}
    off = parse_settings(["--warmup-ratio", "none", "--max-grad-norm", "none"]).recipe
    assert off.loop() == BEFORE_FLAGS                                      # 'none' switches each off
    text = " ".join(build_parser().format_help().split())
    assert "the recommended recipe" in text and "(default: 0.1; none switches it off)" in text
    for bad in ("--warmup-ratio 1.5", "--grad-accum 0", "--max-grad-norm -1", "--precision fp8"):
        with pytest.raises(SystemExit):
            parse_settings(bad.split())
    assert parse_settings([]).recipe.optimizer == "fused"


def typed(*flags: str, lr: float = 1e-3) -> dict:
    """What the classifier stores and compares on resume for these flags (tasks.core.settings.resume_config)."""
    return resume_config(parse_settings(["--task", "sst", "--seed", "1", *flags])) | {"training.lr": lr,
                                                                                      "command": "classifier"}


def test_checkpoints_from_before_the_recipe_flags_still_resume():
    old = {"lr": 1e-3, "task": "sst", "seed": 1}                          # stored before the loop flags existed
    before = ["--warmup-ratio", "none", "--max-grad-norm", "none", "--attention", "fused", "--layer-decay", "1",
              "--weight-decay", "0"]
    check_config("old.pt", old, typed(*before, "--optimizer", "torch"))
    check_config("old.pt", old, typed(*before, "--optimizer", "minbert"))    # 'minbert' is read as 'torch' now
    check_config("old.pt", old | {"optimizer": "minbert"}, typed(*before, "--optimizer", "torch"))
    with pytest.raises(ValueError, match="precision: checkpoint 'fp32', now 'bf16'"):
        check_config("old.pt", old, typed(*before, "--optimizer", "torch", "--precision", "bf16"))
    with pytest.raises(ValueError, match="optimizer: checkpoint 'torch', now 'fused'"):  # its state is another kind
        check_config("old.pt", old, typed(*before, "--optimizer", "fused"))
    with pytest.raises(ValueError, match="optimizer: checkpoint 'torch', now 'course'"):
        check_config("old.pt", old, typed(*before, "--optimizer", "course"))
    with pytest.raises(ValueError, match="warmup_ratio: checkpoint None, now 0.1"):  # today's default is not what ran
        check_config("old.pt", old, typed("--optimizer", "torch", "--max-grad-norm", "none"))


def test_the_optimizer_flag_picks_the_course_adamw_or_torch_adamw_unfused_or_fused(tiny_config):
    assert parse_settings([]).recipe.optimizer == "fused"                   # the reference's default
    for kind in ("course", "torch", "fused"):
        assert parse_settings(["--optimizer", kind]).recipe.optimizer == kind
    assert parse_settings(["--optimizer", "minbert"]).recipe.optimizer == "torch"    # the legacy name
    with pytest.raises(SystemExit):
        parse_settings(["--optimizer", "sgd"])
    help_text = " ".join(build_parser().format_help().split())
    assert "--optimizer {course,torch,fused}" in help_text and "minbert}" not in help_text   # the alias is not listed
    model = classifier(tiny_config)
    course, plain, fused = (make_optimizer(model.parameters(), 2e-5, 0.01, kind) for kind in OPTIMIZERS)
    assert type(course) is minbert.AdamW and course.defaults["eps"] == 1e-6
    assert type(plain) is type(fused) is torch.optim.AdamW and plain.defaults["fused"] is None and fused.defaults["fused"]
    for a, b in zip(plain.param_groups, fused.param_groups):
        assert {k: a[k] for k in ("lr", "betas", "eps", "weight_decay")} == \
            {k: b[k] for k in ("lr", "betas", "eps", "weight_decay")} == \
            {"lr": 2e-5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    with pytest.raises(ValueError, match="optimizer must be one of"):
        make_optimizer(model.parameters(), 2e-5, 0.01, "adam")


def test_the_attention_flag_builds_the_model_with_attention_or_the_fused_kernel():
    assert parse_settings([]).recipe.attention == "fused"                   # the reference's default
    assert parse_settings(["--attention", "eager"]).recipe.attn_implementation == "eager"
    assert parse_settings(["--attention", "fused"]).recipe.attn_implementation == "sdpa"
    with pytest.raises(SystemExit):
        parse_settings(["--attention", "sdpa"])
    help_text = " ".join(build_parser().format_help().split())
    assert "--attention {eager,fused}" in help_text and "your attention() is what trains" in help_text


def test_a_minbert_adamw_checkpoint_resumes_in_torch_adamw(tiny_config):
    """The optimiser state that --optimizer minbert (torch's update written out, now removed) saved: a Python int
    step, its own group keys. Loaded into --optimizer torch it continues the run an uninterrupted torch.optim.AdamW
    takes, bit for bit."""
    batches = random_batches([4] * 6)

    def steps(model, opt, part):
        for batch in part:
            opt.zero_grad()
            classification_loss(model, batch).backward()
            opt.step()
    whole = classifier(tiny_config)
    steps(whole, make_optimizer(whole.parameters(), 1e-3, 0.01, "torch"), batches)
    model = classifier(tiny_config)
    first = make_optimizer(model.parameters(), 1e-3, 0.01, "torch")
    steps(model, first, batches[:3])
    saved = first.state_dict()
    old = {"state": {i: {"step": int(st["step"]), "exp_avg": st["exp_avg"], "exp_avg_sq": st["exp_avg_sq"]}
                     for i, st in saved["state"].items()},                     # minbert.AdamW's state: an int step
           "param_groups": [{k: g[k] for k in ("lr", "betas", "eps", "weight_decay", "params")}
                            | {"correct_bias": True, "variant": "torch"} for g in saved["param_groups"]]}
    resumed = make_optimizer(model.parameters(), 1e-3, 0.01, "minbert")
    resumed.load_state_dict(old)
    steps(model, resumed, batches[3:])
    assert all(resumed.state[p]["step"].item() == 6 for p in model.parameters() if p.grad is not None)
    assert not torch.equal(model.head.weight, classifier(tiny_config).head.weight)          # it did train
    for (name, a), b in zip(model.state_dict().items(), whole.state_dict().values()):
        assert torch.equal(a, b), name


def test_fused_adamw_trains_as_torch_adamw_and_resumes_exactly(tiny_config, tmp_path):
    """Two epochs with warm-up, decay, clipping and weight decay: the same parameters to rounding; a kill after
    epoch 1 and a resume give the fused run bit for bit."""
    batches = random_batches([4, 4, 3, 4])
    kw = {"epochs": 2, "warmup_ratio": 0.25, "max_grad_norm": 1.0}

    def train(kind, **more):
        model = classifier(tiny_config)
        quiet_fit(model, make_optimizer(model.parameters(), 1e-3, 0.01, kind), lambda e: batches, **kw, **more)
        return model.state_dict()
    ours, fused = train("torch"), train("fused")
    start = classifier(tiny_config).state_dict()
    moved = 0
    for key, value in fused.items():
        torch.testing.assert_close(ours[key], value, rtol=0, atol=1e-6, msg=key)
        moved += not torch.equal(value, start[key])
    assert moved > 10                                                   # it did train

    with pytest.raises(Interrupted), watching(kill_after(1)):
        train("fused", checkpoint=tmp_path / "split.pt")
    assert load_checkpoint(tmp_path / "split.pt")["optimizer"]["param_groups"][0]["fused"] is True
    resumed = train("fused", checkpoint=tmp_path / "split.pt", resume=tmp_path / "split.pt")
    assert all(torch.equal(fused[k], resumed[k]) for k in fused)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 and its gradient scaler need CUDA")
def test_fp16_on_cuda_resumes_exactly(tiny_config, tmp_path):
    cuda = torch.device("cuda")
    batches = random_batches([4] * 4)

    def run(**kw):
        model = classifier(tiny_config)
        return fit_with(model, minbert.AdamW(model.parameters(), lr=1e-3), lambda e: batches, classification_loss,
                   lambda m: {"zero": 0.0}, metric="zero", device=cuda, progress=False, log=lambda s: None,
                   epochs=2, precision="fp16", max_grad_norm=1.0, **kw)
    run(checkpoint=tmp_path / "whole.pt")

    with pytest.raises(Interrupted), watching(kill_after(1)):
        run(checkpoint=tmp_path / "split.pt")
    run(checkpoint=tmp_path / "split.pt", resume=tmp_path / "split.pt")
    a, b = load_checkpoint(tmp_path / "whole.pt"), load_checkpoint(tmp_path / "split.pt")
    assert a["scaler"] and a["scaler"]["scale"] == b["scaler"]["scale"] and math.isfinite(a["scaler"]["scale"])
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_a_checkpoint_from_before_typed_settings_resumes_by_its_flat_names():
    old = {"lr": 1e-3, "task": "sst", "seed": 1, "checkpoint": "x.pt"}   # flat flag names, no recipe keys
    now = typed("--warmup-ratio", "none", "--max-grad-norm", "none", "--optimizer", "minbert")
    check_config("old.pt", old, now)                        # what it did not record (weight decay, command) is not asked
    with pytest.raises(ValueError, match=r"recipe.warmup_ratio: checkpoint None, now 0.1"):
        check_config("old.pt", old, now | {"recipe.warmup_ratio": 0.1})
    with pytest.raises(ValueError, match=r"training.lr: checkpoint 0.001, now 0.01"):
        check_config("old.pt", old, now | {"training.lr": 1e-2})


def changed_per_step(tiny_config, batches, epochs=1, **kw):
    """Train with fused AdamW (weight decay 0.01 on everything, so every parameter that takes a step moves); for each
    optimiser step, the set of parameter names it changed; and the final state."""
    model = classifier(tiny_config)
    steps, last = [], {k: v.clone() for k, v in model.state_dict().items()}

    def watch(m):
        now = m.state_dict()
        steps.append({k for k in now if not torch.equal(now[k], last[k])})
        last.update({k: v.clone() for k, v in now.items()})
    quiet_fit(model, make_optimizer(model.parameters(), 1e-3, 0.01, "fused"), lambda e: batches, epochs=epochs,
              post_step=watch, **kw)
    return steps, model.state_dict()


def test_gradual_unfreezing_trains_the_heads_then_each_depth_from_the_top(tiny_config):
    """12 steps, U = 0.5 (L = 2): by hand, the head from step 0, layer 2 and the pooler from ceil(1 * 6 / 3) = 2,
    layer 1 from 4, the embeddings from 6 (minbert/param_groups.py's rule); a parameter before its turn is bit for bit
    unchanged, weight decay included, and changes at every step after it."""
    steps, _ = changed_per_step(tiny_config, random_batches([4] * 12), gradual_unfreezing=0.5)
    names = classifier(tiny_config).state_dict().keys()
    # the pooler (depth 2) gets no gradient under mean pooling, so it never moves
    first = {"bert.embeddings.": 6, "bert.layers.0.": 4, "bert.layers.1.": 2, "bert.pooler.": math.inf, "head.": 0}
    assert {k for k in names if not any(k.startswith(p) for p in first)} == set()     # every parameter is covered
    for s, changed in enumerate(steps):
        want = {k for k in names if s >= next(v for p, v in first.items() if k.startswith(p))}
        assert changed == want, f"step {s}: {sorted(changed ^ want)}"
    # off (U = 0): everything from the first step
    steps, _ = changed_per_step(tiny_config, random_batches([4] * 3))
    assert all(changed == {k for k in names if not k.startswith("bert.pooler.")} for changed in steps)


def test_gradual_unfreezing_resumes_exactly_mid_way(tiny_config, tmp_path):
    """2 epochs of 6 steps, U = 0.75: layer 1 joins at step 6 and the embeddings at step 9, after the kill at the end
    of epoch 1; the resumed run equals the uninterrupted one bit for bit."""
    batches = random_batches([4, 3, 4, 4, 2, 4])
    _, whole = changed_per_step(tiny_config, batches, epochs=2, gradual_unfreezing=0.75)

    with pytest.raises(Interrupted), watching(kill_after(1)):
        changed_per_step(tiny_config, batches, epochs=2, gradual_unfreezing=0.75, checkpoint=tmp_path / "g.pt")
    steps, resumed = changed_per_step(tiny_config, batches, epochs=2, gradual_unfreezing=0.75,
                                      checkpoint=tmp_path / "g.pt", resume=tmp_path / "g.pt")
    assert len(steps) == 6 and not any(k.startswith("bert.embeddings.") for c in steps[:3] for k in c)
    assert all(any(k.startswith("bert.embeddings.") for k in c) for c in steps[3:])
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)


STUDENT_RUN = """
import os
import sys
import torch
import minbert
from tasks.core.recipe import Recipe
assert minbert.__file__.startswith(os.getcwd()), minbert.__file__   # the tree's own minbert
assert Recipe().optimizer == "course"                         # a student tree's default: the student's AdamW
model = minbert.load_pretrained("minilm")                     # built on the meta device, nothing drawn
assert "torch._dynamo" not in sys.modules, "load_pretrained imported torch._dynamo"
drawn = torch.nn.init.normal_(torch.zeros(1000))              # outside load_pretrained, torch.nn.init draws as ever
assert drawn.std() > 0.5
params = [p for p in model.parameters() if p.requires_grad]
optimizer = Recipe().optimizer_for(model, params, 1e-3, 0.01)
out = model(torch.tensor([[101, 7592, 102]]), torch.ones(1, 3))
out.pooler_output.sum().backward()
before = model.pooler.Wp.detach().clone()
optimizer.step()
optimizer.zero_grad()
assert not torch.equal(before, model.pooler.Wp) and model.pooler.Wp.grad is None
optimizer.load_state_dict(optimizer.state_dict())
assert "torch._dynamo" not in sys.modules, "the course's AdamW imported torch._dynamo"
compiled = torch.compile(lambda x: torch.sin(x) * 2, backend="eager")   # compiling later in the process still works
assert torch.allclose(compiled(torch.ones(3)), torch.sin(torch.ones(3)) * 2)
print("ok")
"""
GRADER_START = """
import sys
from assignments.checks import PARTS
from assignments.hidden import hidden_fixture
from assignments.untrusted import preload
preload()                                                     # every minbert module, the checks' modules
assert "torch._dynamo" not in sys.modules, "the grader's preload imported torch._dynamo"
for name in sorted({f for part in PARTS.values() for f in part.fixtures}):
    hidden_fixture(name, 7)                                   # the reference draws each fixture (adamw: 1000 steps)
assert "torch._dynamo" not in sys.modules, "the reference's fixtures imported torch._dynamo"
print("ok")
"""


def test_a_run_without_compile_and_the_grader_start_without_importing_dynamo(tmp_path):
    """torch._dynamo's import costs 1-2 s. In a student tree (every part written), a fresh process that loads a
    checkpoint (minbert.checkpoint.on_meta) and trains with the tree's default AdamW, the course's
    (tasks.core.step.optimizers_without_dynamo, --compile off), never imports it; nor does the grader's start here
    (preload imports every minbert module: minbert.packed imports the varlen kernel only where CUDA is), nor the
    reference drawing every hidden fixture."""
    from test_student_path import student_tree
    tree = student_tree(tmp_path)
    for script, cwd in ((STUDENT_RUN, tree), (GRADER_START, ROOT)):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False, cwd=cwd,
                              timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(cwd)})
        assert proc.returncode == 0 and proc.stdout == "ok\n", (cwd, proc.stderr)
