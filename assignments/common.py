"""What every check shares: the Part table entry, the groups, fixtures, compare(), and a stand-in for BERT."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED = 1234              # torch.manual_seed before every training-mode forward, here and in make_fixtures.py
RTOL, ATOL = 1e-4, 1e-5  # float32 results computed in a different order still agree to these
MODEL_ATOL = 1e-4        # six layers of MiniLM let rounding differences grow a little

# The groups of parts, each scored on its own: part 1 (the core assignment), part 2, and optional extensions.
ALL_GROUPS = {"core": "part 1 (minBERT)", "multitask": "part 2 (multitask)", "deebert": "extension DeeBERT",
              "smart": "extension SMART", "pals": "extension PALs", "simcse": "extension SimCSE"}
# Those this tree carries: core, and each group whose checks file (checks_GROUP.py) is here (a profile's tree
# carries its groups' files alone).
GROUPS = {g: label for g, label in ALL_GROUPS.items()
          if g == "core" or (Path(__file__).resolve().parent / f"checks_{g}.py").is_file()}
POOL_UNWRITTEN = ("pool() in minbert/pooling.py (part 1, classifier_head) is not written yet, and this part runs "
                  "through it: write it, check it with  python -m assignments.check classifier_head,  and run this "
                  "again")


class Fail(Exception):
    """A check found a difference; the message says which function, where and by how much."""


def add_hint(e: BaseException, hint: str) -> BaseException:
    """e with hint added to its notes, which the checker appends to its message (check._describe_error): what
    Python 3.11's e.add_note(hint) does, written so that Python 3.10, which the tree supports, runs it too."""
    e.__notes__ = [*getattr(e, "__notes__", ()), hint]
    return e


@dataclass
class Part:
    """One graded part: its name, points, the functions students write for it, and its check.

    files are the files (relative to the tree's root) whose code the part grades; group is a key of GROUPS;
    fixtures are the fixtures its check loads (the grader draws their hidden inputs before running it).
    """

    name: str
    points: int
    functions: str
    check: Callable[[], None]
    files: tuple[str, ...] = ()
    group: str = "core"
    fixtures: tuple[str, ...] = ()


def _raised_in_pool(e: BaseException) -> bool:
    """Whether e was raised by minbert/pooling.py's pool() itself (its innermost frame)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "pool" and \
        Path(tb.tb_frame.f_code.co_filename).name == "pooling.py"


def needs_pool(check: Callable[[], None]) -> Callable[[], None]:
    """check, with an unwritten pool() (part 1's) reported as such rather than blamed on the part's own function."""
    import functools

    @functools.wraps(check)
    def run() -> None:
        try:
            check()
        except NotImplementedError as e:
            if not e.args and _raised_in_pool(e):
                raise Fail(POOL_UNWRITTEN) from None
            raise
    return run


def load_fixture(name: str) -> dict[str, torch.Tensor]:
    """The named fixture: the shipped file or, while the grader runs a part (SESSION), its hidden inputs."""
    if SESSION is not None:
        return SESSION.fixture(name)
    from safetensors.torch import load_file
    path = FIXTURES / f"{name}.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the expected values are missing (instructors: python -m assignments.make_fixtures)")
    return load_file(path)


class Session:
    """How a check reads its fixtures and compares while the grader runs it (assignments/hidden.py).

    Students never set one. The grader's process that runs student code records what each compare() was
    given (record.Recorder); a process that never imported student code replays the check on the reference
    and judges those records (hidden.Replayer, the instructor's).
    """

    def fixture(self, name: str) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def compare(self, what: str, got: object, expected: torch.Tensor, **options: object) -> None:
        raise NotImplementedError

    def differentiable(self, what: str, loss: object) -> None:
        raise NotImplementedError

    def seen(self, what: str, got: object) -> torch.Tensor | None:
        raise NotImplementedError


SESSION: Session | None = None   # set by the grader alone; None when students check their work


def _close(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> torch.Tensor:
    """Elementwise: True where got is off by more than atol + rtol * |expected| (NaN counts as off)."""
    return ~((got - expected).abs() <= atol + rtol * expected.abs())


Hint = str | Callable[[torch.Tensor], str]     # a hint's text, or a function of the result that gives it


def compare(what: str, got: object, expected: torch.Tensor, *, rtol: float = RTOL, atol: float = ATOL,
            hints: dict[str, torch.Tensor] | None = None, hint: Hint = "", shape_hint: Hint = "") -> None:
    """Raise Fail naming `what`, the first mismatching index, the values there and the max abs diff.

    hints maps a description of a common mistake to what that mistake computes; the first one that got
    matches is named, except a mistake that computes the right answer on these inputs (within tolerance), which
    is never named. hint is said when none matches, shape_hint when the shape is wrong.
    """
    if SESSION is not None:
        return SESSION.compare(what, got, expected, rtol=rtol, atol=atol, hints=hints, hint=hint,
                               shape_hint=shape_hint)
    return judge(what, got, expected, rtol=rtol, atol=atol, hints=hints, hint=hint, shape_hint=shape_hint)


def judge(what: str, got: object, expected: torch.Tensor, *, rtol: float = RTOL, atol: float = ATOL,
          hints: dict[str, torch.Tensor] | None = None, hint: Hint = "", shape_hint: Hint = "") -> None:
    """What compare() does when no grader session is set: Fail with the message, or return."""
    if not isinstance(got, torch.Tensor):
        raise Fail(not_a_tensor(what, type(got).__name__, expected))
    if tuple(got.shape) != tuple(expected.shape):
        shape_hint = shape_hint(got) if callable(shape_hint) else shape_hint
        raise Fail(f"{what} returned shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
                   + (f". {shape_hint}" if shape_hint else ""))
    if got.dtype != expected.dtype:
        raise Fail(f"{what} returned dtype {got.dtype}, expected {expected.dtype}")
    got = got.detach().cpu()
    bad = _close(got, expected, rtol, atol)
    if not bad.any():
        return
    idx = tuple(bad.nonzero()[0].tolist())
    diff = (got - expected).abs()
    maxdiff = diff.nan_to_num(float("inf")).max().item()
    where = f" at index {idx}" if idx else ""    # a 0-d tensor (a loss) has no index
    msg = (f"{what} differs{where}: got {got[idx].item():.6g}, expected {expected[idx].item():.6g}; "
           f"max abs diff {maxdiff:.3g} ({int(bad.sum())} of {bad.numel()} values off)")
    for text, wrong in (hints or {}).items():
        if tuple(wrong.shape) != tuple(got.shape):
            continue
        wrong = wrong.to(got.dtype)
        if not _close(wrong, expected, rtol, atol).any():
            continue                # on these inputs the mistake gives the right answer: it says nothing here
        if not _close(got, wrong, rtol, atol).any():
            msg += f". It matches what you get when {text}"
            break
    else:
        hint = hint(got) if callable(hint) else hint
        if hint:
            msg += f". {hint}"
    raise Fail(msg)


def seen(what: str, got: object) -> torch.Tensor | None:
    """got as the judge sees it, for a hint that takes more than one compare() to name: got itself (detached), or,
    while the grader runs the part, what the student's process recorded (None in that process, which names nothing,
    and for what is not a tensor)."""
    if SESSION is not None:
        return SESSION.seen(what, got)
    return got.detach().cpu() if isinstance(got, torch.Tensor) else None


def matches_throughout(got: torch.Tensor | None, wrong: torch.Tensor, rtol: float, atol: float) -> bool:
    """Whether got (a run's results flattened in order, maybe cut short by an error) is within tolerance of wrong's
    (a mistake's, complete) everywhere it reaches."""
    if got is None or got.dim() != 1 or got.numel() > wrong.numel() or got.numel() == 0:
        return False
    return not _close(got.to(wrong.dtype), wrong[:got.numel()], rtol, atol).any()


def not_a_tensor(what: str, type_name: str, expected: torch.Tensor) -> str:
    return f"{what} returned {type_name}, expected a tensor of shape {tuple(expected.shape)}"


NO_GRADIENT = ("gives the right value but no gradient flows back from it: compute it with torch operations on the "
               "inputs (no .item(), numpy or torch.tensor(...) of a number)")


def differentiable(what: str, loss: object) -> None:
    """Raise Fail when a loss that has the right value carries no gradient back to its inputs."""
    if SESSION is not None:
        return SESSION.differentiable(what, loss)
    if isinstance(loss, torch.Tensor) and not loss.requires_grad:
        raise Fail(f"{what} {NO_GRADIENT}")


def output_weights(shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
    """A fixed random weighting w of a check's output (the same in the fixtures and the check): its gradient leg
    differentiates sum(w * out), so that every output value counts with its own weight."""
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(SEED))


IN_PLACE = ("An operation in place (inplace=True, +=, a method ending in _) changed a tensor that autograd saved for "
            "the backward pass: write it out of place (a = a + b; F.dropout(..., inplace=False))")


def gradients(what: str, out: object, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients of sum(output_weights * out) with respect to inputs (zeros where none flows); a backward pass
    that raises, or an output that carries no gradient, is a Fail naming `what` (the function that computed out)."""
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise Fail(f"{what}: no gradient flows back through its output: compute it with torch operations on its "
                   "inputs (no .detach(), .data, .item() or torch.no_grad())")
    try:
        grads = torch.autograd.grad((out * output_weights(out.shape).to(out.dtype)).sum(), inputs, allow_unused=True)
    except RuntimeError as e:
        text = (str(e).strip().splitlines() or [""])[0]
        text = text.split(". Hint:")[0][:400]
        raise Fail(f"{what}: the backward pass (the gradient of a fixed weighting of its output, as training takes) "
                   f"raised RuntimeError: {text}" + (f". {IN_PLACE}" if "inplace" in text else "")) from None
    return [torch.zeros_like(x) if gr is None else gr for x, gr in zip(inputs, grads)]


def _tiny_config(**kw: object):
    from minbert import BertConfig
    return BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=16, **kw)


def _state(f: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in f.items() if k.startswith(prefix)}


# ---------------------------------------------------------------- a stand-in for BERT

class MixLayer(nn.Module):
    """A stand-in layer: h + tanh(W softmax(h h^T / sqrt(H) + bias) h + b), masked like attention, (B, T, H)."""

    def __init__(self, H: int):
        super().__init__()
        self.W, self.b = nn.Parameter(torch.zeros(H, H)), nn.Parameter(torch.zeros(H))

    def forward(self, h: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        scores = h @ h.transpose(-2, -1) / math.sqrt(h.shape[-1]) + bias[:, 0]   # (B, T, T); bias (B, 1, 1, T)
        return h + torch.tanh(F.linear(scores.softmax(-1) @ h, self.W, self.b))


class StandInBert(nn.Module):
    """Stands in for BertModel in the checks of part 2 and the extensions, so that they do not run part 1's code.

    It has BertModel's interface (config, embed, attention_bias, layers, pooler, forward) and mixes the tokens
    of a sequence (masking padding as attention does), but it is not BERT: word + position + segment
    embeddings, then MixLayers, then the pooler tanh(Wp h_[CLS] + bp).
    """

    def __init__(self, config: object, num_layers: int = 1):
        super().__init__()
        from minbert.model import BertPooler
        H = config.hidden_size
        self.config = config
        self.word = nn.Embedding(config.vocab_size, H)
        self.position = nn.Embedding(config.max_position_embeddings, H)
        self.token_type = nn.Embedding(config.type_vocab_size, H)
        self.layers = nn.ModuleList(MixLayer(H) for _ in range(num_layers))
        self.pooler = BertPooler(config)

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.word(input_ids) + self.position(positions)[None] + self.token_type(token_type_ids)  # (B, T, H)

    def attention_bias(self, attention_mask: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        from minbert.model import mask_to_bias
        return mask_to_bias(attention_mask, h.dtype)                                      # (B, 1, 1, T)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, embeddings: torch.Tensor | None = None) -> object:
        from minbert.model import BertOutput
        h = self.embed(input_ids, token_type_ids) if embeddings is None else embeddings
        if attention_mask is None:
            attention_mask = torch.ones(h.shape[:2], dtype=torch.long)
        bias = self.attention_bias(attention_mask, h)
        for block in self.layers:
            h = block(h, bias)
        return BertOutput(h, self.pooler(h))
