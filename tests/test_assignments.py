"""The assignment kit: stubs generated from the reference, the checker's messages, the grader's isolation."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import warm
from conftest import grading_user

from assignments import make
from assignments.check import expand
from assignments.checks import PARTS, parts_of
from assignments.common import GROUPS
from assignments.grade import grade
from assignments.grade import main as grade_main
from assignments.make import ROOT, STUDENT_DIR, RegionError, find_regions, generate, stubbed_files

TOTAL = sum(p.points for p in PARTS.values())
GROUP_TOTAL = {g: sum(p.points for p in PARTS.values() if p.group == g) for g in GROUPS}


@pytest.fixture(scope="module")
def student_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("student") / "tree"
    generate(out, data=False)
    return out


def _code(line: str) -> str:
    return line.split("#", 1)[0].strip()


def submission_with(tmp_path: Path, replacements: dict[str, str], flat: bool = False) -> Path:
    """A submitted tree: the reference's graded files, with the named functions' regions replaced by new bodies."""
    sub = tmp_path / "submission"
    for rel in stubbed_files():
        text = (ROOT / rel).read_text()
        lines = text.splitlines(keepends=True)
        regions = make.regions_by_function(text, str(rel))
        for func, body in sorted(((f, b) for f, b in replacements.items() if f in regions),
                                 key=lambda fb: -regions[fb[0]].begin):   # bottom-up keeps line numbers valid
            r = regions[func]
            lines[r.begin - 1: r.end] = [textwrap.indent(textwrap.dedent(body).strip() + "\n", r.indent)]
        dest = sub / (rel.name if flat else rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text("".join(lines))
    return sub


# ---------------------------------------------------------------- the generator

def test_stub_text_replaces_each_region_with_its_comment_and_a_raise() -> None:
    text = ("def f(x):\n    y = x\n    ### BEGIN SOLUTION\n    ### STUB: return y + 1, an int\n"
            "    return y + 1\n    ### END SOLUTION\n")
    assert make.stub_text(text) == ("def f(x):\n    y = x\n    # YOUR CODE HERE\n    # return y + 1, an int\n"
                               "    raise NotImplementedError\n")


@pytest.mark.parametrize("text, where", [
    ("a = 1\n### BEGIN SOLUTION\n### STUB: x\nb = 2\n", "m.py:2: '### BEGIN SOLUTION' is never closed"),
    ("a = 1\n### END SOLUTION\n", "m.py:2: '### END SOLUTION' without"),
    ("### BEGIN SOLUTION\nb = 2\n### END SOLUTION\n", "m.py:1: the region has no '### STUB:' lines"),
    ("### BEGIN SOLUTION\n### STUB: x\n### BEGIN SOLUTION\n", "m.py:3: '### BEGIN SOLUTION' inside the region"),
])
def test_malformed_regions_are_reported_with_file_and_line(text: str, where: str) -> None:
    with pytest.raises(RegionError, match=where):
        find_regions(text, "m.py")


def test_regions_cover_the_assignment() -> None:
    owners = {(rel.as_posix(), f) for rel in stubbed_files()
              for f in make.regions_by_function((ROOT / rel).read_text(), str(rel))}
    assert {("minbert/model.py", "attention"), ("minbert/model.py", "BertEmbeddings.forward"),
            ("minbert/model.py", "BertLayer.after_attention"), ("minbert/optim.py", "AdamW.step"),
            ("tasks/classifier.py", "SentimentClassifier.forward")} <= owners
    multitask = {"MultitaskBert.pair_inputs", "MultitaskBert.features", "MultitaskBert.predict_from_embeddings",
                 "sentiment_loss", "paraphrase_loss", "similarity_loss"}
    assert {("minbert/multitask.py", f) for f in multitask} <= owners
    assert {("minbert/deebert.py", "entropy"), ("minbert/deebert.py", "early_exit")} <= owners
    assert {("minbert/smart.py", "symmetric_kl"), ("minbert/smart.py", "ascent_step"),
            ("minbert/pals.py", "ProjectedAttention.forward"), ("minbert/pals.py", "TaskPALs.forward"),
            ("minbert/simcse.py", "unsup_simcse_loss"), ("minbert/simcse.py", "margin_loss")} <= owners


def test_parts_cover_every_stubbed_file_and_the_groups_keep_their_points() -> None:
    assert {f for p in PARTS.values() for f in p.files} == {rel.as_posix() for rel in stubbed_files()}
    assert all(p.group in GROUPS and p.files for p in PARTS.values())
    assert GROUP_TOTAL["core"] == 100 and GROUP_TOTAL["multitask"] == 100      # part 1 and part 2, each out of 100
    assert [p.points for p in PARTS.values() if p.group == "core"] == [25, 10, 25, 10, 20, 10]
    assert expand(["deebert", "deebert_exit", "attention"]) == ["deebert_entropy", "deebert_exit", "attention"]
    assert parts_of(["multitask"])[0] == "mt_sentence" and len(parts_of(list(GROUPS))) == len(PARTS)
    assert [parts_of([g]) for g in ("smart", "pals", "simcse")] == [["smart_kl", "smart_ascent"],
                                                                   ["pals_attention", "pals_forward"],
                                                                   ["simcse_unsup", "simcse_margin"]]


def _semantics(text: str) -> tuple[str, list[list[str]]]:
    """What a stub file means: its code (the AST, so comments and layout elsewhere do not count) and the text of
    each YOUR CODE HERE block, which tells students what to write."""
    import ast
    blocks, current = [], None
    for line in text.splitlines():
        s = line.strip()
        if s == "# YOUR CODE HERE":
            current = []
        elif current is not None and s.startswith("#"):
            current.append(s)
        elif current is not None:
            blocks.append(current)
            current = None
    return ast.dump(ast.parse(text)), blocks


def test_committed_stubs_equal_a_fresh_generation(student_tree: Path) -> None:
    hint = "the committed stubs are stale: run  python -m assignments.make --stubs  and commit assignments/student/"
    committed = sorted(p.relative_to(STUDENT_DIR) for p in STUDENT_DIR.rglob("*") if p.is_file())
    assert committed == sorted(stubbed_files()), hint
    for rel in committed:
        assert _semantics((STUDENT_DIR / rel).read_text()) == _semantics((student_tree / rel).read_text()), \
            f"{rel}: {hint}"


def test_stub_semantics_ignore_comments_but_not_code_or_instructions() -> None:
    text = "def f(x):\n    # YOUR CODE HERE\n    # add one\n    raise NotImplementedError\n"
    assert _semantics(text) == _semantics("# a note\n" + text.replace("(x):", "(x):  # the input"))
    assert _semantics(text) != _semantics(text.replace("# add one", "# add two"))
    assert _semantics(text) != _semantics(text.replace("(x)", "(y)"))


def test_student_tree_carries_no_solution_text(student_tree: Path) -> None:
    # every statement of every solution region (normalised: no comment, no whitespace; no length floor, only empty
    # lines and bare structural tokens skipped) against every line of every text file of the tree
    from assignments.leaks import leaks, solution_statements
    statements = solution_statements()
    assert len(statements) > 60
    for rel in stubbed_files():
        text = (ROOT / rel).read_text()
        stub = (student_tree / rel).read_text()
        assert stub.count("raise NotImplementedError") == len(find_regions(text, str(rel))) + \
            text.count("raise NotImplementedError")
        assert "### BEGIN SOLUTION" not in stub and "### STUB" not in stub
    found = leaks(student_tree, statements)
    assert not found, "the student tree carries solution statements:\n" + "\n".join(found)
    shipped = {p.relative_to(student_tree).as_posix() for p in student_tree.rglob("*") if p.is_file()}
    assert not {"assignments/make.py", "assignments/grade.py", "assignments/make_fixtures.py",
                "assignments/make_fixtures_ext.py", "assignments/leaks.py", "assignments/hidden.py",
                "assignments/untrusted.py", "assignments/batch.py", "assignments/bundle.py",
                "assignments/staging.py"} & shipped
    assert not any(s.startswith(("assignments/student/", "tests/")) for s in shipped)


def test_no_stub_text_shows_a_solution_statement() -> None:
    # the committed stubs' YOUR CODE HERE comments (which leaks.normalise drops as comments) against every solution
    # statement, in any spacing or case; the generated trees are checked through leaks() above and in test_kit_profiles
    from assignments.leaks import stub_leaks
    found = stub_leaks(STUDENT_DIR)
    assert not found, "a stub's text shows solution statements; reword it as a specification:\n" + "\n".join(found)


def test_the_stub_text_scan_finds_a_statement_in_any_spacing_but_not_a_named_value(tmp_path: Path) -> None:
    from assignments.leaks import stub_leaks
    statements = {"h=layer(h,bias)": "ref.py:3", "returnself.attend(q,k,v)": "ref.py:9", "returnout": "ref.py:12",
                  "x=a.float()": "ref.py:20"}
    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        def f(h):
            # YOUR CODE HERE
            # for each layer: h = layer( h,
            #   bias), then the heads merged, that is Self.attend(q, k, v); return out
            raise NotImplementedError
        # x = a.float()  (a comment outside a stub is the line scan's business)
        y = 1  # max_x = a.float() is no statement of the solution
        """))
    assert stub_leaks(tmp_path, statements) == [
        "m.py:3: h = layer( h, bias)   (in the stub's text; the solution at ref.py:3)",
        "m.py:4: Self.attend(q, k, v)   (in the stub's text; the solution at ref.py:9)"]
    (tmp_path / "m.py").write_text("def f(a):\n    # YOUR CODE HERE\n    # myself.attend(q, k, v) in float32\n"
                                   "    raise NotImplementedError\n")
    assert stub_leaks(tmp_path, statements) == []          # inside a longer name: not the statement


def test_the_stub_text_scan_finds_an_assignment_s_value_without_its_target(tmp_path: Path) -> None:
    # a stub that shows the value of `x = E` (or `x += E`) has shown the line, as one that shows a return's E has; the
    # value named alone (a name, an attribute, an item by a constant key: where a spec says to find something) is not
    from assignments.leaks import stub_leaks
    statements = {"probs=F.dropout(probs,dropout_p,training)": "ref.py:4", "work+=h.shape[0]*h.shape[1]": "ref.py:6",
                  't=state["step"]': "ref.py:8", "m=self.Wm": "ref.py:9"}
    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        def f(probs):
            # YOUR CODE HERE
            # dropout on the probabilities: F.dropout(probs, dropout_p,
            #   training); count the work, h.shape[0] * h.shape[1]
            raise NotImplementedError
        """))
    assert stub_leaks(tmp_path, statements) == [
        "m.py:3: F.dropout(probs, dropout_p, training)   (in the stub's text; the solution at ref.py:4)",
        "m.py:4: h.shape[0] * h.shape[1]   (in the stub's text; the solution at ref.py:6)"]
    (tmp_path / "m.py").write_text(textwrap.dedent("""\
        def f(probs):
            # YOUR CODE HERE
            # count the step: state["step"] goes up by one; the weight is self.Wm; dropout with rate dropout_p
            raise NotImplementedError
        """))
    assert stub_leaks(tmp_path, statements) == []


def test_the_prose_scan_finds_a_statement_in_the_handout_and_in_a_hint_but_not_in_given_code(tmp_path: Path) -> None:
    # the handout's pages and the hints of the tree's assignments/ code are read as prose (any spacing or case); a
    # statement written in given code outside assignments/ is the line scan's business, and data/ is never read
    from assignments.leaks import prose_leaks
    statements = {"p.add_(p,alpha=-lr*wd)": "ref.py:5", "done,state=rule.step(logits,state)": "ref.py:8"}
    (tmp_path / "assignments").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "assignments" / "README.md").write_text("# Part 1\n\nthe decay:\n`p.add_(p,\n alpha=-lr * wd)`\n")
    (tmp_path / "assignments" / "hints.py").write_text('H = ("the rule: done, state = "\n     "rule.step(logits, state)")\n')
    (tmp_path / "minbert.py").write_text('S = "done, state = rule.step(logits, state)"\n')
    (tmp_path / "data" / "notes.md").write_text("p.add_(p, alpha=-lr * wd)\n")
    assert prose_leaks(tmp_path, statements) == [
        "assignments/README.md:4: p.add_(p, alpha=-lr * wd)   (in its prose; the solution at ref.py:5)",
        "assignments/hints.py:1: done, state = rule.step(logits, state)   (in its prose; the solution at ref.py:8)"]
    (tmp_path / "assignments" / "README.md").write_text("subtract lr * wd times p from p\n")
    (tmp_path / "assignments" / "hints.py").write_text('H = "rule.step takes the logits and the state"\n')
    assert prose_leaks(tmp_path, statements) == []


# ---------------------------------------------------------------- checker and grader

def test_student_tree_imports_and_scores_zero_not_started(student_tree: Path) -> None:
    # "not started" also says that the part imported the stubs from the student tree (the checker verifies where
    # minbert comes from, and an import error would show as ERROR)
    res = grade(student_tree, groups=list(GROUPS), as_user=grading_user())
    assert res["score"] == 0
    for r in res["parts"]:
        assert r["status"] == "not started", r
        assert "raises NotImplementedError" in r["message"]
    assert [t["output"].split(":")[0] for t in res["tests"]] == ["not started"] * len(PARTS)
    assert [(t["group"], t["score"], t["max_score"]) for t in res["groups"]] == [(g, 0, n) for g, n in GROUP_TOTAL.items()]
    # the CLIs built on the stubbed files import; the stubs raise only when called
    proc = warm.run([sys.executable, "-c", "import tasks.classifier, tasks.multitask, tasks.deebert, tasks.simcse"],
                    cwd=student_tree, capture_output=True, text=True, check=False,
                    env={"PYTHONPATH": str(student_tree), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr


def test_reference_scores_full_marks_and_writes_gradescope_results(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results" / "results.json"
    assert grade_main([str(ROOT), "--out", str(out), "--groups", "all", "--as-user", grading_user()]) == 0
    res = json.loads(out.read_text())
    assert res["score"] == TOTAL
    assert len(res["tests"]) == len(PARTS)
    for t in res["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output"}
        assert t["score"] == t["max_score"] > 0 and t["output"] == "PASS", t
    printed = capsys.readouterr().out
    for group, label in GROUPS.items():              # each group totalled on its own
        n = len(parts_of([group]))
        line = f"{label}: {n}/{n} parts pass; {GROUP_TOTAL[group]}/{GROUP_TOTAL[group]} points"
        assert line in printed and line in res["output"]


NO_SCALE = """
    scores = q @ k.transpose(-2, -1) + mask
    probs = F.dropout(scores.softmax(dim=-1), dropout_p, training)
    return (probs @ v).transpose(1, 2).reshape(B, T, nh * hs)
"""
NO_MASK = """
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
    probs = F.dropout(scores.softmax(dim=-1), dropout_p, training)
    return (probs @ v).transpose(1, 2).reshape(B, T, nh * hs)
"""
PRE_LN = """
    h2 = F.dropout(F.linear(h1, self.Wm1, self.bm1), self.p, self.training)
    h3 = layer_norm(h2, self.gLN1, self.bLN1, self.eps) + x
    h4 = gelu(F.linear(h3, self.Wm2, self.bm2))
    h5 = F.dropout(F.linear(h4, self.Wm3, self.bm3), self.p, self.training)
    out = layer_norm(h5, self.gLN2, self.bLN2, self.eps) + h3
    return out
"""


BI_NO_ABS = """
    vectors = [self.encode(x.input_ids, x.attention_mask, x.token_type_ids, h) for x, h in zip(inputs, embeddings)]
    if len(vectors) == 1:
        return vectors[0]
    u, v = vectors
    return torch.cat([u, v, u - v], dim=-1)
"""
NO_TS = PRE_LN.replace("layer_norm(h2, self.gLN1, self.bLN1, self.eps) + x", "layer_norm(h2 + x, self.gLN1, self.bLN1, self.eps)") \
    .replace("layer_norm(h5, self.gLN2, self.bLN2, self.eps) + h3", "layer_norm(h5 + h3, self.gLN2, self.bLN2, self.eps)")
CROSS_WITHOUT_TYPES = """
    if self.config.design == "bi-encoder":
        return [EncoderInput(input_ids_1, attention_mask_1), EncoderInput(input_ids_2, attention_mask_2)]
    ids, mask, _ = join_pairs(input_ids_1, attention_mask_1, input_ids_2, attention_mask_2,
                              self.bert.config.max_position_embeddings)
    return [EncoderInput(ids, mask)]
"""
HEADS_EMBED_AGAIN = """
    out = self.head[task](self.features(inputs, self.embed(inputs)))
    return out if task == "sst" else out.squeeze(-1)
"""
NAIVE_ENTROPY = """
    p = logits.float().softmax(dim=-1)
    h = -(p * p.log()).sum(-1)
    return h / math.log(logits.shape[-1]) if normalize and logits.shape[-1] > 1 else h
"""
EXIT_WITHOUT_TRIM = """
    rows = torch.arange(B)
    layers = torch.full((B,), L, dtype=torch.long)
    state, out, work = rule.start(B, h.device), None, 0
    for l, (layer, ramp) in enumerate(zip(model.bert.layers, model.ramps), 1):
        h = layer(h, bias)
        work += h.shape[0] * h.shape[1]
        logits = ramp(h, mask)
        out = logits.new_zeros(B, logits.shape[-1]) if out is None else out
        if l == L:
            out[rows] = logits
            break
        done, state = rule.step(logits, state)
        out[rows[done]], layers[rows[done]] = logits[done], l
        keep = ~done
        if not keep.any():
            break
        rows, h, mask, bias = rows[keep], h[keep], mask[keep], bias[keep]
        state = {k: v[keep] for k, v in state.items()}
    return ExitOutput(out, layers, work)
"""
ONE_SIDED_KL = """
    lp, lq = F.log_softmax(p_logits.float(), dim=-1), F.log_softmax(q_logits.float(), dim=-1)
    return (lp.exp() * (lp - lq)).sum(-1).mean()
"""
MARGIN_SWAPPED = """
    e1, e2, y = e1.float(), e2.float(), y.float()
    d = 1.0 - F.cosine_similarity(e1, e2, dim=-1) if distance == "cosine" else (e1 - e2).norm(dim=-1)
    return (0.5 * ((1 - y) * d ** 2 + y * (margin - d).clamp(min=0) ** 2)).mean()
"""


@pytest.mark.parametrize("func, body, lost, hint", [
    ("attention", NO_SCALE, {"attention", "model"}, "not divided by sqrt(hs)"),
    ("attention", NO_MASK, {"attention", "model"}, "the mask is not added"),
    ("BertLayer.after_attention", PRE_LN, {"layer", "model"}, "LayerNorm is applied before the residual add"),
    ("MultitaskBert.features", BI_NO_ABS, {"mt_bi_encoder"}, "[u, v, u - v], without the absolute value"),
], ids=["attention-without-scaling", "mask-ignored", "layernorm-before-residual", "bi-encoder-without-abs"])
def test_wrong_implementation_loses_exactly_the_affected_parts(
        tmp_path: Path, func: str, body: str, lost: set[str], hint: str) -> None:
    groups = sorted({PARTS[p].group for p in lost})        # the groups the mistake touches, every part of them
    res = grade(submission_with(tmp_path, {func: body}), groups=groups, as_user=grading_user())
    failed = {r["part"] for r in res["parts"] if r["status"] != "pass"}
    assert failed == lost, res["parts"]
    assert res["score"] == sum(GROUP_TOTAL[g] for g in groups) - sum(PARTS[p].points for p in lost)
    for t in res["groups"]:     # the other groups keep their full score
        assert t["score"] == GROUP_TOTAL[t["group"]] - sum(PARTS[p].points for p in lost if PARTS[p].group == t["group"])
    for r in res["parts"]:
        if r["part"] in lost:
            assert r["status"] == "fail" and r["score"] == 0
            assert func.split(".")[0] in r["message"], r["message"]   # names the function
            assert "differs at index" in r["message"] and "max abs diff" in r["message"]
    own = next(r for r in res["parts"] if r["part"] in lost and r["part"] != "model")
    assert hint in own["message"]


def test_each_wrong_function_loses_its_own_part_in_every_group(tmp_path: Path) -> None:
    # one submission with independent mistakes: each costs its own part and says what it looks like
    mistakes = {  # function: (its body, the part it loses, the status, what the message says)
        "BertLayer.after_attention": (NO_TS, "layer", "fail", "ts is left out of the last add-and-norm"),
        "MultitaskBert.pair_inputs": (CROSS_WITHOUT_TYPES, "mt_cross_encoder", "fail",
                                      "token_type_ids are None: keep the segment ids"),
        "MultitaskBert.predict_from_embeddings": (HEADS_EMBED_AGAIN, "mt_heads", "fail",
                                                  "pass its `embeddings` argument on"),
        "paraphrase_loss": ("return F.binary_cross_entropy_with_logits(logit, labels)", "mt_para_loss", "error",
                            "convert them with labels.to(logit.dtype)"),
        "similarity_loss": ("return F.l1_loss(score, gold.to(score.dtype))", "mt_sts_loss", "fail",
                            "the absolute error (L1) is used"),
        "entropy": (NAIVE_ENTROPY, "deebert_entropy", "fail", "got nan, expected 0"),
        "early_exit": (EXIT_WITHOUT_TRIM, "deebert_exit", "fail", "With trim, drop the columns"),
        "symmetric_kl": (ONE_SIDED_KL, "smart_kl", "fail", "only KL(P || Q) is computed"),
        "TaskPALs.forward": ("return self.decoder(self.attention[layer](self.encoder(x), mask))", "pals_forward",
                             "fail", "no GELU follows the decoder"),
        "margin_loss": (MARGIN_SWAPPED, "simcse_margin", "fail", "the branches are swapped"),
    }
    res = grade(submission_with(tmp_path, {f: m[0] for f, m in mistakes.items()}), groups=list(GROUPS),
                as_user=grading_user())
    parts = {r["part"]: r for r in res["parts"]}
    assert {p for p, r in parts.items() if r["status"] != "pass"} == {m[1] for m in mistakes.values()}, res["parts"]
    for func, (_, part, status, says) in mistakes.items():
        assert parts[part]["status"] == status and parts[part]["score"] == 0
        name = func if "." in func else f"{func}()"      # the message names the function, then where it is
        assert any(f"{name}{tail}" in parts[part]["message"] for tail in (" (minbert/", " in minbert/", '("para"')), \
            parts[part]["message"]
        assert says in parts[part]["message"], parts[part]["message"]
    assert "take log p from F.log_softmax" in parts["deebert_entropy"]["message"]
    assert [(t["group"], t["score"]) for t in res["groups"]] == [("core", 75), ("multitask", 45), ("deebert", 0),
                                                                 ("smart", 15), ("pals", 10), ("simcse", 10)]


def test_hang_and_exit_are_contained_by_the_time_limit(tmp_path: Path) -> None:
    sub = submission_with(tmp_path, {
        "attention": "import os\nos._exit(3)",            # leaves the interpreter at once
        "BertLayer.after_attention": "import sys\nsys.exit(0)",   # raises SystemExit
        "AdamW.step": "while True:\n    pass",             # never returns
    }, flat=True)                                          # model.py, optim.py at the top, as uploaded
    timeout = 6.0
    res = grade(sub, timeout=timeout, as_user=grading_user())
    status = {r["part"]: r["status"] for r in res["parts"]}
    assert status == {"attention": "crash", "embeddings": "pass", "layer": "error", "model": "crash",
                      "adamw": "timeout", "classifier_head": "pass"}, res["parts"]
    parts = {r["part"]: r for r in res["parts"]}
    assert "exit code 3" in parts["attention"]["message"]
    assert "sys.exit(0)" in parts["layer"]["message"] and "BertLayer.after_attention" in parts["layer"]["message"]
    assert f"within {timeout:g} s" in parts["adamw"]["message"]
    assert res["score"] == PARTS["embeddings"].points + PARTS["classifier_head"].points
    # by default the grader grades part 1 alone, out of 100 as it always was, from part 1's files alone
    assert [t["group"] for t in res["groups"]] == ["core"] and res["groups"][0]["max_score"] == 100
    assert "multitask.py" not in res["output"] and "deebert.py" not in res["output"]
    assert res["execution_time"] < 4 * timeout   # the hanging part was stopped, not waited for


def test_checker_cli_prints_a_line_per_part(student_tree: Path) -> None:
    proc = warm.run([sys.executable, "-m", "assignments.check", "attention", "adamw", "classifier_head", "deebert"],
                    cwd=student_tree,
                    capture_output=True, text=True, env={"PYTHONPATH": str(student_tree), "PATH": "/usr/bin:/bin"},
                    check=False)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines.pop(0) == f"checking the tree at {student_tree}"
    a, b, c = (PARTS[p].points for p in ("attention", "adamw", "classifier_head"))
    assert lines[0].split()[:3] == ["attention", f"0/{a}", "not"] and "attention() in minbert/model.py" in lines[0]
    assert lines[1].split()[:3] == ["adamw", f"0/{b}", "not"] and "AdamW.step in minbert/optim.py" in lines[1]
    assert lines[2].split()[:3] == ["classifier_head", f"0/{c}", "not"]
    assert "pool() in minbert/pooling.py" in lines[2]          # the head runs pool() first: part of the same part
    assert lines[3].startswith("deebert_entropy") and lines[4].startswith("deebert_exit")
    assert "entropy() in minbert/deebert.py" in lines[3] and "not started" in lines[4]
    assert lines[5] == f"part 1 (minBERT): 0/3 parts pass; 0/{a + b + c} points"
    assert lines[6] == f"extension DeeBERT: 0/2 parts pass; 0/{GROUP_TOTAL['deebert']} points"
