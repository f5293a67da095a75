"""Write the checker's expected values, assignments/fixtures/*.safetensors, from the reference code.

    python -m assignments.make_fixtures

Only tensors are stored: inputs, parameters and expected outputs (plus the outputs of a few common
mistakes, so that the checker can say which one a wrong answer looks like). Run it from the reference
tree after changing what the reference computes, then commit the fixtures.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from .checks import FIXTURES, SEED, _tiny_config

ROOT = Path(__file__).resolve().parents[1]


def _save(name: str, tensors: dict[str, torch.Tensor]) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    tmp = FIXTURES / f".{name}.safetensors.tmp"
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, FIXTURES / f"{name}.safetensors")
    print(f"wrote {FIXTURES / name}.safetensors ({len(tensors)} tensors)")


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
    return {"q": q, "k": k, "v": v, "mask": mask, "dropout_p": torch.tensor(p), "out": out, "out_train": out_train,
            "out_no_scale": out_no_scale, "out_no_mask": out_no_mask, "out_bad_merge": out_bad_merge}


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
    return dict(params, input_ids=ids, token_type_ids=types, out=out, out_train=out_train,
                out_no_type=out_no_type, out_no_position=out_no_position)


def layer_fixture(g: torch.Generator) -> dict[str, torch.Tensor]:
    from minbert.model import BertLayer, gelu, layer_norm
    layer = BertLayer(_tiny_config(attn_implementation="sdpa", attention_probs_dropout_prob=0.0))
    params = _randomize(layer, g)
    x = torch.randn(2, 6, 32, generator=g)
    mask = _padding_mask([6, 3], 6)
    A = 0.3 * torch.randn(32, 32, generator=g)
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
        layer.adapter = _FixedAdapter(A)
        out_adapter = layer(x, mask)
    return dict(params, x=x, mask=mask, adapter_A=A, out=out, out_train=out_train, out_adapter=out_adapter,
                out_pre_ln=out_pre_ln, out_no_residual=out_no_residual)


def model_fixture() -> dict[str, torch.Tensor]:
    import minbert
    model = minbert.load_pretrained("minilm", attn_implementation="eager")
    tok = minbert.Tokenizer.from_pretrained("minilm")
    batch = tok(["A surprisingly good movie.", "A cat sat."], ["I loved it.", "Dogs bark."])  # (2, T), padded
    with torch.no_grad():
        out = model(batch.input_ids, batch.attention_mask, batch.token_type_ids, output_hidden_states=True)
    hidden = {f"hidden_{i}": h for i, h in enumerate(out.hidden_states)}
    return dict(hidden, input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                token_type_ids=batch.token_type_ids, pooler=out.pooler_output)


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


def main() -> int:
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
    _save("classifier_head", classifier_head_fixture(g))
    return 0


if __name__ == "__main__":
    sys.exit(main())
