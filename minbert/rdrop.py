"""R-Drop (Liang et al., NeurIPS 2021, "R-Drop: Regularized Dropout for Neural Networks"): a batch goes through the
model twice, each pass with its own dropout masks; the loss is the two passes' task losses and alpha times the
symmetric KL divergence between their output distributions (sec. 2.1, eqs. 1-3).

Here the two task losses are averaged (eq. 3 sums them; the mean keeps a task's loss on its usual scale, so that
alpha = 0 is the plain loss and learning rates carry over). Which distribution each output is:
    classification  softmax over the classes of the logits (B, C)                      (eq. 2)
    binary          the Bernoulli distribution [1 - sigmoid(z), sigmoid(z)] of one logit z (B,)
    regression      no distribution: the squared difference of the two outputs (B,), batch mean, as the authors'
                    code does for regression (github.com/dropreg/R-Drop, fairseq_src/examples/roberta/
                    roberta_rdrop_src/loss/reg_cross_entropy.py, forward_kl, line 127: reg_alpha * mse_loss(logits,
                    var_logits); huggingface_transformer_src/src/transformers/models/bert/modeling_bert.py, line 1590)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .losses import two_class

KINDS = ("classification", "binary", "regression")


def rdrop_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """Sec. 2.1, eq. 2: 1/2 (KL(P || Q) + KL(Q || P)), P = softmax(p_logits) (B, C), summed over classes, batch mean
    (the authors' compute_kl_loss, with F.kl_div both ways; their sum over the batch is a mean here). Half of SMART's
    minbert.smart.symmetric_kl, which is the sum: named apart so that neither is taken for the other."""
    log_p = F.log_softmax(p_logits.float(), dim=-1)                                  # (B, C)
    log_q = F.log_softmax(q_logits.float(), dim=-1)                                  # (B, C)
    kl_pq = F.kl_div(log_q, log_p, reduction="batchmean", log_target=True)           # KL(P || Q)
    kl_qp = F.kl_div(log_p, log_q, reduction="batchmean", log_target=True)           # KL(Q || P)
    return 0.5 * (kl_pq + kl_qp)


def output_divergence(y_1: torch.Tensor, y_2: torch.Tensor, kind: str) -> torch.Tensor:
    """Sec. 2.1, eq. 2, per output kind: the symmetric KL of the two passes' distributions, or for regression their
    mean squared difference (the authors' code, reg_cross_entropy.py line 127)."""
    if kind == "classification":
        return rdrop_kl(y_1, y_2)
    if kind == "binary":
        return rdrop_kl(two_class(y_1), two_class(y_2))
    if kind == "regression":
        return (y_1.float() - y_2.float()).pow(2).mean()
    raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")


def rdrop_loss(loss_1: torch.Tensor, loss_2: torch.Tensor, y_1: torch.Tensor, y_2: torch.Tensor, kind: str,
               alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Sec. 2.1, eq. 3 (the two task losses averaged): (L_1 + L_2) / 2 + alpha D(y_1, y_2); and D."""
    divergence = output_divergence(y_1, y_2, kind)
    return (loss_1 + loss_2) / 2 + alpha * divergence, divergence
