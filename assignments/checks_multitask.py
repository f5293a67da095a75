"""Part 2's checks: the multitask model's heads in both designs and its three losses (minbert/multitask.py).

BERT is replaced by common.StandInBert, so that these parts depend on minbert/multitask.py alone: a mistake
in part 1 does not cost part 2. The expected values come from assignments/fixtures/multitask*.safetensors.
"""

from __future__ import annotations

import torch

from .common import SEED, Fail, Part, StandInBert, _state, _tiny_config, compare, load_fixture

FILE = "minbert/multitask.py"
KEY = {"bi-encoder": "bi", "cross-encoder": "cross"}   # the designs' short names in the fixtures' keys
HEAD_HIDDEN, DROPOUT = 16, 0.2


def multitask_model(design: str, pooling: str = "mean") -> torch.nn.Module:
    """The model the checks run: MultitaskBert on a one-layer stand-in encoder (H = 32), heads of width 16."""
    from minbert.multitask import MultitaskBert, MultitaskConfig
    return MultitaskBert(StandInBert(_tiny_config(), num_layers=1),
                         MultitaskConfig(design=design, pooling=pooling, head_hidden=HEAD_HIDDEN, dropout=DROPOUT))


def _loaded(f: dict[str, torch.Tensor], design: str, pooling: str = "mean") -> torch.nn.Module:
    model = multitask_model(design, pooling)
    model.load_state_dict(_state(f, f"param.{KEY[design]}."))
    return model.eval()


def _pair(f: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return f["input_ids_1"], f["attention_mask_1"], f["input_ids_2"], f["attention_mask_2"]


def _other_pooling(pooling: str, f: dict[str, torch.Tensor], key: str) -> dict[str, torch.Tensor]:
    other = "cls" if pooling == "mean" else "mean"
    return {f'the sentence vectors are pooled with "{other}" although self.config.pooling is "{pooling}" '
            "(self.encode pools as the config says)": f[key.replace(pooling, other)]}


def check_sentiment() -> None:
    f = load_fixture("multitask")
    what = f"MultitaskBert.predict_sentiment in {FILE}"
    for pooling in ("mean", "cls"):
        model = _loaded(f, "cross-encoder", pooling)
        hints = {"the pooler output is used instead of self.encode's sentence vector": f["sst_hint_pooler"],
                 "padding tokens are counted in the mean": f["sst_hint_mean_padding"],
                 **_other_pooling(pooling, f, f"sst_{pooling}")}
        with torch.no_grad():
            compare(f'{what} with pooling="{pooling}" (eval mode)',
                    model.predict_sentiment(f["input_ids_1"], f["attention_mask_1"]), f[f"sst_{pooling}"],
                    hints=hints, shape_hint='The sentiment logits are self.head["sst"] of the sentence vector, (B, 5)')
            model.train()
            torch.manual_seed(SEED)
            compare(f'{what} with pooling="{pooling}" in training mode (after torch.manual_seed({SEED}))',
                    model.predict_sentiment(f["input_ids_1"], f["attention_mask_1"]), f[f"sst_{pooling}_train"],
                    hint='The head self.head["sst"] applies its own dropout: add none, and call it once')


def check_bi_encoder() -> None:
    f = load_fixture("multitask")
    for pooling in ("mean", "cls"):
        model = _loaded(f, "bi-encoder", pooling)
        key = f"bi_{pooling}"
        hints = {"the features are [u, v, u - v], without the absolute value": f[f"{key}_no_abs"],
                 "the features are [v, u, |u - v|]: u (the first sentence) comes first": f[f"{key}_swapped"],
                 "the features are [|u - v|, u, v]: the order is [u, v, |u - v|]": f[f"{key}_diff_first"],
                 "the features are [u, |u - v|, v]: the order is [u, v, |u - v|]": f[f"{key}_diff_middle"],
                 "the features are [u, v, u * v]: the third block is |u - v|": f[f"{key}_product"],
                 **_other_pooling(pooling, f, key)}
        with torch.no_grad():
            compare(f'MultitaskBert.pair_features in {FILE} with design="bi-encoder", pooling="{pooling}"',
                    model.pair_features(*_pair(f)), f[key], hints=hints,
                    shape_hint="The bi-encoder's features are [u, v, |u - v|] along the last dimension, (B, 3H)")


def check_cross_encoder() -> None:
    f = load_fixture("multitask")
    for pooling in ("mean", "cls"):
        model = _loaded(f, "cross-encoder", pooling)
        key = f"cross_{pooling}"
        hints = {"the segment ids (the types join_pairs returns) are not passed to self.encode": f[f"{key}_no_types"],
                 "the two batches are concatenated as they are (padding in the middle) instead of by join_pairs":
                 f[f"{key}_concat"], **_other_pooling(pooling, f, key)}
        with torch.no_grad():
            compare(f'MultitaskBert.pair_features in {FILE} with design="cross-encoder", pooling="{pooling}"',
                    model.pair_features(*_pair(f)), f[key], hints=hints,
                    shape_hint="The cross-encoder's feature is the sentence vector of the joined pair, (B, H)")


def check_pair_heads() -> None:
    f = load_fixture("multitask")
    for design, short in KEY.items():
        model = _loaded(f, design)
        features = f[f"{short}_mean"]
        # pair_features stands in as the reference's, so that this part depends on the two functions alone
        model.pair_features = lambda *inputs, features=features: features.clone()
        for task, name in (("para", "predict_paraphrase"), ("sts", "predict_similarity")):
            expected = f[f"{task}_{short}"]
            other = "self.head['sts'], the similarity head," if task == "para" else "self.head['para'], the paraphrase head,"
            hints = {f"{other} is used": f[f"{task}_{short}_other_head"],
                     "a sigmoid is applied: return the head's output as it is": torch.sigmoid(expected)}
            if task == "sts":
                hints["the score is squashed to 0-5 with 5 * sigmoid: return the head's output as it is"] = \
                    5 * torch.sigmoid(expected)
            what = f'MultitaskBert.{name} in {FILE} with design="{design}"'
            with torch.no_grad():
                model.eval()
                compare(f"{what} (eval mode)", getattr(model, name)(*_pair(f)), expected, hints=hints,
                        shape_hint="Squeeze the head's (B, 1) output to one value per pair, (B,)")
                model.train()
                torch.manual_seed(SEED)
                compare(f"{what} in training mode (after torch.manual_seed({SEED}))", getattr(model, name)(*_pair(f)),
                        f[f"{task}_{short}_train"], hint="The head applies its own dropout: add none, and call it once")


def _differentiable(what: str, loss: object) -> None:
    if isinstance(loss, torch.Tensor) and not loss.requires_grad:
        raise Fail(f"{what} gives the right value but no gradient flows back from it: compute it with torch "
                   "operations on the inputs (no .item(), numpy or torch.tensor(...) of a number)")


def check_sst_loss() -> None:
    from minbert.multitask import sentiment_loss
    f = load_fixture("multitask_losses")
    what = f"sentiment_loss() in {FILE}"
    logits = f["sst_logits"].clone().requires_grad_()
    loss = sentiment_loss(logits, f["sst_labels"])
    compare(f"{what} (logits (4, 5), labels (4,) of dtype long)", loss, f["sst_loss"], hints={
        "a softmax is applied before F.cross_entropy, which takes raw logits (it applies log_softmax itself)":
        f["sst_loss_softmax"],
        "the loss is summed over the batch instead of averaged": f["sst_loss_sum"],
        "F.nll_loss is used on the raw logits, without log_softmax": f["sst_loss_nll"]},
        shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
    _differentiable(what, loss)


def check_para_loss() -> None:
    from minbert.multitask import paraphrase_loss
    f = load_fixture("multitask_losses")
    what = f"paraphrase_loss() in {FILE}"
    hints = {"softmax cross-entropy is used on the single logit: a softmax over one value is always 1, so the "
             "loss is 0; use binary cross-entropy of sigmoid(logit)": torch.tensor(0.0),
             "the loss is summed over the batch instead of averaged": f["para_loss_sum"],
             "a sigmoid is applied before F.binary_cross_entropy_with_logits, which applies it itself":
             f["para_loss_double_sigmoid"],
             "the squared error of sigmoid(logit) is used instead of binary cross-entropy": f["para_loss_mse"]}
    for dtype in (torch.float32, torch.long):
        logit = f["para_logit"].clone().requires_grad_()
        labels = f["para_labels"].to(dtype)
        try:
            loss = paraphrase_loss(logit, labels)
        except (RuntimeError, IndexError, ValueError) as e:
            if isinstance(e, RuntimeError) and dtype == torch.long:
                e.add_note("(with labels of dtype long) The labels may arrive as integers, as tasks/data.py's "
                           "Collator makes them: convert them with labels.to(logit.dtype) first")
            else:
                e.add_note("(logit (4,), labels (4,)) There is one logit per pair, not one per class: softmax "
                           "cross-entropy does not apply; use binary cross-entropy of sigmoid(logit)")
            raise
        compare(f"{what} (logit (4,), 0/1 labels (4,) of dtype {str(dtype).replace('torch.', '')})", loss,
                f["para_loss"], hints=hints, shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
        _differentiable(what, loss)


def check_sts_loss() -> None:
    from minbert.multitask import similarity_loss
    f = load_fixture("multitask_losses")
    what = f"similarity_loss() in {FILE}"
    score = f["sts_score"].clone().requires_grad_()
    loss = similarity_loss(score, f["sts_gold"])
    compare(f"{what} (score (4,), 0-5 gold scores (4,))", loss, f["sts_loss"], hints={
        "the absolute error (L1) is used instead of the squared error": f["sts_loss_l1"],
        "the loss is summed over the batch instead of averaged": f["sts_loss_sum"],
        "the root of the mean-squared error is taken": f["sts_loss_rmse"],
        "the gold scores are divided by 5: both are on the 0-5 scale": f["sts_loss_gold_scaled"],
        "smooth L1 (Huber) is used instead of the squared error": f["sts_loss_huber"]},
        shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
    _differentiable(what, loss)


MULTITASK_PARTS = [Part(*p, files=(FILE,), group="multitask") for p in [
    ("mt_sentiment", 15, f"MultitaskBert.predict_sentiment in {FILE}", check_sentiment),
    ("mt_bi_encoder", 20, f'MultitaskBert.pair_features in {FILE}, design="bi-encoder"', check_bi_encoder),
    ("mt_cross_encoder", 20, f'MultitaskBert.pair_features in {FILE}, design="cross-encoder"', check_cross_encoder),
    ("mt_pair_heads", 15, f"MultitaskBert.predict_paraphrase and predict_similarity in {FILE}", check_pair_heads),
    ("mt_sst_loss", 10, f"sentiment_loss() in {FILE}", check_sst_loss),
    ("mt_para_loss", 10, f"paraphrase_loss() in {FILE}", check_para_loss),
    ("mt_sts_loss", 10, f"similarity_loss() in {FILE}", check_sts_loss),
]]
