"""Write the checker's expected values, assignments/fixtures/*.safetensors, from the reference code.

    python -m assignments.make_fixtures

Only tensors are stored: inputs, parameters and expected outputs (plus the outputs of the common mistakes, so
that the checker can say which one a wrong answer looks like: part 1's from the reference code here and from the
equations of assignments/mistakes.py, which stays in the reference). Run it from the reference tree after changing
what the reference computes, then commit the fixtures. The grader draws hidden fixtures from the same builders
(assignments/hidden.py), so a key a check reads is written by its builder here.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from minbert.files import replacing

from .common import FIXTURES, SEED, _tiny_config, gradients, output_weights

ROOT = Path(__file__).resolve().parents[1]


ROUNDING = {"rtol": 1e-5, "atol": 1e-5}   # a new value this close to the committed one is the same (another CPU's sums)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether b is a (committed) up to float rounding: the same shape and dtype, integers equal, floats within
    ROUNDING."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.allclose(a, b, **ROUNDING, equal_nan=True) if a.is_floating_point() else torch.equal(a, b)


def _rounding_of(path: Path, tensors: dict[str, torch.Tensor]) -> float | None:
    """The largest difference from the committed file when it holds the same tensors up to float rounding (same
    keys, each _same), else None: rewriting it would only churn git."""
    if not path.is_file():
        return None
    from safetensors.torch import load_file
    old = load_file(str(path))
    if set(old) != set(tensors) or not all(_same(old[k], v.detach()) for k, v in tensors.items()):
        return None
    return max([float((old[k].double() - v.detach().double()).abs().nan_to_num(0.0).max())
                for k, v in tensors.items() if v.is_floating_point() and v.numel()], default=0.0)


def _save(name: str, tensors: dict[str, torch.Tensor]) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    path = FIXTURES / f"{name}.safetensors"
    same = _rounding_of(path, tensors)
    if same is not None:
        print(f"kept {path}: " + ("unchanged" if same == 0 else f"the same up to float rounding ({same:.1g} at most)"))
        return
    # a fixture that gains keys keeps each committed tensor that is _same, byte for byte
    from safetensors.torch import load_file
    old = load_file(str(path)) if path.is_file() else {}
    kept = {k: old[k] for k, v in tensors.items() if k in old and _same(old[k], v.detach())}
    with replacing(path) as tmp:
        save_file({k: kept.get(k, v).detach().clone().contiguous() for k, v in tensors.items()}, tmp)
    print(f"wrote {path} ({len(tensors)} tensors"
          + (f", {len(kept)} of them the committed ones, the same up to float rounding)" if kept else ")"))


def _padding_mask(lengths: list[int], T: int) -> torch.Tensor:
    from minbert.model import mask_to_bias
    keep = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    return mask_to_bias(keep, torch.float32)                                     # (B, 1, 1, T)


def attention_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.model import attention
    B, nh, T, hs, p = 2, 4, 6, 8, 0.3
    q, k, v = (torch.randn(B, nh, T, hs, generator=g) for _ in range(3))
    mask = _padding_mask([T, 4], T)
    out = attention(q, k, v, mask, p, False)
    torch.manual_seed(SEED)
    out_train = attention(q, k, v, mask, p, True)
    # common mistakes, for the checker's hints
    probs = (q @ k.transpose(-2, -1) + mask).softmax(-1)                 # no 1/sqrt(hs)
    out_no_scale = (probs @ v).transpose(1, 2).reshape(B, T, nh * hs)
    probs = (q @ k.transpose(-2, -1) / math.sqrt(hs)).softmax(-1)        # no mask
    out_no_mask = (probs @ v).transpose(1, 2).reshape(B, T, nh * hs)
    probs = (q @ k.transpose(-2, -1) / math.sqrt(hs) + mask).softmax(-1)
    out_bad_merge = (probs @ v).reshape(B, T, nh * hs)                   # heads merged without the transpose
    # the gradient leg: the training-mode call's backward pass, of a fixed weighting of its output
    qkv = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(SEED)
    out_grad = attention(*qkv, mask, p, True)
    grads = torch.autograd.grad((out_grad * output_weights(out_grad.shape)).sum(), qkv)
    from .mistakes import attention_mistakes
    return {"q": q, "k": k, "v": v, "mask": mask, "dropout_p": torch.tensor(p), "out": out, "out_train": out_train,
            **{f"grad_{name}": gr for name, gr in zip("qkv", grads)},
            "out_no_scale": out_no_scale, "out_no_mask": out_no_mask, "out_bad_merge": out_bad_merge,
            **attention_mistakes(q, k, v, mask)}


def _randomize(module: torch.nn.Module, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Random values for every parameter, gains near 1, so that no term of the computation is zero."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 1.0 if name.split(".")[-1].startswith("g") else 0.0   # gLN*: gains near 1
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
    return {f"param.{k}": v.clone() for k, v in module.state_dict().items()}


def embeddings_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.model import BertEmbeddings, layer_norm
    emb = BertEmbeddings(_tiny_config())
    params = _randomize(emb, g)
    ids = torch.randint(1, 50, (2, 7), generator=g)
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0]])
    with torch.no_grad():
        out = emb.eval()(ids, types)
        torch.manual_seed(SEED)
        out_train = emb.train()(ids, types)
        pos = emb.position(torch.arange(7))[None]
        out_no_type = layer_norm(emb.word(ids) + pos, emb.gLN, emb.bLN, emb.eps)
        out_no_position = layer_norm(emb.word(ids) + emb.token_type(types), emb.gLN, emb.bLN, emb.eps)
    from .mistakes import embeddings_without_layernorm
    out_no_layernorm = embeddings_without_layernorm(params["param.word.weight"], params["param.position.weight"],
                                                    params["param.token_type.weight"], ids, types)
    return dict(params, input_ids=ids, token_type_ids=types, out=out, out_train=out_train,
                out_no_type=out_no_type, out_no_position=out_no_position, out_no_layernorm=out_no_layernorm)


def layer_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.model import BertLayer, gelu, layer_norm
    layer = BertLayer(_tiny_config(attn_implementation="sdpa", attention_probs_dropout_prob=0.0))
    params = _randomize(layer, g)
    x = torch.randn(2, 6, 32, generator=g)
    mask = _padding_mask([6, 3], 6)
    torch.randn(32, 32, generator=g)   # a draw kept so that the classifier-head fixture after it keeps its values
    with torch.no_grad():
        out = layer.eval()(x, mask)
        torch.manual_seed(SEED)
        out_train = layer.train()(x, mask)
        layer.eval()

        def variant(pre_ln: bool = False, residual: bool = True) -> torch.Tensor:
            h1 = layer.attend(*(layer.split_heads(F.linear(x, W, b)) for W, b in
                                [(layer.Wq, layer.bq), (layer.Wk, layer.bk), (layer.Wv, layer.bv)]), mask)
            h2, r = F.linear(h1, layer.Wm1, layer.bm1), (1.0 if residual else 0.0)
            h3 = (layer_norm(h2, layer.gLN1, layer.bLN1, layer.eps) + x if pre_ln
                  else layer_norm(h2 + r * x, layer.gLN1, layer.bLN1, layer.eps))
            h5 = F.linear(gelu(F.linear(h3, layer.Wm2, layer.bm2)), layer.Wm3, layer.bm3)
            out = (layer_norm(h5, layer.gLN2, layer.bLN2, layer.eps) + h3 if pre_ln
                   else layer_norm(h5 + r * h3, layer.gLN2, layer.bLN2, layer.eps))
            return out * (mask == 0).view(x.shape[0], x.shape[1], 1)  # the layer leaves padding at 0

        out_pre_ln, out_no_residual = variant(pre_ln=True), variant(residual=False)
        from .checks import _FixedAdapter
        # an adapter (PALs) adds ts inside the last add-and-norm; its own generator keeps the later fixtures
        layer.adapter = _FixedAdapter(0.3 * torch.randn(32, 32, generator=torch.Generator().manual_seed(1)))
        out_parallel = layer(x, mask)
    adapter, layer.adapter = layer.adapter, None
    from .checks import layer_gradients
    grads = layer_gradients(layer, x, mask, "the reference's BertLayer")
    from .mistakes import layer_mistakes
    mistakes = layer_mistakes(dict(params, x=x, mask=mask), layer.nh, layer.eps)
    return dict(params, **grads, x=x, mask=mask, parallel_A=adapter.A, out=out, out_train=out_train,
                out_parallel=out_parallel, out_pre_ln=out_pre_ln, out_no_residual=out_no_residual, **mistakes)


def model_fixture(g: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """MiniLM's hidden states on two sentence pairs: the shipped fixture's, or, given g, pairs of random word ids."""
    import minbert
    model = minbert.load_pretrained("minilm", attn_implementation="eager")
    if g is None:
        tok = minbert.Tokenizer.from_pretrained("minilm")
        batch = tok(["A surprisingly good movie.", "A cat sat."], ["I loved it.", "Dogs bark."])  # (2, T), padded
        ids, mask, types = batch.input_ids, batch.attention_mask, batch.token_type_ids
    else:
        ids, mask, types = _random_pairs(g)
    with torch.no_grad():
        out = model(ids, mask, types, output_hidden_states=True)
    hidden = {f"hidden_{i}": h for i, h in enumerate(out.hidden_states)}
    f = dict(hidden, input_ids=ids, attention_mask=mask, token_type_ids=types, pooler=out.pooler_output)
    from .checks import sentence_0_alone
    alone = sentence_0_alone(model, f)
    return dict(f, grad_h0=gradients("the reference's BertModel", alone.last_hidden_state, [alone.hidden_states[0]])[0])


def _random_pairs(g: torch.Generator, B: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[CLS] a [SEP] b [SEP] of random word-piece ids (MiniLM's vocabulary: [CLS] 101, [SEP] 102, padding 0)."""
    rows = []
    for _ in range(B):
        a, b = (int(torch.randint(2, 9, (1,), generator=g)) for _ in range(2))
        words = torch.randint(1996, 29612, (a + b,), generator=g).tolist()       # whole words and pieces
        rows.append(([101, *words[:a], 102, *words[a:], 102], [0] * (a + 2) + [1] * (b + 1)))
    T = max(len(r) for r, _ in rows)
    ids, types = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, dtype=torch.long)
    for i, (r, t) in enumerate(rows):
        ids[i, :len(r)], types[i, :len(t)] = torch.tensor(r), torch.tensor(t)
    return ids, (ids != 0).long(), types                                          # (B, T) each


def adamw_fixture(g: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """The AdamW check's problem and the course's 1000-step test: shipped (the course's seed 0 and its stored
    optimizer_test.npy), or, given g, another problem and data seed with the reference's weights after; and the
    trajectories the check compares with, both styles' right one and each mistake's (mistakes.adamw_fixture_keys)."""
    import numpy as np

    from minbert.optim import AdamW

    from .adamw_problem import ADAMW_EPS, ADAMW_GROUPS, ADAMW_STEPS, adamw_problem, course_optimizer_test
    from .mistakes import adamw_fixture_keys
    init, grads = adamw_problem(g)
    out = {f"init_{i}": p for i, p in enumerate(init)}
    out.update(adamw_fixture_keys(init, grads, ADAMW_GROUPS, ADAMW_EPS, ADAMW_STEPS))
    for style in ("course", "torch"):   # eps where the other style adds it, or one t for all, fails by far, here too
        right = torch.cat([out[f"{style}.right.{i}"].flatten() for i in range(len(init))])
        for name, times in (("eps_other_style", 100), ("step_count_shared", 10)):   # times the check's tolerance
            other = torch.cat([out[f"{style}.{name}.{i}"].flatten() for i in range(len(init))])
            assert ((other - right).abs() / (1e-6 + 1e-5 * right.abs())).max() > times, f"{name} hardly shows"
    out.update({f"grad_{t}_{i}": gr for t, step in enumerate(grads) for i, gr in enumerate(step) if gr is not None})
    if g is None:
        seed, weight = 0, torch.tensor(np.load(FIXTURES / "optimizer_test.npy"))
    else:
        seed = int(torch.randint(1, 2**31 - 1, (1,), generator=g))
        weight = course_optimizer_test(AdamW, seed)
    return dict(out, course_seed=torch.tensor(seed), course_out=weight)


def classifier_head_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from tasks.classifier import SentimentClassifier

    from .checks import _FixedEncoder
    B, T, H = 3, 5, 32
    hidden, pooled = torch.randn(B, T, H, generator=g), torch.randn(B, H, generator=g).tanh()
    ids = torch.randint(1, 50, (B, T), generator=g)
    mask = (torch.arange(T)[None, :] < torch.tensor([5, 3, 1])[:, None]).long()   # (B, T), padded
    out = {"hidden": hidden, "pooled": pooled, "input_ids": ids, "attention_mask": mask}
    for pooling in ("mean", "cls", "pooler"):
        model = SentimentClassifier(_FixedEncoder(_tiny_config(), hidden, pooled), 5, pooling=pooling)
        if pooling == "mean":
            params = _randomize(model, g)
            out.update(params)
        model.load_state_dict({k[len("param."):]: v for k, v in params.items()})
        with torch.no_grad():
            out[f"out_{pooling}"] = model.eval()(ids, mask)
            torch.manual_seed(SEED)
            out[f"out_{pooling}_train"] = model.train()(ids, mask)
    with torch.no_grad():
        out["out_mean_with_padding"] = model.head(hidden.mean(1))
    return out


# ---------------------------------------------------------------- part 2: the multitask model

def _sentences(lengths: list[int], T: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded batches shaped like the tokenizer's: [CLS] (id 2) ... [SEP] (id 3), padding 0; (B, T) each."""
    ids = torch.zeros(len(lengths), T, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.cat([torch.tensor([2]), torch.randint(5, 50, (n - 2,), generator=g), torch.tensor([3])])
    return ids, (ids != 0).long()


def multitask_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.multitask import EncoderInput, join_pairs

    from .checks_multitask import KEY, multitask_model
    ids1, mask1 = _sentences([7, 4, 5], 7, g)
    ids2, mask2 = _sentences([6, 6, 3], 6, g)
    long1, lmask1 = _sentences([12, 5], 12, g)
    long2, lmask2 = _sentences([9, 10], 10, g)                  # 12 + 9 - 1 and 5 + 10 - 1 tokens: 20 > 16, 14
    out = {"input_ids_1": ids1, "attention_mask_1": mask1, "input_ids_2": ids2, "attention_mask_2": mask2,
           "long_ids_1": long1, "long_mask_1": lmask1, "long_ids_2": long2, "long_mask_2": lmask2}
    bi = multitask_model("bi-encoder")
    _randomize(bi, g)
    cross = multitask_model("cross-encoder")
    cross.bert.load_state_dict(bi.bert.state_dict())
    cross.head["sst"].load_state_dict(bi.head["sst"].state_dict())
    for task in ("para", "sts"):
        _randomize(cross.head[task], g)
    for design, model in (("bi-encoder", bi), ("cross-encoder", cross)):
        out.update({f"param.{KEY[design]}.{k}": v.clone() for k, v in model.state_dict().items()})
    T = cross.bert.config.max_position_embeddings
    for prefix, pair in (("joined", (ids1, mask1, ids2, mask2)), ("long_joined", (long1, lmask1, long2, lmask2))):
        x = cross.pair_inputs(*pair)[0]
        assert torch.equal(x.input_ids, join_pairs(*pair, T)[0]) and x.input_ids.shape[1] <= T
        out.update({f"{prefix}_ids": x.input_ids, f"{prefix}_mask": x.attention_mask, f"{prefix}_types": x.token_type_ids})
    assert out["long_joined_ids"].shape[1] == T < int(lmask1.sum(1).max() + lmask2.sum(1).max()) - 1
    cross.eval()
    bi.eval()
    with torch.no_grad():
        # one pass (the sentence vector), from a perturbed h0, and the common mistakes with it
        for name, x in (("sentence", EncoderInput(ids1, mask1)),
                        ("joined", EncoderInput(out["joined_ids"], out["joined_mask"], out["joined_types"]))):
            h0 = cross.embed([x])[0] + 0.5 * torch.randn(*x.input_ids.shape, 32, generator=g)   # (B, T, H)
            out[f"{name}_h0"] = h0
            enc = cross.bert(x.input_ids, x.attention_mask, x.token_type_ids, embeddings=h0)
            for pooling in ("mean", "cls"):
                cross.config.pooling = pooling
                key = f"{name}_{pooling}"
                out[key] = cross.features([x], [h0])                                        # (B, H)
                out[f"{key}_no_h0"] = cross.encode(x.input_ids, x.attention_mask, x.token_type_ids)
                out[f"{key}_pooler"] = enc.pooler_output.clone()
                out[f"{key}_mean_padding"] = enc.last_hidden_state.mean(1).clone()
        for pooling in ("mean", "cls"):
            # the bi-encoder: u, v and the common mistakes with them
            bi.config.pooling = pooling
            u, v = bi.encode(ids1, mask1), bi.encode(ids2, mask2)                        # (B, H) each
            key = f"bi_{pooling}"
            out[key] = bi.pair_features(ids1, mask1, ids2, mask2)                         # (B, 3H)
            out[f"{key}_no_abs"] = torch.cat([u, v, u - v], -1)
            out[f"{key}_swapped"] = torch.cat([v, u, (u - v).abs()], -1)
            out[f"{key}_diff_first"] = torch.cat([(u - v).abs(), u, v], -1)
            out[f"{key}_diff_middle"] = torch.cat([u, (u - v).abs(), v], -1)
            out[f"{key}_product"] = torch.cat([u, v, u * v], -1)
        for model in (bi, cross):
            model.config.pooling = "mean"
        # the heads, on fixed features (the check stands them in for features())
        out["feat_sst"] = torch.randn(3, 32, generator=g)
        out["feat_bi"], out["feat_cross"] = torch.randn(3, 96, generator=g), torch.randn(3, 32, generator=g)
        for design, model in (("bi-encoder", bi), ("cross-encoder", cross)):
            short = KEY[design]
            for task in ("sst", "para", "sts"):
                key = f"head_{task}" if task == "sst" else f"head_{task}_{short}"
                features = out["feat_sst" if task == "sst" else f"feat_{short}"]
                model.features = lambda inputs, embeddings, features=features: features.clone()
                out[key] = model.eval().predict_from_embeddings(task, [], [])
                torch.manual_seed(SEED)
                out[f"{key}_train"] = model.train().predict_from_embeddings(task, [], [])
                if task != "sst":
                    other = "sts" if task == "para" else "para"
                    out[f"{key}_other_head"] = model.eval().head[other](features).squeeze(-1)
            del model.features
    return out


def multitask_losses_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.multitask import paraphrase_loss, sentiment_loss, similarity_loss
    logits, labels = 2 * torch.randn(4, 5, generator=g), torch.tensor([4, 0, 2, 2])
    logit, para = 2 * torch.randn(4, generator=g), torch.tensor([1.0, 0.0, 0.0, 1.0])
    score, gold = 5 * torch.rand(4, generator=g), torch.tensor([0.0, 2.4, 5.0, 3.2])
    logp = logits.log_softmax(-1)
    return {
        "sst_logits": logits, "sst_labels": labels, "sst_loss": sentiment_loss(logits, labels),
        "sst_loss_softmax": F.cross_entropy(logits.softmax(-1), labels),
        "sst_loss_sum": -logp[torch.arange(4), labels].sum(), "sst_loss_nll": F.nll_loss(logits, labels),
        "para_logit": logit, "para_labels": para, "para_loss": paraphrase_loss(logit, para),
        "para_loss_sum": F.binary_cross_entropy_with_logits(logit, para, reduction="sum"),
        "para_loss_double_sigmoid": F.binary_cross_entropy_with_logits(logit.sigmoid(), para),
        "para_loss_mse": F.mse_loss(logit.sigmoid(), para),
        "sts_score": score, "sts_gold": gold, "sts_loss": similarity_loss(score, gold),
        "sts_loss_l1": F.l1_loss(score, gold), "sts_loss_sum": F.mse_loss(score, gold, reduction="sum"),
        "sts_loss_rmse": F.mse_loss(score, gold).sqrt(), "sts_loss_gold_scaled": F.mse_loss(score, gold / 5),
        "sts_loss_huber": F.smooth_l1_loss(score, gold),
    }


def main(argv: list[str] | None = None) -> int:
    import argparse
    argparse.ArgumentParser(prog="python -m assignments.make_fixtures", description=__doc__.split("\n")[0],
                            epilog="It takes no options: run it from the reference tree after changing what the "
                                   "reference computes, then commit the fixtures.").parse_args(argv)
    import minbert
    if Path(minbert.__file__).resolve().parents[1] != ROOT:
        print(f"error: minbert comes from {minbert.__file__}, not the reference tree {ROOT}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    _save("attention", attention_fixture(g))
    _save("embeddings", embeddings_fixture(g))
    _save("layer", layer_fixture(g))
    _save("model", model_fixture())
    _save("adamw", adamw_fixture())
    _save("classifier_head", classifier_head_fixture(g))
    # part 2 and the extensions draw from generators of their own, so that a change to one leaves the others be
    _save("multitask", multitask_fixture(torch.Generator().manual_seed(2)))
    _save("multitask_losses", multitask_losses_fixture(torch.Generator().manual_seed(3)))
    from .make_fixtures_ext import EXTENSION_FIXTURES
    for name, make in EXTENSION_FIXTURES.items():                      # generators 4, 5, ...
        _save(name, make(torch.Generator().manual_seed(4 + list(EXTENSION_FIXTURES).index(name))))
    return 0


if __name__ == "__main__":
    from tasks.core.errors import run_cli
    sys.exit(run_cli(main))
