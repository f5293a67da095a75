"""Multitask BERT: one shared encoder, three heads (sentiment, paraphrase, similarity).

The two designs of the CS224N report "Less is More: Exploring BERT and Beyond for Multitask Learning"
(Qian & Yang), sec. 4.1, for the sentence-pair tasks:

    bi-encoder     u = pool(BERT(s1)), v = pool(BERT(s2)),  head([u, v, |u - v|])     (Sentence-BERT)
    cross-encoder  w = pool(BERT([CLS] s1 [SEP] s2 [SEP], segments 0...0 1...1)),  head(w)

Sentiment is always head(pool(BERT(s))). Each head is the report's MLP: dropout, Linear(in, 512), GELU,
Linear(512, out). Both designs take the same inputs, each sentence tokenised alone (the starter code's
input_ids_1, attention_mask_1, input_ids_2, attention_mask_2); the cross-encoder joins them itself
(join_pairs), so one data pipeline serves both.

Which task each training batch comes from is data order, not the model: minbert.schedules.

Optional extensions the model composes: task-specific projected attention layers (add_pals, minbert.pals)
and SMART regularisation of every training loss (add_smart, minbert.smart). For SMART the task output is a
function of the encoder's input embeddings: predict() is inputs() -> embed() -> predict_from_embeddings().
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .model import BertModel
from .pals import PALs, PalsConfig
from .pooling import POOLINGS, pool
from .shapes import expect_batch, expect_shape
from .smart import Smart, SmartConfig

DESIGNS = ("bi-encoder", "cross-encoder")
TASK_NAMES = ("sst", "para", "sts")
SQUEEZE_HINT = "squeeze(-1), not squeeze(): a batch of one must stay (1,)"   # a pair head's (B, 1) -> (B,)


@dataclass
class MultitaskConfig:
    """The multitask model's settings; the encoder's own sizes stay in its BertConfig."""

    design: str = "cross-encoder"       # "bi-encoder" (design 1) or "cross-encoder" (design 2)
    pooling: str = "mean"               # sentence vector: "mean" of real tokens, "cls" state, or "pooler" output
    head_hidden: int = 512              # the hidden width of each task head's MLP
    dropout: float | None = None        # dropout before each head (None: the encoder's hidden dropout)
    num_sentiment_classes: int = 5
    similarity_bias: float = 0.0        # the STS head's initial output bias; 2.5 starts it mid-scale (see MultitaskBert)
    symmetric_pairs: bool = False       # in eval mode, a pair's output is the mean over (s1, s2) and (s2, s1)

    def __post_init__(self) -> None:
        if self.design not in DESIGNS:
            raise ValueError(f"design must be one of {DESIGNS}, not {self.design!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, not {self.pooling!r}")


class Head(nn.Module):
    """The report's task head (Qian & Yang, sec. 4.1): dropout, Linear(in, hidden), GELU, Linear(hidden, out)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.fc1, self.fc2 = nn.Linear(d_in, d_hidden), nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, d_in) -> fc2(GELU(fc1(dropout(x)))) (B, d_out)."""
        return self.fc2(F.gelu(self.fc1(self.dropout(x))))  # (B, d_in) -> (B, d_out)


def join_pairs(
    input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor, input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor,
    max_length: int = 512,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two separately tokenised batches ([CLS] a [SEP], [CLS] b [SEP]) -> one [CLS] a [SEP] b [SEP] batch.

    Returns input_ids, attention_mask and token_type_ids (0 for [CLS] a [SEP], 1 for b [SEP]), each (B, T),
    right-padded with 0, the same as tokenising the pairs together. Pairs longer than max_length lose the end
    of b (its last [SEP] is kept). When [CLS] a [SEP] alone reaches max_length, b is dropped whole: the row is [CLS],
    a's first max_length - 2 tokens and b's [SEP], all of token type 0 (no segment-1 token), where the tokenizer's
    longest-first truncation would cut a and keep some of b.
    """
    B = input_ids_1.shape[0]
    n1 = attention_mask_1.sum(1)                                  # (B,) tokens of [CLS] a [SEP]
    n2 = attention_mask_2.sum(1) - 1                              # (B,) tokens of b [SEP], without b's [CLS]
    total = (n1 + n2).clamp(max=max_length)                       # (B,)
    T = int(total.max())
    pos = torch.arange(T, device=input_ids_1.device)[None, :]    # (1, T)
    in_first = pos < n1[:, None]                                  # (B, T) positions taken by [CLS] a [SEP]
    real = pos < total[:, None]                                   # (B, T)
    i1 = pos.clamp(max=input_ids_1.shape[1] - 1).expand(B, T)
    i2 = (pos - n1[:, None] + 1).clamp(min=0, max=input_ids_2.shape[1] - 1)  # b's token j sits at n1 + j - 1
    ids = torch.where(in_first, input_ids_1.gather(1, i1), input_ids_2.gather(1, i2))
    if bool((n1 + n2 > max_length).any()):                        # truncated pairs end in b's [SEP] all the same
        last = (total - 1)[:, None]                                # (B, 1)
        sep = input_ids_2.gather(1, (attention_mask_2.sum(1) - 1)[:, None])  # (B, 1) b's final [SEP]
        ids = ids.scatter(1, last, torch.where((n1 + n2 > max_length)[:, None], sep, ids.gather(1, last)))
    mask = real.to(attention_mask_1.dtype)
    ids = ids * mask
    types = (~in_first & real).to(input_ids_1.dtype)
    return ids, mask, types


def swap_pairs(batch: dict) -> dict:
    """The batch with each pair's sentences in the other order: (s1, s2) becomes (s2, s1)."""
    out = dict(batch)
    out.pop("encoder_inputs", None)                                # made from the order before the swap
    for a, b in (("input_ids_1", "input_ids_2"), ("attention_mask_1", "attention_mask_2")):
        out[a], out[b] = batch[b], batch[a]
    return out


def sentiment_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the sentiment logits (B, C) against class labels (B,)."""
    ### BEGIN SOLUTION
    ### STUB: Cross-entropy, a scalar: the mean over the batch of -log softmax(logits_b)[labels_b].
    ### STUB:   logits (B, C) are raw scores (no softmax of your own before the loss); labels (B,) are class
    ### STUB:   indices, to be used as integers (labels.long()). F.cross_entropy computes exactly this.
    return F.cross_entropy(logits, labels.long())
    ### END SOLUTION


def paraphrase_loss(logit: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the paraphrase logit (B,) against 0/1 labels (B,)."""
    ### BEGIN SOLUTION
    ### STUB: Binary cross-entropy on one logit z per pair, a scalar: with y the 0/1 label,
    ### STUB:   mean over the batch of -[y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))]      z, y: (B,)
    ### STUB:   The labels may arrive as integers (torch.long): convert them to the logit's dtype first.
    ### STUB:   F.binary_cross_entropy_with_logits computes this stably (it applies the sigmoid itself).
    return F.binary_cross_entropy_with_logits(logit, labels.to(logit.dtype))
    ### END SOLUTION


def similarity_loss(score: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean-squared error of the predicted similarity (B,) against the 0-5 gold scores (B,)."""
    ### BEGIN SOLUTION
    ### STUB: Mean-squared error, a scalar: the mean over the batch of (score - gold)^2, score and gold (B,),
    ### STUB:   both on the 0-5 scale; convert gold to score's dtype (gold.to(score.dtype)). F.mse_loss does it.
    return F.mse_loss(score, gold.to(score.dtype))
    ### END SOLUTION


class EncoderInput(NamedTuple):
    """The token inputs of one encoder pass, each (B, T); token_type_ids None means all segment 0."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor | None = None


class MultitaskBert(nn.Module):
    """A shared BERT encoder with the sentiment, paraphrase and similarity heads of the CS224N default project."""

    def __init__(self, bert: BertModel, config: MultitaskConfig | None = None):
        super().__init__()
        self.bert, self.config = bert, config or MultitaskConfig()
        c, H = self.config, bert.config.hidden_size
        p = bert.config.hidden_dropout_prob if c.dropout is None else c.dropout
        pair_in = 3 * H if c.design == "bi-encoder" else H        # [u, v, |u - v|] or the joint vector
        self.head = nn.ModuleDict({
            "sst": Head(H, c.head_hidden, c.num_sentiment_classes, p),
            "para": Head(pair_in, c.head_hidden, 1, p),
            "sts": Head(pair_in, c.head_hidden, 1, p),
        })
        # A freshly initialised head outputs about 0 while STS gold scores average about 2.5: with a short budget the
        # first steps of mean-squared error go into the mean, not the similarity. similarity_bias=2.5 starts mid-scale.
        nn.init.constant_(self.head["sts"].fc2.bias, c.similarity_bias)
        self.pals: PALs | None = None       # add_pals()
        self.smart: Smart | None = None     # add_smart()

    def add_pals(self, config: PalsConfig) -> PALs:
        """Projected attention layers for every task (Stickland & Murray, 2019), set on the encoder's layers."""
        self.pals = PALs(self.bert.config, TASK_NAMES, config)
        self.pals.attach(self.bert)
        return self.pals

    def add_smart(self, config: SmartConfig) -> Smart:
        """SMART (Jiang et al., 2020) on every loss(); call it once the trainable parameters are chosen (requires_grad
        set): the Bregman momentum copy follows those."""
        self.smart = Smart(config, {n: p for n, p in self.named_parameters() if p.requires_grad})
        return self.smart

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None = None, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """The sentence vector of each input, (B, H); `embeddings` (from bert.embed) replaces the embedding step."""
        out = self.bert(input_ids, attention_mask, token_type_ids, embeddings=embeddings)
        B, _, H = out.last_hidden_state.shape
        return expect_shape(pool(out.last_hidden_state, attention_mask, out.pooler_output, self.config.pooling),
                            (B, H), "pool()", "(B, H)", "classifier_head", ": one vector per sentence")

    def pair_inputs(self, input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor,
                    input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor) -> list[EncoderInput]:
        """A pair's encoder passes: each sentence alone (bi-encoder), or the joined [CLS] s1 [SEP] s2 [SEP]."""
        ### BEGIN SOLUTION
        ### STUB: A list of the encoder passes a pair needs, each an EncoderInput(input_ids, attention_mask,
        ### STUB: token_type_ids=None); the two sentences come tokenised separately, (B, T1) and (B, T2).
        ### STUB: bi-encoder (self.config.design == "bi-encoder"; Sentence-BERT): each sentence alone, two passes in
        ### STUB:   order, sentence 1's ids and mask first, then sentence 2's; no segment ids.
        ### STUB: cross-encoder: one pass, the sequence [CLS] a [SEP] b [SEP] with a in segment 0 and b in segment 1:
        ### STUB:   join_pairs (given) takes the four tensors and max_length (self.bert.config.max_position_embeddings)
        ### STUB:   and gives the joined ids, mask and segment ids, (B, T) each; the one pass carries all three: the
        ### STUB:   segment ids tell BERT which sentence each token comes from, and max_length keeps a long pair
        ### STUB:   within the position table.
        if self.config.design == "bi-encoder":
            return [EncoderInput(input_ids_1, attention_mask_1), EncoderInput(input_ids_2, attention_mask_2)]
        return [EncoderInput(*join_pairs(input_ids_1, attention_mask_1, input_ids_2, attention_mask_2,
                                         self.bert.config.max_position_embeddings))]
        ### END SOLUTION

    def inputs(self, task: str, batch: dict) -> list[EncoderInput]:
        """The encoder passes a collated batch of `task` needs: one for a sentence or a joined pair, two otherwise;
        batch["encoder_inputs"] when the batch holds them (made by this method on the CPU before the batch moved to
        a GPU, so that the GPU never has to tell the host a joined pair's length)."""
        if "encoder_inputs" in batch:
            return batch["encoder_inputs"]                           # checked here when they were made
        for end in ("",) if task == "sst" else ("_1", "_2"):        # bert(...)'s check, once a batch: SMART embeds
            expect_batch(batch["input_ids" + end], None, ids_name="input_ids" + end,       # the tokens itself
                         **{"attention_mask" + end: batch["attention_mask" + end]})
        if task == "sst":
            return [EncoderInput(batch["input_ids"], batch["attention_mask"])]
        return self.pair_inputs(batch["input_ids_1"], batch["attention_mask_1"],
                                batch["input_ids_2"], batch["attention_mask_2"])

    def embed(self, inputs: list[EncoderInput]) -> list[torch.Tensor]:
        """The encoder input h0 of each pass, (B, T, H) (SMART perturbs these)."""
        return [self.bert.embed(x.input_ids, x.token_type_ids) for x in inputs]

    def features(self, inputs: list[EncoderInput], embeddings: list[torch.Tensor]) -> torch.Tensor:
        """A head's input from the passes' h0: the sentence or joint vector (B, H), or [u, v, |u - v|] (B, 3H)."""
        ### BEGIN SOLUTION
        ### STUB: inputs are the encoder passes (EncoderInput: input_ids, attention_mask, token_type_ids), and
        ### STUB: embeddings their encoder inputs h0, one (B, T, H) tensor per pass (SMART hands in perturbed ones).
        ### STUB: The sentence vector of each pass, (B, H): self.encode(x.input_ids, x.attention_mask,
        ### STUB:   x.token_type_ids, h), with h the pass's h0 from `embeddings` (do not embed the tokens again: a
        ### STUB:   perturbation of h0 must reach the encoder), pooled as self.config.pooling says.
        ### STUB: One pass (a sentence, or a cross-encoder's joined pair): return its vector, (B, H).
        ### STUB: Two passes (the bi-encoder's sentences, vectors u and v): return [u, v, |u - v|], concatenated
        ### STUB:   along the last dimension in that order, (B, 3H).
        vectors = [self.encode(x.input_ids, x.attention_mask, x.token_type_ids, h) for x, h in zip(inputs, embeddings)]
        if len(vectors) == 1:
            return vectors[0]
        u, v = vectors                                               # (B, H) each
        return torch.cat([u, v, (u - v).abs()], dim=-1)              # (B, 3H)
        ### END SOLUTION

    def predict_from_embeddings(self, task: str, embeddings: list[torch.Tensor],
                                inputs: list[EncoderInput]) -> torch.Tensor:
        """The task's output from the passes' h0 (possibly perturbed): logits (B, C), or one value per pair (B,)."""
        if self.pals is not None:
            self.pals.task = task                                    # the PALs of the batch's task run
        ### BEGIN SOLUTION
        ### STUB: The head's input self.features(inputs, embeddings) (pass the given embeddings on), through the
        ### STUB: task's head self.head[task] ("sst", "para" or "sts"). Return it as the head gives it: no softmax,
        ### STUB: no sigmoid, no rescaling (the losses and predictions apply those), the sentiment logits (B, 5)
        ### STUB: as they are, and for the pair tasks the (B, 1) output with the last dimension squeezed, (B,):
        ### STUB: the paraphrase logit, and the similarity score on the gold labels' 0-5 scale. Squeeze that
        ### STUB: dimension alone (squeeze(-1)): a batch of one pair must stay (1,), not become a 0-d tensor.
        out = self.head[task](self.features(inputs, embeddings))
        return out if task == "sst" else out.squeeze(-1)             # (B, 1) -> (B,) for the pair tasks
        ### END SOLUTION

    def head_output(self, task: str, embeddings: list[torch.Tensor], inputs: list[EncoderInput]) -> torch.Tensor:
        """predict_from_embeddings(task, embeddings, inputs), stopped in one line naming it when its output is not
        (B, C) for "sst" or (B,) for a pair task (a batch of one squeezed to 0-d, say), rather than in a loss."""
        B = inputs[0].input_ids.shape[0]
        shape, dims, hint = (((B, self.config.num_sentiment_classes), "(B, C)", ": the logits as the head gives them")
                             if task == "sst" else ((B,), "(B,)", f": {SQUEEZE_HINT}"))
        return expect_shape(self.predict_from_embeddings(task, embeddings, inputs), shape,
                            f'MultitaskBert.predict_from_embeddings("{task}", ...)', dims, "mt_heads", hint)

    def predict(self, task: str, batch: dict) -> torch.Tensor:
        """The task's output for a collated batch: sentiment logits (B, C), or one value per pair (B,); with
        config.symmetric_pairs, in eval mode, a pair's output is the mean over its two orders (swap_pairs)."""
        inputs = self.inputs(task, batch)
        y = self.head_output(task, self.embed(inputs), inputs)
        if task != "sst" and self.config.symmetric_pairs and not self.training:
            swapped = self.inputs(task, swap_pairs(batch))
            y = (y + self.head_output(task, self.embed(swapped), swapped)) / 2
        return y

    def forward(self, task: str, batch: dict) -> torch.Tensor:
        """Same as predict(task, batch)."""
        return self.predict(task, batch)

    def pair_features(self, input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor,
                      input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor) -> torch.Tensor:
        """The input of a pair head: [u, v, |u - v|] (B, 3H) for the bi-encoder, the joint vector (B, H) otherwise."""
        inputs = self.pair_inputs(input_ids_1, attention_mask_1, input_ids_2, attention_mask_2)
        return self.features(inputs, self.embed(inputs))

    def predict_sentiment(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Sentiment logits (B, 5) for single sentences."""
        return self.predict("sst", {"input_ids": input_ids, "attention_mask": attention_mask})

    def predict_paraphrase(self, input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor,
                           input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor) -> torch.Tensor:
        """One paraphrase logit per pair, (B,); sigmoid > 0.5 means "paraphrase"."""
        return self.predict("para", {"input_ids_1": input_ids_1, "attention_mask_1": attention_mask_1,
                                     "input_ids_2": input_ids_2, "attention_mask_2": attention_mask_2})

    def predict_similarity(self, input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor,
                           input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor) -> torch.Tensor:
        """One similarity score per pair on the 0-5 scale of the gold labels, (B,)."""
        return self.predict("sts", {"input_ids_1": input_ids_1, "attention_mask_1": attention_mask_1,
                                    "input_ids_2": input_ids_2, "attention_mask_2": attention_mask_2})

    def loss(self, task: str, batch: dict) -> torch.Tensor:
        """The task's loss on a labelled batch: cross-entropy, binary cross-entropy or mean-squared error;
        with SMART, in training mode, plus its regularisers (minbert.smart)."""
        inputs = self.inputs(task, batch)
        h = self.embed(inputs)
        y = self.head_output(task, h, inputs)
        loss = TASK_LOSSES[task](y, batch["labels"])
        if self.smart is not None and self.training:
            loss = self.smart(self, task, SMART_KINDS[task], batch, inputs, h, y, loss)
        return loss


TASK_LOSSES = {"sst": sentiment_loss, "para": paraphrase_loss, "sts": similarity_loss}
SMART_KINDS = {"sst": "classification", "para": "binary", "sts": "regression"}   # which l_s each output takes
