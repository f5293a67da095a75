"""Part 2's checks: the multitask model's heads in both designs and its three losses (minbert/multitask.py).

BERT is replaced by common.StandInBert, so that these parts depend on minbert/multitask.py alone: a mistake
in part 1 does not cost part 2. Within part 2 each part runs its own code: the sentence vector (features on
one pass), the bi-encoder (its passes and features on two passes), the cross-encoder (its joined pass,
compared as tokens), and the heads (predict_from_embeddings, with features standing in as fixed values, on the
batch and on a batch of one pair). The sentence vector and the bi-encoder run through part 1's pool(): each first
checks pool() on the same encoder outputs, so that a wrong pool() is named as such rather than blamed on features.
The expected values come from assignments/fixtures/multitask*.safetensors.
"""

from __future__ import annotations

import torch

from .common import SEED, Fail, Part, StandInBert, _state, _tiny_config, add_hint, compare, differentiable, load_fixture

FILE = "minbert/multitask.py"
KEY = {"bi-encoder": "bi", "cross-encoder": "cross"}   # the designs' short names in the fixtures' keys
HEAD_HIDDEN, DROPOUT = 16, 0.2
POOL_FIRST = ("MultitaskBert.features is judged once pool() gives the expected sentence vectors: fix pool() "
              "first, check it with  python -m assignments.check classifier_head,  and run this again")
ONE_PAIR = "squeeze(-1), not squeeze(): a batch of one must stay (1,)"   # .squeeze() drops B = 1 as well


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


def _passes(value: object, what: str, n: int) -> list:
    """value as a list of n EncoderInputs, or Fail saying what it is instead."""
    from minbert.multitask import EncoderInput
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, EncoderInput) for x in value):
        raise Fail(f"{what} returned {type(value).__name__}, expected a list of EncoderInput (the encoder passes: "
                   "EncoderInput(input_ids, attention_mask, token_type_ids))")
    if len(value) != n:
        raise Fail(f"{what} returned {len(value)} encoder passes, expected {n}"
                   + (": the bi-encoder encodes each sentence alone, one pass each" if n == 2 else
                      ": the cross-encoder encodes the joined pair in one pass"))
    return list(value)


def _pool_first(model: torch.nn.Module, x: object, h0: torch.Tensor | None, expected: torch.Tensor,
                label: str) -> None:
    """Part 1's pool() (which features runs through, by self.encode) on the stand-in encoder's output of pass x,
    compared with that pass's expected sentence vector: a wrong pool() is named as such, not blamed on features."""
    from minbert.pooling import pool
    how = model.config.pooling
    with torch.no_grad():
        out = model.bert(x.input_ids, x.attention_mask, x.token_type_ids, embeddings=h0)
        compare(f"pool() in minbert/pooling.py (see classifier_head), which this part runs through, on the "
                f'encoder\'s output for {label}, how="{how}"',
                pool(out.last_hidden_state, x.attention_mask, out.pooler_output, how), expected,
                hints={"padding tokens are counted in the mean": out.last_hidden_state.mean(1)} if how == "mean" else
                None, hint=POOL_FIRST, shape_hint=POOL_FIRST)


def check_sentence() -> None:
    from minbert.multitask import EncoderInput
    f = load_fixture("multitask")
    what = f"MultitaskBert.features in {FILE} on one encoder pass"
    cases = (("a sentence (token_type_ids None)", "sentence", EncoderInput(f["input_ids_1"], f["attention_mask_1"])),
             ("a joined pair (with segment ids)", "joined",
              EncoderInput(f["joined_ids"], f["joined_mask"], f["joined_types"])))
    for pooling in ("mean", "cls"):
        model = _loaded(f, "cross-encoder", pooling)
        for label, name, x in cases:
            key = f"{name}_{pooling}"
            hints = {"the embeddings argument is not used (the tokens are embedded again, so SMART's perturbation "
                     "of h0 would be lost): pass each pass's h0 to self.encode": f[f"{key}_no_h0"],
                     "the pooler output is used instead of self.encode's sentence vector": f[f"{key}_pooler"],
                     "padding tokens are counted in the mean": f[f"{key}_mean_padding"],
                     **_other_pooling(pooling, f, key)}
            _pool_first(model, x, f[f"{name}_h0"], f[key], f"{label} with a perturbed h0")
            with torch.no_grad():
                compare(f'{what}, {label}, with a perturbed h0 and pooling="{pooling}"',
                        model.features([x], [f[f"{name}_h0"]]), f[key], hints=hints,
                        shape_hint="One pass gives its sentence vector self.encode(...), (B, H)")


def check_bi_encoder() -> None:
    from minbert.multitask import EncoderInput
    f = load_fixture("multitask")
    ids1, mask1, ids2, mask2 = _pair(f)
    model = _loaded(f, "bi-encoder")
    what = f'MultitaskBert.pair_inputs in {FILE} with design="bi-encoder"'
    passes = _passes(model.pair_inputs(ids1, mask1, ids2, mask2), what, 2)
    for i, (x, ids, mask, other) in enumerate(((passes[0], ids1, mask1, ids2), (passes[1], ids2, mask2, ids1))):
        compare(f"{what}: the input_ids of pass {i + 1}", x.input_ids, ids,
                hints={"the two sentences are swapped: the first pass is sentence 1": other},
                shape_hint=lambda got, i=i, other=other: f"Pass {i + 1} is sentence {i + 1} alone, as given" + (
                    " (the sentences are swapped?)" if tuple(got.shape) == tuple(other.shape) else ""))
        compare(f"{what}: the attention_mask of pass {i + 1}", x.attention_mask, mask,
                hint=f"Pass {i + 1} is EncoderInput(input_ids_{i + 1}, attention_mask_{i + 1})")
        if x.token_type_ids is not None and bool(x.token_type_ids.any()):
            raise Fail(f"{what}: pass {i + 1} has segment ids other than 0: a sentence alone is all segment 0 "
                       "(leave token_type_ids None)")
    two = [EncoderInput(ids1, mask1), EncoderInput(ids2, mask2)]
    for pooling in ("mean", "cls"):
        model = _loaded(f, "bi-encoder", pooling)
        key = f"bi_{pooling}"
        hints = {"the features are [u, v, u - v], without the absolute value": f[f"{key}_no_abs"],
                 "the features are [v, u, |u - v|]: u (the first sentence) comes first": f[f"{key}_swapped"],
                 "the features are [|u - v|, u, v]: the order is [u, v, |u - v|]": f[f"{key}_diff_first"],
                 "the features are [u, |u - v|, v]: the order is [u, v, |u - v|]": f[f"{key}_diff_middle"],
                 "the features are [u, v, u * v]: the third block is |u - v|": f[f"{key}_product"],
                 **_other_pooling(pooling, f, key)}
        H = model.bert.config.hidden_size
        for i, x in enumerate(two):         # u and v, the first two blocks of [u, v, |u - v|]
            _pool_first(model, x, None, f[key][:, i * H:(i + 1) * H], f"sentence {i + 1} of the pair")
        with torch.no_grad():
            compare(f'MultitaskBert.features in {FILE} on two passes (the bi-encoder\'s sentences), '
                    f'pooling="{pooling}"', model.features(two, model.embed(two)), f[key], hints=hints,
                    shape_hint="Two passes give [u, v, |u - v|] along the last dimension, (B, 3H)")


def check_cross_encoder() -> None:
    f = load_fixture("multitask")
    model = _loaded(f, "cross-encoder")
    what = f'MultitaskBert.pair_inputs in {FILE} with design="cross-encoder"'
    T = model.bert.config.max_position_embeddings
    for label, prefix, pair in (("", "joined", _pair(f)),
                                (f" on pairs longer than max_position_embeddings = {T}", "long_joined",
                                 (f["long_ids_1"], f["long_mask_1"], f["long_ids_2"], f["long_mask_2"]))):
        x = _passes(model.pair_inputs(*pair), what + label, 1)[0]
        joined = f"{what}{label}: the joined pair's"
        shape = (f"Join the pair with join_pairs(..., self.bert.config.max_position_embeddings), which cuts it to "
                 f"at most {T} tokens" if prefix == "long_joined" else
                 "Join the pair with join_pairs: one sequence [CLS] a [SEP] b [SEP] per pair, without a's padding "
                 "and b's [CLS] in the middle (concatenating the two batches as they are is not it)")
        compare(f"{joined} input_ids", x.input_ids, f[f"{prefix}_ids"], shape_hint=shape)
        compare(f"{joined} attention_mask", x.attention_mask, f[f"{prefix}_mask"], shape_hint=shape)
        if x.token_type_ids is None:
            raise Fail(f"{joined} token_type_ids are None: keep the segment ids that join_pairs returns "
                       "(0 for [CLS] a [SEP], 1 for b [SEP]), so that BERT can tell the sentences apart")
        compare(f"{joined} token_type_ids", x.token_type_ids, f[f"{prefix}_types"], shape_hint=shape,
                hints={"the segment ids are all 0: keep the ones join_pairs returns": torch.zeros_like(x.token_type_ids)})


class _Features:
    """Stands in for MultitaskBert.features: fixed head inputs, and a record of what it was called with."""

    def __init__(self, features: torch.Tensor):
        self.features, self.calls = features, []

    def __call__(self, inputs: list, embeddings: list) -> torch.Tensor:
        self.calls.append((inputs, embeddings))
        return self.features.clone()


def check_heads() -> None:
    from minbert.multitask import EncoderInput
    f = load_fixture("multitask")
    ids1, mask1, ids2, mask2 = _pair(f)
    passes = {"sst": [EncoderInput(ids1, mask1)],
              "bi": [EncoderInput(ids1, mask1), EncoderInput(ids2, mask2)],
              "cross": [EncoderInput(f["joined_ids"], f["joined_mask"], f["joined_types"])]}
    for design, short in KEY.items():
        model = _loaded(f, design)
        for task in ("sst", "para", "sts"):
            if task == "sst" and design == "bi-encoder":
                continue                   # the same head in both designs: checked once
            key = f"head_{task}" if task == "sst" else f"head_{task}_{short}"
            inputs = passes["sst" if task == "sst" else short]
            embeddings = [torch.randn(*x.input_ids.shape, model.bert.config.hidden_size) for x in inputs]
            # features stands in as fixed values, so that this part depends on predict_from_embeddings alone
            stand_in = _Features(f[f"feat_{task}" if task == "sst" else f"feat_{short}"])
            model.features = stand_in
            expected = f[key]
            if task == "sst":
                hints = {"a softmax is applied: return the logits as they are": expected.softmax(-1),
                         "a log_softmax is applied: return the logits as they are": expected.log_softmax(-1)}
                shape = 'The sentiment logits are self.head["sst"] of the features, (B, 5), not squeezed'
            else:
                other = "self.head['sts'], the similarity head," if task == "para" else \
                    "self.head['para'], the paraphrase head,"
                hints = {f"{other} is used": f[f"{key}_other_head"],
                         "a sigmoid is applied: return the head's output as it is": torch.sigmoid(expected)}
                if task == "sts":
                    hints["the score is squashed to 0-5 with 5 * sigmoid: return the head's output as it is"] = \
                        5 * torch.sigmoid(expected)
                shape = "Squeeze the head's (B, 1) output to one value per pair, (B,)"
            what = f'MultitaskBert.predict_from_embeddings("{task}", ...) in {FILE} with design="{design}"'
            with torch.no_grad():
                model.eval()
                got = model.predict_from_embeddings(task, embeddings, inputs)
                if not stand_in.calls:
                    raise Fail(f"{what} does not call self.features(inputs, embeddings): the head's input is "
                               "the features of the given passes")
                given_inputs, given = stand_in.calls[-1]
                if len(given) != len(embeddings) or not all(a is b or torch.equal(a, b) for a, b in
                                                            zip(given, embeddings)):
                    raise Fail(f"{what} calls self.features with embeddings other than the ones it was given: "
                               "pass its `embeddings` argument on (SMART hands in perturbed ones)")
                if given_inputs is not inputs and list(given_inputs) != list(inputs):
                    raise Fail(f"{what} calls self.features with other passes than its `inputs` argument")
                compare(f"{what} (eval mode)", got, expected, hints=hints, shape_hint=shape)
                if task != "sst":      # a batch of one: its first pair alone, whose output is the batch's first value
                    model.features = _Features(stand_in.features[:1])
                    one = [EncoderInput(*(None if t is None else t[:1] for t in x)) for x in inputs]
                    compare(f"{what} on a batch of one pair (eval mode)",
                            model.predict_from_embeddings(task, [h[:1] for h in embeddings], one), expected[:1],
                            shape_hint=ONE_PAIR)
                    model.features = stand_in
                model.train()
                torch.manual_seed(SEED)
                compare(f"{what} in training mode (after torch.manual_seed({SEED}))",
                        model.predict_from_embeddings(task, embeddings, inputs), f[f"{key}_train"],
                        hint="The head applies its own dropout: add none, and call it once")


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
    differentiable(what, loss)


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
                add_hint(e, "(with labels of dtype long) The labels may arrive as integers, as "
                            "tasks/core/batching.py's collate makes class labels: convert them with "
                            "labels.to(logit.dtype) first")
            else:
                add_hint(e, "(logit (4,), labels (4,)) There is one logit per pair, not one per class: softmax "
                            "cross-entropy does not apply; use binary cross-entropy of sigmoid(logit)")
            raise
        compare(f"{what} (logit (4,), 0/1 labels (4,) of dtype {str(dtype).replace('torch.', '')})", loss,
                f["para_loss"], hints=hints, shape_hint="The loss is one number, the mean over the batch: a 0-d tensor")
        differentiable(what, loss)


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
    differentiable(what, loss)


MULTITASK_PARTS = [Part(*p[:4], files=(FILE,), group="multitask", fixtures=p[4]) for p in [
    ("mt_sentence", 15, f"MultitaskBert.features in {FILE}, one pass (the sentence vector)", check_sentence, ("multitask",)),
    ("mt_bi_encoder", 20, f'MultitaskBert.pair_inputs, design="bi-encoder", and features on two passes in {FILE}',
     check_bi_encoder, ("multitask",)),
    ("mt_cross_encoder", 15, f'MultitaskBert.pair_inputs in {FILE}, design="cross-encoder"', check_cross_encoder, ("multitask",)),
    ("mt_heads", 20, f"MultitaskBert.predict_from_embeddings in {FILE}", check_heads, ("multitask",)),
    ("mt_sst_loss", 10, f"sentiment_loss() in {FILE}", check_sst_loss, ("multitask_losses",)),
    ("mt_para_loss", 10, f"paraphrase_loss() in {FILE}", check_para_loss, ("multitask_losses",)),
    ("mt_sts_loss", 10, f"similarity_loss() in {FILE}", check_sts_loss, ("multitask_losses",)),
]]
