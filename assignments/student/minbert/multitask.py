"""Multitask BERT: one shared encoder, three heads (sentiment, paraphrase, similarity), and task schedules.

The two designs of the CS224N report "Less is More: Exploring BERT and Beyond for Multitask Learning"
(Qian & Yang), sec. 4.1, for the sentence-pair tasks:

    bi-encoder     u = pool(BERT(s1)), v = pool(BERT(s2)),  head([u, v, |u - v|])     (Sentence-BERT)
    cross-encoder  w = pool(BERT([CLS] s1 [SEP] s2 [SEP], segments 0...0 1...1)),  head(w)

Sentiment is always head(pool(BERT(s))). Each head is the report's MLP: dropout, Linear(in, 512), GELU,
Linear(512, out). Both designs take the same inputs, each sentence tokenised alone (the starter code's
input_ids_1, attention_mask_1, input_ids_2, attention_mask_2); the cross-encoder joins them itself
(join_pairs), so one data pipeline serves both.

The schedules (sec. 4.2 of the report; Stickland & Murray, 2019, sec. 4 for `annealed`) decide which
task each training batch comes from; see TaskSchedule.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .model import BertModel

DESIGNS = ("bi-encoder", "cross-encoder")
POOLINGS = ("mean", "cls", "pooler")
TASK_NAMES = ("sst", "para", "sts")


@dataclass
class MultitaskConfig:
    """The multitask model's settings; the encoder's own sizes stay in its BertConfig."""

    design: str = "cross-encoder"       # "bi-encoder" (design 1) or "cross-encoder" (design 2)
    pooling: str = "mean"               # sentence vector: "mean" of real tokens, "cls" state, or "pooler" output
    head_hidden: int = 512              # the hidden width of each task head's MLP
    dropout: float | None = None        # dropout before each head (None: the encoder's hidden dropout)
    num_sentiment_classes: int = 5

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
        return self.fc2(F.gelu(self.fc1(self.dropout(x))))  # (B, d_in) -> (B, d_out)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooler_output: torch.Tensor, how: str) -> torch.Tensor:
    """A sentence vector (B, H) from the final hidden states (B, T, H): mean of real tokens, [CLS], or the pooler."""
    if how == "mean":
        keep = attention_mask[..., None].to(hidden.dtype)                # (B, T, 1)
        return (hidden * keep).sum(1) / keep.sum(1).clamp(min=1.0)       # (B, H)
    if how == "cls":
        return hidden[:, 0]                                              # (B, H)
    return pooler_output


def join_pairs(
    input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor, input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor,
    max_length: int = 512,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two separately tokenised batches ([CLS] a [SEP], [CLS] b [SEP]) -> one [CLS] a [SEP] b [SEP] batch.

    Returns input_ids, attention_mask and token_type_ids (0 for [CLS] a [SEP], 1 for b [SEP]), each (B, T),
    right-padded with 0, the same as tokenising the pairs together. Pairs longer than max_length lose the end
    of b (its last [SEP] is kept).
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


def sentiment_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the sentiment logits (B, C) against class labels (B,)."""
    # YOUR CODE HERE
    # Cross-entropy, a scalar: the mean over the batch of -log softmax(logits_b)[labels_b].
    #   logits (B, C) are raw scores (no softmax of your own before the loss); labels (B,) are class
    #   indices, to be used as integers (labels.long()). F.cross_entropy computes exactly this.
    raise NotImplementedError


def paraphrase_loss(logit: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the paraphrase logit (B,) against 0/1 labels (B,)."""
    # YOUR CODE HERE
    # Binary cross-entropy on one logit z per pair, a scalar: with y the 0/1 label,
    #   mean over the batch of -[y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))]      z, y: (B,)
    #   The labels may arrive as integers (torch.long): convert them to the logit's dtype first.
    #   F.binary_cross_entropy_with_logits computes this stably (it applies the sigmoid itself).
    raise NotImplementedError


def similarity_loss(score: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean-squared error of the predicted similarity (B,) against the 0-5 gold scores (B,)."""
    # YOUR CODE HERE
    # Mean-squared error, a scalar: the mean over the batch of (score - gold)^2, score and gold (B,),
    #   both on the 0-5 scale; convert gold to score's dtype (gold.to(score.dtype)). F.mse_loss does it.
    raise NotImplementedError


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
        # The task whose batch runs now; task-specific extensions (PALs) read it.
        self.active_task: str | None = None

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               token_type_ids: torch.Tensor | None = None, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """The sentence vector of each input, (B, H); `embeddings` (from bert.embed) replaces the embedding step."""
        out = self.bert(input_ids, attention_mask, token_type_ids, embeddings=embeddings)
        return pool(out.last_hidden_state, attention_mask, out.pooler_output, self.config.pooling)

    def pair_features(self, input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor,
                      input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor) -> torch.Tensor:
        """The input of a pair head: [u, v, |u - v|] (B, 3H) for the bi-encoder, the joint vector (B, H) otherwise."""
        # YOUR CODE HERE
        # The pair heads' input, from two separately tokenised batches, (B, T1) and (B, T2) each.
        # bi-encoder (self.config.design == "bi-encoder"; Sentence-BERT): encode each sentence alone,
        #   u = self.encode(input_ids_1, attention_mask_1)                 (B, H)
        #   v = self.encode(input_ids_2, attention_mask_2)                 (B, H)
        #   return the concatenation [u, v, |u - v|] along the last dimension, in that order, (B, 3H)
        # cross-encoder: one sequence [CLS] a [SEP] b [SEP] per pair, the sentences in segments 0 and 1,
        #   ids, mask, types = join_pairs(the four tensors, self.bert.config.max_position_embeddings)  (B, T) each
        #   return its sentence vector self.encode(ids, mask, types), (B, H); the segment ids (types)
        #   tell BERT which sentence each token comes from.
        raise NotImplementedError

    def predict_sentiment(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Sentiment logits (B, 5) for single sentences."""
        # YOUR CODE HERE
        # The sentence vector self.encode(input_ids, attention_mask), (B, H), pooled as self.config.pooling
        # says, through the sentiment head self.head["sst"]: logits (B, 5), returned as they are.
        raise NotImplementedError

    def predict_paraphrase(self, input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor,
                           input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor) -> torch.Tensor:
        """One paraphrase logit per pair, (B,); sigmoid > 0.5 means "paraphrase"."""
        # YOUR CODE HERE
        # The pair features self.pair_features(...) of the four inputs, (B, 3H) or (B, H) by design, through
        # the paraphrase head self.head["para"], (B, 1), with the last dimension squeezed away: (B,).
        # Return the logit itself, no sigmoid: the loss and the predictions apply it.
        raise NotImplementedError

    def predict_similarity(self, input_ids_1: torch.Tensor, attention_mask_1: torch.Tensor,
                           input_ids_2: torch.Tensor, attention_mask_2: torch.Tensor) -> torch.Tensor:
        """One similarity score per pair on the 0-5 scale of the gold labels, (B,)."""
        # YOUR CODE HERE
        # The pair features self.pair_features(...), through the similarity head self.head["sts"], (B, 1),
        # with the last dimension squeezed away: (B,). The head's output is the score itself, on the
        # gold labels' 0-5 scale: no sigmoid and no rescaling.
        raise NotImplementedError

    def predict(self, task: str, batch: dict) -> torch.Tensor:
        """The task's output for a collated batch: sentiment logits (B, C), or one value per pair (B,)."""
        self.active_task = task
        if task == "sst":
            return self.predict_sentiment(batch["input_ids"], batch["attention_mask"])
        pair = (batch["input_ids_1"], batch["attention_mask_1"], batch["input_ids_2"], batch["attention_mask_2"])
        return self.predict_paraphrase(*pair) if task == "para" else self.predict_similarity(*pair)

    def loss(self, task: str, batch: dict) -> torch.Tensor:
        """The task's loss on a labelled batch: cross-entropy, binary cross-entropy or mean-squared error."""
        return TASK_LOSSES[task](self.predict(task, batch), batch["labels"])


TASK_LOSSES = {"sst": sentiment_loss, "para": paraphrase_loss, "sts": similarity_loss}


# Task schedules. Each gives the order of one epoch's training batches as (task, j): the j-th batch of that
# task's stream for the epoch. A task's stream is its shuffled batches, and, should a schedule ask for more
# batches than the task has, further passes over it, each shuffled anew (the caller builds them; see
# tasks.multitask). The order depends on (seed, epoch) alone, so a run resumed at an epoch boundary goes on
# exactly as an uninterrupted run would.

def annealed_alpha(epoch: int, epochs: int) -> float:
    """Stickland & Murray (2019, sec. 4): alpha = 1 - 0.8 (e - 1) / (E - 1) at epoch e = 1..E (1 when E = 1)."""
    return 1.0 if epochs <= 1 else 1.0 - 0.8 * (epoch - 1) / (epochs - 1)


def task_probabilities(sizes: dict[str, int], alpha: float = 1.0) -> dict[str, float]:
    """p_i proportional to N_i ** alpha over the tasks' training-set sizes N_i."""
    weights = {t: n ** alpha for t, n in sizes.items()}
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items()}


@dataclass
class TaskSchedule:
    """Which task each batch of an epoch comes from.

    sequential     every batch of the first task, then of the second, ...; an epoch is one pass over every task.
    round-robin    one batch of each task in turn (the report's sec. 4.2). when_exhausted="drop" (default): a
                   task whose batches have run out leaves the rotation and the others go on, so an epoch is
                   still one pass over every task, each example seen once; "cycle": smaller tasks start
                   another pass until the largest has been seen once, so an epoch is max_i(n_i) batches
                   of each task (the small tasks are oversampled).
    proportional   each batch's task drawn with probability n_i / sum n over the tasks' sizes (in batches);
                   an epoch is sum n batches, the tasks' streams cycling if drawn more often than they have batches.
    annealed       as proportional, with probabilities proportional to n_i ** alpha, alpha falling from 1 at the
                   first epoch to 0.2 at the last (Stickland & Murray, 2019, sec. 4): the tasks are drawn more
                   evenly as training goes on. An epoch is sum n batches.
    """

    name: str
    when_exhausted: str = "drop"

    def __post_init__(self) -> None:
        if self.name not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, not {self.name!r}")
        if self.when_exhausted not in ("drop", "cycle"):
            raise ValueError(f"when_exhausted must be 'drop' or 'cycle', not {self.when_exhausted!r}")

    def probabilities(self, num_batches: dict[str, int], epoch: int, epochs: int) -> dict[str, float] | None:
        """The task-drawing probabilities at epoch (0-based) of epochs; None for the deterministic schedules."""
        if self.name == "proportional":
            return task_probabilities(num_batches)
        if self.name == "annealed":
            return task_probabilities(num_batches, annealed_alpha(epoch + 1, epochs))
        return None

    def order(self, num_batches: dict[str, int], epoch: int, epochs: int, seed: int) -> list[tuple[str, int]]:
        """The epoch's batches as (task, index into that task's stream), for tasks with num_batches[t] batches."""
        tasks = [t for t, n in num_batches.items() if n > 0]
        if self.name == "sequential":
            return [(t, j) for t in tasks for j in range(num_batches[t])]
        if self.name == "round-robin":
            rounds = max(num_batches[t] for t in tasks)
            return [(t, j) for j in range(rounds) for t in tasks
                    if self.when_exhausted == "cycle" or j < num_batches[t]]
        probs = self.probabilities({t: num_batches[t] for t in tasks}, epoch, epochs)
        rng = random.Random(seed * 1_000_003 + epoch)
        drawn = rng.choices(tasks, weights=[probs[t] for t in tasks], k=sum(num_batches[t] for t in tasks))
        seen = dict.fromkeys(tasks, 0)
        out = []
        for t in drawn:
            out.append((t, seen[t]))
            seen[t] += 1
        return out


SCHEDULES = ("sequential", "round-robin", "proportional", "annealed")


def passes_needed(order: list[tuple[str, int]], num_batches: dict[str, int]) -> dict[str, int]:
    """How many shuffled passes over each task an epoch's order reaches into."""
    need = dict.fromkeys(num_batches, 0)
    for t, j in order:
        need[t] = max(need[t], j // num_batches[t] + 1)
    return need


def num_batches_of(sizes: dict[str, int], batch_size: int) -> dict[str, int]:
    """ceil(N_i / batch_size) batches for each task of N_i examples."""
    return {t: math.ceil(n / batch_size) for t, n in sizes.items()}
