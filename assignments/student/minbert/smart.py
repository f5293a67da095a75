"""SMART (Jiang et al., 2020, "SMART: Robust and Efficient Fine-Tuning for Pre-trained Natural Language Models
through Principled Regularized Optimization", arXiv:1911.03437), sec. 3 and Algorithm 1, on the input embeddings.

Fine-tuning minimises F(theta) = L(theta) + lambda_s R_s(theta) (sec. 3.1), with the smoothness-inducing
adversarial regulariser

    R_s(theta) = 1/n sum_i  max_{||x~_i - x_i||_inf <= epsilon}  l_s(f(x~_i; theta), f(x_i; theta)),

l_s the symmetric KL divergence of the output distributions (classification) or the squared error
(regression), and takes Bregman proximal point steps with momentum (sec. 3.2): each step also minimises
mu D_Breg(theta, theta~), D_Breg(theta, theta~) = 1/n sum_i l_s(f(x_i; theta), f(x_i; theta~)), where theta~ is
a slowly moving copy of the parameters, theta~ <- (1 - beta) theta + beta theta~ after every step.

Per training batch, as Algorithm 1 (x: the encoder's input embeddings h0, f: the task output as a function of them):
  1. x~ = x + nu, nu ~ N(0, sigma^2 I)
  2. K times: g = grad_{x~} l_s(f(x~), f(x)) / ||grad||_inf;  x~ <- Proj_{||x~ - x||_inf <= eps}(x~ + eta g)
  3. loss = task loss + lambda_s l_s(f(x~), f(x)) + mu l_s(f(x; theta), f(x; theta~))
  4. after the optimiser step: theta~ <- (1 - beta) theta + beta theta~

The perturbation step comes in three presets (PRESETS, SmartConfig.preset). "paper" is step 2 read literally:
the gradient normalised by the infinity norm of each example's whole gradient (every token and hidden unit, and
for a bi-encoder pair both sentences), then projected onto the ball of radius epsilon (1e-5). At that radius R_s
is numerically nil (about 1e-10 on MiniLM with an SST batch, far below the 5e-4 two dropout passes differ by:
benchmarks/smart_noise.py). The public code does not project: namisan/mt-dnn (the authors' code,
mt_dnn/perturbation.py) and archinetai/vat-pytorch (SMARTLoss, the code the CS224N report names) both set the
new perturbation to s / (||s||_inf + epsilon), s = delta + eta g, the infinity norm taken over each token's
hidden vector: every token's perturbation has infinity norm ~1 (epsilon 1e-6 only guards the division). They
differ in eta (mt-dnn's train.py 1e-5, vat-pytorch 1e-3) and in the step's loss (mt-dnn: stable_kl, a log-odds
surrogate on detached targets, mt_dnn/loss.py; vat-pytorch: a one-sided KL; minbert takes the symmetric l_s in
every preset). mt-dnn's step loss is summed over the batch (reduce=False; reduction="sum" for
regression) where minbert's is a mean, so at one eta its eta g is B times minbert's (B the batch size): eta times B
takes its step literally. With eta g much smaller than the starting noise, the public step is mostly the noise's
direction rescaled.

R_s's target f(x) keeps its graph: R_s depends on theta through both f(x~) and f(x), as in the paper. The
public code's symmetric KL detaches the target distribution inside each direction (KL(sg P || Q) + KL(sg Q || P))
but still sends a gradient to both outputs; minbert differentiates the symmetric KL fully in every preset. Per
step K the perturbation costs a forward and a backward to the perturbation only (torch.autograd.grad: no
parameter gradient). With the passes' dropout on, f(x) is the task forward's own output (no extra pass); with it
off (`dropout=False`), the clean target is one more forward without dropout, and the perturbation and adversarial
passes run without dropout too.

The Bregman term compares f(x; theta) and f(x; theta~) on the same encoder pass (one pair order, whatever
symmetric_pairs says) with dropout off on both sides, so it is exactly 0 at theta~ = theta: f(x; theta) is the
dropout-free clean pass (shared with R_s when dropout is off, else one more forward with a graph), f(x; theta~)
a forward through torch.func.functional_call with theta~, without a graph. The mt-dnn code never released the
Bregman part.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .losses import two_class

KINDS = ("classification", "binary", "regression")

# The perturbation step's presets (--smart-perturbation): (step rule, eta, epsilon, sigma), the public code's defaults.
#   mt-dnn: namisan/mt-dnn, mt_dnn/perturbation.py with train.py's defaults (adv_step_size 1e-5, adv_epsilon 1e-6,
#           adv_noise_var 1e-5, adv_p_norm inf, adv_norm_level 0): delta <- s / (||s||_inf per token + eps),
#           s = delta + eta g
#   vat:    archinetai/vat-pytorch, vat_pytorch/smart.py SMARTLoss defaults (step_size 1e-3, epsilon 1e-6, noise_var
#           1e-5, norm_fn inf_norm over the last dimension): the same per-token rescale, a larger eta
#   paper:  Algorithm 1's step read literally: delta + eta g / ||g||_inf (per example), projected onto the epsilon ball
PRESETS = {"mt-dnn": ("rescale", 1e-5, 1e-6, 1e-5), "vat": ("rescale", 1e-3, 1e-6, 1e-5),
           "paper": ("project", 1e-3, 1e-5, 1e-5)}


@dataclass
class SmartConfig:
    """SMART's settings. The defaults are the paper's perturbation (adversarial regulariser R_s) settings (sec. 5:
    lambda_s in {1, 3, 5}) with the momentum term off: bregman=True (--smart-bregman) adds Algorithm 1's Bregman
    proximal point term (mu 1, beta 0.99). beta is held fixed: the paper's schedule (as reported, 0.99 for the first
    10% of updates, then 0.999) is not implemented."""

    lambda_s: float = 1.0       # weight of the smoothness-inducing regulariser R_s
    steps: int = 1              # K, ascent steps on the perturbation
    eta: float = 1e-3           # the perturbation's step size
    epsilon: float = 1e-5       # radius of the infinity-norm ball around x
    sigma: float = 1e-5         # standard deviation of the starting noise nu
    bregman: bool = False       # the Bregman proximal point term with momentum
    mu: float = 1.0             # its weight
    beta: float = 0.99          # its momentum: theta~ <- (1 - beta) theta + beta theta~
    dropout: bool = True        # False: the regulariser's clean, perturbation and adversarial passes run without dropout
    rule: str = "project"       # the step: "project" (Algorithm 1, ascent_step), "rescale" (public code, rescale_step)

    @classmethod
    def preset(cls, name: str, **overrides: object) -> SmartConfig:
        """The config of a named perturbation preset (PRESETS: mt-dnn, vat, paper), explicit settings overriding it."""
        if name not in PRESETS:
            raise ValueError(f"SMART perturbation preset must be one of {', '.join(PRESETS)}, not {name!r}")
        rule, eta, epsilon, sigma = PRESETS[name]
        settings = {"rule": rule, "eta": eta, "epsilon": epsilon, "sigma": sigma}
        settings.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**settings)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if self.rule not in ("project", "rescale"):
            raise ValueError(f"SMART rule must be 'project' or 'rescale', not {self.rule!r}")
        for name in CHECKS:
            self.check(name, getattr(self, name))

    @staticmethod
    def check(name: str, value: float) -> None:
        """Raise ValueError unless the number `name` may be `value` (CHECKS; the command's flags call it too)."""
        holds, what = CHECKS[name]
        if not holds(value):
            raise ValueError(f"SMART {name} must be {what}, not {value}")


# Each number's check, the one set (SmartConfig's and the command's flags'): field -> (whether a value holds, what
# it must be)
CHECKS: dict[str, tuple[Callable[[float], bool], str]] = {
    "lambda_s": (lambda v: v >= 0, ">= 0"), "sigma": (lambda v: v >= 0, ">= 0"), "mu": (lambda v: v >= 0, ">= 0"),
    "eta": (lambda v: v > 0, "> 0"), "epsilon": (lambda v: v > 0, "> 0"), "steps": (lambda v: v >= 0, ">= 0"),
    "beta": (lambda v: 0 <= v < 1, "in [0, 1)"),
}


# ------------------------------------------------------------------ l_s, the divergences (sec. 3.1)

def symmetric_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(P || Q) + KL(Q || P) = sum_c (P_c - Q_c)(log P_c - log Q_c), P = softmax(p_logits), batch mean.

    From log-softmax, in fp32: finite and exact for confident logits (a softmax of logits ~100 underflows).
    """
    # YOUR CODE HERE
    # The symmetric KL divergence of P = softmax(p_logits) and Q = softmax(q_logits), logits (B, C), over
    # the classes (the last dimension), then the mean over the batch: a scalar, in float32.
    #   KL(P || Q) + KL(Q || P) = sum_c (P_c - Q_c)(log P_c - log Q_c)      (both directions, not one)
    #   log P = F.log_softmax(p_logits.float(), dim=-1), P = exp(log P), the same for Q. Taking the softmax
    #   first and then its log fails at confident logits (~100): P underflows to 0, log 0 = -inf, 0 * -inf = nan.
    raise NotImplementedError


def squared_error(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(a - b)^2, batch mean: l_s for regression."""
    return (a.float() - b.float()).pow(2).mean()


def divergence(a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
    """l_s(a, b) for outputs of one kind: class logits (B, C), one binary logit (B,), or one real value (B,)."""
    if kind == "classification":
        return symmetric_kl(a, b)
    if kind == "binary":
        return symmetric_kl(two_class(a), two_class(b))
    if kind == "regression":
        return squared_error(a, b)
    raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")


# ------------------------------------------------------------------ R_s: the adversarial perturbation

def ascent_step(delta: list[torch.Tensor], grad: list[torch.Tensor], eta: float, epsilon: float) -> list[torch.Tensor]:
    """Algorithm 1's ascent step: delta + eta g / ||g||_inf, projected onto the ball ||delta||_inf <= epsilon.

    delta and grad are lists of (B, ...) tensors, one per encoder input of the example (two for a bi-encoder
    pair); ||g||_inf is per example, the largest |entry| of all its tensors. An example whose gradient is 0
    does not move. Projecting x~ = x + delta onto ||x~ - x||_inf <= epsilon clamps each entry of delta.
    """
    # YOUR CODE HERE
    # delta and grad are lists of (B, ...) tensors, the same shapes (one per encoder pass: two for a
    # bi-encoder pair); example b is row b of every tensor of the list. Return the new delta, a list alike:
    #   n_b = ||g_b||_inf = the largest |entry| of example b's gradient over all the tensors of the list, (B,)
    #       (computed from grad detached; not the L2 norm, not one norm per token or per tensor, not one
    #       for the whole batch); where n_b is 0 use 1 instead, so that such an example stays where it is
    #   delta_b + eta * g_b / n_b, each tensor's rows scaled by their n_b (view it as (B, 1, 1) for (B, T, H))
    #   then the projection onto the ball ||delta_b||_inf <= epsilon: clamp every entry to [-epsilon, epsilon]
    raise NotImplementedError


def rescale_step(delta: list[torch.Tensor], grad: list[torch.Tensor], eta: float, epsilon: float) -> list[torch.Tensor]:
    """The public code's step (mt-dnn perturbation.py _norm_grad, vat-pytorch SMARTLoss): s = delta + eta g, then
    each token's vector rescaled by its own infinity norm, s / (||s||_inf + epsilon): every token moves to radius ~1.

    No projection: epsilon only guards the division. delta and grad are lists of (B, T, H) tensors.
    """
    out = []
    for d, g in zip(delta, grad):
        s = d + eta * g.detach()                                     # (B, T, H)
        out.append(s / (s.abs().amax(-1, keepdim=True) + epsilon))   # per token: (B, T, 1) norms
    return out


def adversarial_perturbation(
    f: Callable[[list[torch.Tensor]], torch.Tensor], x: list[torch.Tensor], target: torch.Tensor, kind: str,
    config: SmartConfig,
) -> list[torch.Tensor]:
    """Algorithm 1's inner loop: delta = x~ - x after K ascent steps on l_s(f(x + delta), target), detached.

    f maps the encoder inputs (a list of (B, T, H)) to the task output; the gradient is taken with respect to
    delta alone (torch.autograd.grad), so no parameter gradient is computed or accumulated.
    """
    x, target = [h.detach() for h in x], target.detach()
    delta = [config.sigma * torch.randn_like(h) for h in x]          # nu ~ N(0, sigma^2 I)
    with torch.enable_grad():
        for _ in range(config.steps):
            delta = [d.requires_grad_() for d in delta]
            loss = divergence(f([h + d for h, d in zip(x, delta)]), target, kind)
            grad = torch.autograd.grad(loss, delta)
            step = ascent_step if config.rule == "project" else rescale_step
            delta = step([d.detach() for d in delta], list(grad), config.eta, config.epsilon)
    return delta


def smoothness_loss(
    f: Callable[[list[torch.Tensor]], torch.Tensor], x: list[torch.Tensor], target: torch.Tensor, kind: str,
    config: SmartConfig,
) -> torch.Tensor:
    """R_s on a batch (sec. 3.1): l_s(f(x~), f(x)) at the perturbation found by K ascent steps, target = f(x).

    The target keeps its graph: R_s depends on theta through both f(x~) and f(x), as the paper's R_s(theta).
    """
    delta = adversarial_perturbation(f, x, target, kind, config)
    return divergence(f([h + d for h, d in zip(x, delta)]), target, kind)


def smart_loss(task_loss: torch.Tensor, smoothness: torch.Tensor, bregman: torch.Tensor | float,
               config: SmartConfig) -> torch.Tensor:
    """The SMART objective on a batch: L + lambda_s R_s + mu D_Breg (sec. 3.1-3.2)."""
    return task_loss + config.lambda_s * smoothness + config.mu * bregman


# ------------------------------------------------------------------ D_Breg: the momentum copy theta~ (sec. 3.2)

@torch.no_grad()
def momentum_update(tilde: torch.Tensor, theta: torch.Tensor, beta: float) -> None:
    """theta~ <- (1 - beta) theta + beta theta~, in place (sec. 3.2, Algorithm 1)."""
    tilde.mul_(beta).add_(theta.detach().to(tilde.dtype), alpha=1.0 - beta)


@contextlib.contextmanager
def without_dropout(model: nn.Module, off: bool = True) -> Iterator[None]:
    """Run a block in eval mode (no dropout anywhere in the model) when `off`, then restore the mode."""
    was = model.training
    if off:
        model.eval()
    try:
        yield
    finally:
        model.train(was)


class Smart(nn.Module):
    """SMART for a model that gives its task output as a function of the encoder's input embeddings.

    The model provides inputs(task, batch) (the encoder passes' token inputs), embed(inputs) (their h0, a
    list of (B, T, H)), predict_from_embeddings(task, embeddings, inputs), and forward(task, batch) (the
    task output). With `bregman`, theta~ is held here as buffers, one per trainable parameter at creation, so
    that the model's state_dict (and a checkpoint) carries it and a resumed run continues exactly.
    """

    def __init__(self, config: SmartConfig, params: dict[str, nn.Parameter]):
        super().__init__()
        self.config = config
        self.names = list(params) if config.bregman else []
        for name in self.names:
            self.register_buffer(self.buffer_name(name), params[name].detach().clone())  # theta~_1 = theta_0

    @staticmethod
    def buffer_name(name: str) -> str:
        """The buffer holding theta~ of a parameter: its name with / for . (buffers take no dots)."""
        return "momentum/" + name.replace(".", "/")                 # buffer names may not hold dots

    def tilde(self) -> dict[str, torch.Tensor]:
        """theta~ by the model's parameter names (for torch.func.functional_call)."""
        return {name: getattr(self, self.buffer_name(name)) for name in self.names}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """After an optimiser step: theta~ <- (1 - beta) theta + beta theta~ for every tracked parameter."""
        params = dict(model.named_parameters())
        for name, tilde in self.tilde().items():
            momentum_update(tilde, params[name], self.config.beta)

    def reset_stats(self) -> None:
        """Zero the running sums of the logged terms (tasks.multitask does it at each epoch's start)."""
        self.stats = {"batches": 0, "loss": 0.0, "task_loss": 0.0, "r_s": 0.0, "bregman": 0.0}

    def epoch_stats(self) -> dict[str, float]:
        """Means per batch since reset_stats: R_s, D_Breg, and lambda_s R_s's and mu D_Breg's shares of the loss."""
        st, c = self.stats, self.config
        n, total = max(st["batches"], 1), st["loss"] or float("nan")
        return {"smart_r_s": st["r_s"] / n, "smart_r_s_share": c.lambda_s * st["r_s"] / total,
                "smart_bregman": st["bregman"] / n, "smart_bregman_share": c.mu * st["bregman"] / total}

    def forward(self, model: nn.Module, task: str, kind: str, batch: dict, inputs: list, h: list[torch.Tensor],
                y: torch.Tensor, task_loss: torch.Tensor) -> torch.Tensor:
        """The SMART loss of a batch, given the task forward: its embeddings h, output y = f(h) and loss.

        D_Breg compares f(x; theta) and f(x; theta~) on the same pass (one pair order, predict_from_embeddings)
        without dropout on both sides, so it is exactly 0 at theta~ = theta in train and eval mode.
        """
        c = self.config

        def f(embeddings: list[torch.Tensor]) -> torch.Tensor:
            return model.predict_from_embeddings(task, embeddings, inputs)

        clean = None                                                # f(x; theta) without dropout, with its graph
        with without_dropout(model, off=not c.dropout):
            if c.dropout:
                x, target = h, y                                    # the task forward's own f(x)
            else:
                x = model.embed(inputs)                             # h0 without dropout
                target = clean = f(x)
            smoothness = smoothness_loss(f, x, target, kind, c)
        bregman: torch.Tensor | float = 0.0
        if self.names:
            with without_dropout(model):
                if clean is None:
                    clean = f(model.embed(inputs))
                with torch.no_grad():
                    y_tilde = torch.func.functional_call(_Clean(model), {"m." + k: v for k, v in self.tilde().items()},
                                                         (task, inputs), strict=False)
            bregman = divergence(clean, y_tilde, kind)
        loss = smart_loss(task_loss, smoothness, bregman, c)
        if not hasattr(self, "stats"):
            self.reset_stats()
        st = self.stats
        st["batches"] += 1
        st["loss"] += loss.item()
        st["task_loss"] += task_loss.item()
        st["r_s"] += smoothness.item()
        st["bregman"] += bregman.item() if isinstance(bregman, torch.Tensor) else bregman
        return loss


class _Clean(nn.Module):
    """f(x) of a multitask model as a module call, so that torch.func.functional_call can run it with theta~."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.m = model

    def forward(self, task: str, inputs: list) -> torch.Tensor:
        return self.m.predict_from_embeddings(task, self.m.embed(inputs), inputs)
