"""The papers' numbers the teaching text cites, read from the reference code, the student stubs, the handout and the
docs: BitFit's equation numbers (the Q/K/V projections unnumbered, eqs. 1-5 the rest of the layer), BERT's section for
the embeddings, attention's scale, PALs' concat placement; and the library's convention of a shape comment on
every reshape."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from minbert import model, pals

ROOT = Path(__file__).resolve().parents[1]
# every tracked text that cites BitFit's equations for the layer
BITFIT_TEXTS = ("minbert/model.py", "minbert/packed.py", "minbert/bitfit.py", "minbert/param_groups.py",
                "assignments/student/minbert/model.py",
                "assignments/README.md", "assignments/mistakes.py", "docs/training.md", "notebooks/minbert.ipynb",
                "assignments/tree_files/minbert.ipynb")
# BitFit (Ben-Zaken et al., 2022, sec. 3.1): Q, K, V and h1 are unnumbered; (1) h2, (2) h3, (3) h4, (4) h5, (5) out
WRONG_BITFIT = ("eq. 1: the query", "eq. 1: (B", "eq. 1: (N", "eq. 1 as one", "eqs. 2-3", "eqs. 4-5", "eqs. 2-5",
                "Eqs. 2-5",             # and the whole notation, bq bk bv included, is sec. 3.1's, not eqs. 1-5's:
                "2022, eqs. 1-5)", "BitFit, eqs. 1-5", "BitFit's, eqs. 1-5", "names (eqs. 1-5)", "per layer, eqs. 1-5")


@pytest.mark.parametrize("path", BITFIT_TEXTS)
def test_bitfit_citations_follow_the_papers_numbers(path: str) -> None:
    text = (ROOT / path).read_text()
    assert not [w for w in WRONG_BITFIT if w in text], path


def test_the_layer_names_bitfits_equations_where_it_computes_them() -> None:
    text = (ROOT / "minbert/model.py").read_text()
    assert "BitFit's (unnumbered) query, key and value projections" in text
    assert "eqs. 1-2: the attention output projection and the first add-and-norm" in text
    assert "eqs. 3-5: the feed-forward block (eqs. 3-4) and the second add-and-norm (eq. 5)" in text
    assert model.BertLayer.after_attention.__doc__.startswith("Eqs. 1-5 of BitFit")
    assert "eqs. (1) h2 to (5) out" in model.__doc__
    assert "eqs. (1) h2 to (5) out; its Q, K, V and h1 are unnumbered" in (ROOT / "assignments/README.md").read_text()


def test_attention_names_its_scale_the_per_head_size() -> None:
    for path in ("minbert/model.py", "assignments/student/minbert/model.py"):
        text = (ROOT / path).read_text()
        assert "sqrt(d)" not in text, path
        assert "softmax(QK^T / sqrt(hs) + mask) V, hs = d_k the per-head size" in text, path


def test_the_embeddings_cite_berts_input_representations() -> None:
    cite = "Devlin et al., 2019, sec. 3, Input/Output Representations (Figure 2)"
    for path in ("minbert/model.py", "assignments/student/minbert/model.py", "assignments/README.md"):
        text = (ROOT / path).read_text()
        assert "Devlin et al., 2019, sec. 3.2" not in text, path
        assert cite in text, path


def test_pals_concat_is_described_in_every_layer() -> None:
    texts = [pals.__doc__, (ROOT / "tasks/multitask/settings.py").read_text(), (ROOT / "docs/smart-pals.md").read_text(),
             (ROOT / "assignments/student/minbert/pals.py").read_text()]
    for text in texts:
        assert "first self-attention" not in " ".join(text.split())
    assert "in every layer" in pals.__doc__


def test_every_reshape_in_the_library_carries_a_shape_comment() -> None:
    """Each view, reshape, flatten, transpose or permute in minbert/ has a `# ...(shape)...` comment on its line."""
    reshape = re.compile(r"\.(view|view_as|reshape|flatten|transpose|permute|unflatten)\(")
    bare = []
    for path in sorted((ROOT / "minbert").glob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code, _, comment = line.partition("#")
            if reshape.search(code) and not line.strip().startswith(('"""', "###")) and "(" not in comment:
                bare.append(f"{path.name}:{i}")
    assert not bare


def test_every_public_function_in_the_library_has_a_docstring() -> None:
    """Students' stubs included (they get theirs through the generator): a one-line docstring, shapes where tensors
    go in or out."""
    def undocumented(body: list[ast.stmt], prefix: str) -> list[str]:
        out = []
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                out += undocumented(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_") \
                    and not any(ast.unparse(d).endswith(".setter") for d in node.decorator_list) \
                    and ast.get_docstring(node) is None:
                out.append(f"{prefix}{node.name}")
        return out
    missing = [f"{path.name}: {name}" for path in sorted((ROOT / "minbert").glob("*.py"))
               for name in undocumented(ast.parse(path.read_text()).body, "")]
    assert not missing


def test_smart_defaults_are_called_the_papers_perturbation_settings_with_algorithm_1s_proximal_term_off() -> None:
    """SmartConfig() is R_s alone (bregman False): its docstring and docs/smart-pals.md say so, name how to add
    Algorithm 1's Bregman proximal term (bregman=True, --smart-bregman) and that beta is held fixed."""
    from minbert.smart import SmartConfig

    assert SmartConfig().bregman is False
    for path in ("minbert/smart.py", "assignments/student/minbert/smart.py", "docs/smart-pals.md"):
        text = " ".join((ROOT / path).read_text().split())
        assert "the paper's settings" not in text and "the defaults are the paper's (" not in text, path
    doc = " ".join(SmartConfig.__doc__.split())
    assert "the paper's perturbation (adversarial regulariser R_s) settings" in doc
    assert "bregman=True (--smart-bregman) adds Algorithm 1's Bregman proximal point term" in doc
    assert "beta is held fixed" in doc
    page = " ".join((ROOT / "docs/smart-pals.md").read_text().split())
    assert "the paper's perturbation settings, with Algorithm 1's Bregman proximal point term off" in page
    assert "`--smart-bregman` (`bregman=True`) adds it" in page and "beta is held fixed" in page


def test_the_course_adamw_is_not_dated_before_transformers_4() -> None:
    """transformers.AdamW kept the course's update through 4.x (deprecated there with a FutureWarning, since removed)."""
    for path in ("minbert/optim.py", "assignments/student/minbert/optim.py", "docs/checkpoints.md",
                 "tests/fixtures/PROVENANCE.md"):
        text = " ".join((ROOT / path).read_text().split())
        assert "pre-4.x" not in text and "before transformers 4" not in text, path
        assert "deprecated during 4.x, since removed" in text, path


def test_the_adamw_docstring_says_where_its_decay_differs_from_algorithm_2() -> None:
    from minbert.optim import AdamW

    doc = " ".join(AdamW.__doc__.split())
    assert "Alg. 2 scales the decay by the schedule multiplier eta_t" in doc


def test_bert_initialisation_cites_the_released_config_not_appendix_a2() -> None:
    """N(0, 0.02) is initializer_range in Google's released bert_config.json; BERT's appendix A.2 does not state it."""
    for path in ("minbert/model.py", "assignments/student/minbert/model.py", "minbert/checkpoint.py",
                 "tests/test_mutants.py"):
        for line in (ROOT / path).read_text().splitlines():
            if "N(0, " in line and ("A.2" in line or "appendix" in line):
                raise AssertionError(f"{path}: {line.strip()}")
    assert "initializer_range in Google's released BERT configs (bert_config.json" in " ".join(
        model.BertModel._init.__doc__.split())


def test_the_after_attention_stub_says_when_h1_keeps_the_padding() -> None:
    """On a GPU or under torch.compile on_real_tokens runs the layer on the padded (B, T, H) batch (skips_padding)."""
    for path in ("minbert/model.py", "assignments/student/minbert/model.py"):       # the comment's words alone
        text = " ".join(re.sub(r"#+( STUB:)?", " ", (ROOT / path).read_text()).split())
        assert "or (B, T, H) when the batch has no padding" not in text, path
        assert ("(N, H), the batch's N real tokens, on a CPU (forward drops the padding and puts it back), or "
                "(B, T, H) on a GPU or under torch.compile, padding included (forward zeroes it afterwards), and "
                "whenever the batch has no padding") in text, path
