"""From the residual stream to next-token logits: the final norm and the LM head of a causal LM.

The final norm is found by running a short probe with hooks (a Record for that pass only, models/watch.py) on every
norm-like module and on the LM head: it is the module whose output is exactly what the LM head reads.
Its effective form is then measured, not assumed, so RMSNorm, LayerNorm, Gemma's (1 + w) norms and norms
without parameters are all handled alike:

    norm(x) = γ ⊙ P x / s(x) + β        P = identity (RMSNorm) or "subtract the mean" (LayerNorm)

β is norm(0); P is "subtract the mean" when a constant shift leaves the output unchanged; γ is read from
a large probe vector (where ε is negligible); s(x) at the actual final residual is fitted from the norm's
own output there (for the usual norms it equals √(mean((P x)²) + ε), the RMS or σ). With s taken from the
actual residual, the norm is linear in each component added to the stream: the direct logit attribution.

The probe also tells whether each layer's attention output joins the residual stream as it leaves W^O
(no norm reads exactly W^O's output, as Gemma 2's and OLMo 2's post-attention norms do); only then is a
head's direct contribution its output after W^O.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from dataclasses import dataclass

import torch

from mha_viz.config import MATCH_TOL
from mha_viz.models import offload
from mha_viz.models.interventions import Hook, Record
from mha_viz.models.load import LoadedModel
from mha_viz.models.watch import watching
from mha_viz.trace import MhaVizError

_LOCK = threading.Lock()
_FOUND: weakref.WeakKeyDictionary[torch.nn.Module, Unembedding] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, eq=False)
class Unembedding:
    """A causal LM's way from the residual stream to logits.

    Shapes: gamma, beta [d_model] (beta None when the norm has no shift); the LM head's weight is read
    from the model when needed (never copied: it can be the size of the vocabulary × d_model).
    """

    norm_name: str | None  # the final norm's module path (None: the LM head reads the stream directly)
    norm_kind: str  # "RMSNorm", "LayerNorm" or "none"
    centered: bool
    gamma: torch.Tensor | None
    beta: torch.Tensor | None
    direct: bool  # attention outputs join the residual stream as they leave W^O


def _norm_like(name: str, mod: torch.nn.Module, d_model: int) -> bool:
    if isinstance(mod, torch.nn.LayerNorm | torch.nn.RMSNorm):
        return True
    if "norm" not in type(mod).__name__.lower() and "ln" not in name.rsplit(".", 1)[-1].lower():
        return False
    w = getattr(mod, "weight", None)
    return w is None or (isinstance(w, torch.Tensor) and tuple(w.shape) == (d_model,))


def head_module(lm: LoadedModel) -> torch.nn.Module:
    head = lm.model.get_output_embeddings() if hasattr(lm.model, "get_output_embeddings") else None
    if head is None or not (lm.causal_lm and lm.causal):
        raise MhaVizError(f"{lm.name} is not a causal language model (it has no LM head for next tokens)")
    return head


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    return bool((a.float() - b.float()).abs().max() <= 1e-5 * (1 + b.float().abs().max()))


def unembedding(lm: LoadedModel) -> Unembedding:
    """The final norm and LM head of ``lm`` (found once per model; see the module docstring)."""
    with _LOCK:
        found = _FOUND.get(lm.model)
        if found is None:
            found = _discover(lm)
            _FOUND[lm.model] = found
    return found


@dataclass(frozen=True, eq=False)
class FinalResidual(Record):
    """What the final norm ``norm`` reads, the residual stream after the last layer, in the pass it is given to: a
    list with one [b, pos, d_model] float32 CPU tensor per call of the norm. Keyed by the last layer of ``part``."""

    norm: str = ""

    def begin(self, lm: LoadedModel) -> tuple[list[torch.Tensor], tuple[Hook, ...]]:
        store: list[torch.Tensor] = []

        def pre(_m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            x = args[0] if args else kwargs.get("hidden_states")
            if isinstance(x, torch.Tensor):
                store.append(x.detach().float().cpu())

        return store, (Hook(self.norm, "pre", pre),)


@dataclass(frozen=True, eq=False)
class _Probe(Record):
    """What _discover reads of one probe pass: every norm-like module's input and output in call order, the LM head's
    input and every W^O's output (keyed by the last layer of ``part``)."""

    def begin(self, lm: LoadedModel) -> tuple[dict, tuple[Hook, ...]]:
        seen: dict = {"order": 0, "norms": {}, "wo": []}

        def norm_hook(name: str):
            def hook(_m: torch.nn.Module, args: tuple, out: object) -> None:
                if isinstance(out, torch.Tensor) and args and isinstance(args[0], torch.Tensor):
                    seen["order"] += 1
                    seen["norms"][name] = (seen["order"], args[0].detach(), out.detach())

            return hook

        def head_hook(_m: torch.nn.Module, args: tuple, kwargs: dict) -> None:
            x = args[0] if args else kwargs.get("input")
            if isinstance(x, torch.Tensor):
                seen["head_in"] = x.detach()

        def wo_hook(_m: torch.nn.Module, _args: tuple, out: object) -> None:
            if isinstance(out, torch.Tensor):
                seen["wo"].append(out.detach())

        names = {id(m): n for n, m in lm.model.named_modules()}
        hooks = [Hook(name, "post", norm_hook(name)) for name, mod in lm.model.named_modules()
                 if name and _norm_like(name, mod, lm.d_model)]  # fmt: skip
        hooks.append(Hook(names[id(head_module(lm))], "pre", head_hook))
        hooks += [Hook(site.wo, "post", wo_hook) for site in lm.sites]
        return seen, tuple(hooks)


def _discover(lm: LoadedModel) -> Unembedding:
    model, head = lm.model, head_module(lm)
    d = lm.d_model
    vocab = int(head.weight.shape[0])
    probe = torch.arange(3, 9, device=lm.device).remainder(vocab).unsqueeze(0)  # [1, 6]
    step = _Probe(lm.part(None), lm.n_layers() - 1)
    with watching(model, lm, [step]) as kept, torch.no_grad():
        model(input_ids=probe)
    seen = kept[step]
    if "head_in" not in seen:
        raise MhaVizError(f"{lm.name}'s LM head was not called on a probe text; next-token views are not available")
    head_in = seen["head_in"]
    matches = [(order, name) for name, (order, _, out) in seen["norms"].items() if _close(out, head_in)]
    direct = not any(_close(x, wo) for _, x, _ in seen["norms"].values() for wo in seen["wo"])
    if not matches:
        return Unembedding(None, "none", False, None, None, direct)
    name = max(matches)[1]
    centered, gamma, beta = _measure(model.get_submodule(name), d, lm.device)
    kind = "LayerNorm" if centered else "RMSNorm"
    return Unembedding(name, kind, centered, gamma, beta, direct)


def _measure(norm: torch.nn.Module, d: int, device: torch.device) -> tuple[bool, torch.Tensor, torch.Tensor | None]:
    """(centred, γ [d], β [d] or None) of a norm, measured on probe vectors (float32, on the CPU)."""
    g = torch.Generator().manual_seed(0)
    signs = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0)

    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return norm(x.to(device).view(1, 1, d)).view(d).float().cpu()

    param = next(norm.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    beta = run(torch.zeros(d, dtype=dtype))
    a = (signs * 1e3).to(dtype)
    shifted = run(a + 7e2)
    centered = bool((shifted - run(a)).abs().max() <= 1e-4 * (1 + run(a).abs().max()))
    pa = a.float() - a.float().mean() if centered else a.float()
    s = pa.pow(2).mean().sqrt()  # ε is negligible at this size
    gamma = (run(a) - beta) * s / pa
    return centered, gamma, (beta if bool(beta.abs().max() > 0) else None)


def centre(u: Unembedding, x: torch.Tensor) -> torch.Tensor:
    """P x: x minus its mean over d_model for LayerNorm, x itself otherwise. Shapes: [..., d] -> [..., d]."""
    return x - x.mean(dim=-1, keepdim=True) if u.centered else x


def norm_scale(lm: LoadedModel, u: Unembedding, resid: torch.Tensor) -> torch.Tensor:
    """s(resid): the norm's divisor at the actual residuals, fitted from the norm's own output there
    (1 without a final norm). Shapes: resid [pos, d] -> [pos]."""
    if u.norm_name is None:
        return torch.ones(resid.shape[0])
    out = apply_norm(lm, u, resid)  # [pos, d]
    lin = u.gamma * centre(u, resid.float())  # γ ⊙ P r
    rest = out - (0 if u.beta is None else u.beta)  # = lin / s
    s = (lin * lin).sum(-1) / (lin * rest).sum(-1)
    if not bool(((lin / s[:, None] - rest).abs().max()) <= MATCH_TOL * (1 + rest.abs().max())):
        raise MhaVizError(f"{lm.name}'s final norm is not of the form γ ⊙ x / s + β; attribution is not shown")
    return s


def apply_norm(lm: LoadedModel, u: Unembedding, x: torch.Tensor) -> torch.Tensor:
    """The model's own final norm applied to residual vectors. Shapes: [..., d] -> [..., d] float32 CPU."""
    if u.norm_name is None:
        return x.float()
    norm = lm.model.get_submodule(u.norm_name)
    param = next(norm.parameters(), None)
    with torch.no_grad():
        y = norm(x.to(device=lm.device, dtype=param.dtype if param is not None else torch.float32))
    return y.float().cpu()


def unembed(lm: LoadedModel, x: torch.Tensor) -> torch.Tensor:
    """The LM head on normed vectors: logits. Shapes: [..., d] -> [..., vocab] float32 CPU."""
    head = head_module(lm)
    with torch.no_grad():
        y = head(x.to(device=lm.device, dtype=head.weight.dtype))
    return y.float().cpu()


def head_rows(lm: LoadedModel, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The LM head's rows for ``ids`` and their biases (zeros if none). Shapes: [k, d], [k]."""
    head = head_module(lm)
    weight = offload.tensor(head)  # an offloaded head's from where accelerate keeps it
    index = torch.tensor(ids, dtype=torch.long, device=weight.device)
    w = weight.detach()[index].float().cpu()  # nn.Linear: [vocab, d]
    b = offload.tensor(head, "bias")
    return w, (torch.zeros(len(ids)) if b is None else b.detach()[index].float().cpu())


@dataclass(frozen=True, eq=False)
class Stream:
    """The residual stream of one pass. Shapes: resid [L + 1, pos, d_model]: resid[0] the embeddings,
    resid[l + 1] the stream after layer l (resid[L] = what the final norm reads); logits [pos, vocab], or
    [1, vocab] when one position was asked for."""

    resid: torch.Tensor
    logits: torch.Tensor


def _keeps_logits(model: torch.nn.Module) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (transformers' causal LMs since 4.50)."""
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def residual_stream(lm: LoadedModel, ids: tuple[int, ...] | list[int], position: int | None = None) -> Stream:
    """Run the model once on ``ids`` and keep the residual stream after every layer and the logits (of every
    position, or of ``position`` only: then the LM head runs on that one position where the model allows it,
    so the pass never holds [pos, vocab])."""
    u = unembedding(lm)
    extra = {}
    if position is not None and _keeps_logits(lm.model):
        extra["logits_to_keep"] = torch.tensor([int(position)], device=lm.device)
    # the final norm's input, recorded for this pass only (no hook stays on the shared model)
    steps = [] if u.norm_name is None else [FinalResidual(lm.part(None), lm.n_layers() - 1, u.norm_name)]
    with watching(lm.model, lm, steps) as kept, torch.no_grad():
        out = lm.model(input_ids=torch.tensor([list(ids)], device=lm.device), output_hidden_states=True, **extra)
    store = kept[steps[0]] if steps else []
    logits = out.logits[0].detach()  # [pos or 1, vocab]
    if position is not None and logits.shape[0] != 1:  # the model computed every position: keep one
        logits = logits[int(position)].unsqueeze(0).clone()  # [1, vocab]
    hidden = [h[0].detach().float().cpu() for h in out.hidden_states]  # L + 1 entries
    del out  # the full logits, when the model computed them
    final = store[-1][0] if store else hidden[-1]  # no final norm: the last entry is the stream itself
    if len(hidden) != lm.n_layers() + 1:
        raise MhaVizError(f"{lm.name} returned {len(hidden)} hidden states for {lm.n_layers()} layers")
    if u.norm_name is not None and not _close(apply_norm(lm, u, final), hidden[-1]) and not _close(final, hidden[-1]):
        raise MhaVizError(f"{lm.name}'s last hidden state is neither the final residual nor its norm")
    resid = torch.stack([*hidden[:-1], final])  # [L + 1, pos, d]
    return Stream(resid=resid, logits=logits.float().cpu())
