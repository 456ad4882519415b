"""From heads to the next token, for causal language models: top-k, the logit lens, direct logit attribution.

    readout(lm, text, position=None) -> Readout

* Top-k: the model's own next-token probabilities at the chosen position (the last by default).
* Logit lens (nostalgebraist 2020): the residual stream after each layer l, passed through the model's own
  final norm and LM head, as if the model stopped there; the last layer's guess is the model's own.
* Direct logit attribution: the final residual r at the position is a sum of parts — the embeddings, every
  head's output after W^O (the trace's head_out), each layer's W^O bias, and the rest (MLPs and anything
  else a layer adds: r minus all of those). The final norm is linearised with its divisor taken from the
  actual r (RMSNorm: γ ⊙ x / rms(r); LayerNorm: γ ⊙ (x − mean x) / σ(r), with β a separate term), so each
  part's logit for token t is  u_t · (γ ⊙ P x / s(r)),  and the parts plus u_t · β plus the LM head's bias
  add up to the model's logit exactly (checked: ``error``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha_viz.config import Config
from mha_viz.models.tokens import Tokens, readable
from mha_viz.pipeline import budget, estimates
from mha_viz.pipeline import road as pipeline
from mha_viz.pipeline.road import LoadedModel, Recording
from mha_viz.pipeline.weights import (
    Unembedding,
    apply_norm,
    centre,
    head_module,
    head_rows,
    norm_scale,
    residual_stream,
    unembed,
    unembedding,
)
from mha_viz.trace import MhaVizError

TOP_K = 5
LENS_K = 3


def is_causal_lm(lm: LoadedModel) -> bool:
    """A decoder-only model with an LM head: what this module is for."""
    return bool(lm.causal_lm and lm.causal)


@dataclass(frozen=True, eq=False)
class Readout:
    """Next-token readouts of one text at one position.

    Shapes: top_ids, top_probs [k]; lens_ids, lens_probs [L, n - lens_first] (the top guess after each layer
    at positions lens_first to the last); lens_top_ids, lens_top_probs [L, LENS_K] (at the chosen position);
    lens_final [L] (the probability, after each layer, of the model's own top token); for each attributed
    target t (targets [T]): heads [T, L, H], biases [T, L], embed, rest, const, logit, model_logit [T].
    """

    tokens: Tokens
    position: int
    top_ids: tuple[int, ...]
    top_labels: tuple[str, ...]
    top_probs: np.ndarray
    lens_ids: np.ndarray
    lens_labels: tuple[tuple[str, ...], ...]  # [L][n - lens_first]
    lens_probs: np.ndarray
    lens_top_ids: np.ndarray
    lens_top_labels: tuple[tuple[str, ...], ...]  # [L][LENS_K]
    lens_top_probs: np.ndarray
    lens_final: np.ndarray
    lens_first: int  # the first position the lens rows read (0: all of them)
    targets: tuple[int, ...]
    target_labels: tuple[str, ...]
    heads: np.ndarray
    biases: np.ndarray
    embed: np.ndarray
    rest: np.ndarray
    const: np.ndarray
    model_logit: np.ndarray
    scale: float  # s(r): the final norm's divisor at this position (rms or σ of the final residual)
    norm_name: str | None
    norm_kind: str  # "RMSNorm", "LayerNorm" or "none"
    direct: bool  # heads' outputs join the residual stream as they leave W^O (no norm in between)

    @property
    def total(self) -> np.ndarray:
        """Sum of every part's attribution, per target. Shapes: [T]."""
        return self.heads.sum((1, 2)) + self.biases.sum(1) + self.embed + self.rest + self.const

    @property
    def error(self) -> float:
        """max |sum of the parts − the model's own logit| over the targets."""
        return float(np.abs(self.total - self.model_logit).max())

    def top_heads(self, target: int = 0, n: int = 5) -> list[tuple[int, int, float]]:
        """The n (layer, head, logit attribution) with the largest attribution to ``targets[target]``."""
        values = self.heads[target]
        H = values.shape[1]
        order = np.argsort(-values, axis=None)[:n]
        return [(int(i // H), int(i % H), float(values.flat[i])) for i in order]


def token_label(lm: LoadedModel, token_id: int) -> str:
    return readable(lm.tokenizer.decode([int(token_id)]))


def readout(
    lm: LoadedModel,
    text: str,
    position: int | None = None,
    targets: tuple[int, ...] = (),
    k: int = TOP_K,
    rec: Recording | None = None,
    lens_from: int = 0,
) -> Readout:
    """Top-k, logit lens and direct logit attribution (to the top-k tokens and ``targets``) for ``text``.

    The lens reads positions ``lens_from`` to the last (lens_ids, lens_probs [L, n - lens_from]) and always the
    chosen position (lens_top_*, lens_final); the Next token view asks for the positions it shows."""
    if not is_causal_lm(lm):
        raise MhaVizError(f"{lm.name} is not a decoder with an LM head; next-token readouts are for causal LMs")
    rec = rec or pipeline.record(lm, text)
    tokens = rec.tokens
    n = len(tokens.ids)
    pos = n - 1 if position is None else int(position)
    if not 0 <= pos < n:
        raise MhaVizError(f"position {position} does not exist; this text has positions 0 to {n - 1}")
    first = min(max(0, int(lens_from)), n - 1)
    u = unembedding(lm)
    budget.check_deadline()
    stream = residual_stream(lm, tokens.ids, position=pos)  # resid [L + 1, n, d]; logits [1, vocab] at pos
    probs = torch.softmax(stream.logits[0].double(), dim=-1)  # [vocab]
    top_p, top_i = probs.topk(min(k, probs.shape[0]))
    top_ids = tuple(int(i) for i in top_i)
    lens = _lens(lm, u, stream.resid[1:], pos, top_ids[0], first)
    wanted = tuple(dict.fromkeys([*top_ids, *(int(t) for t in targets)]))
    parts = _attribution(lm, u, rec, stream.resid[:, pos], pos, wanted)
    return Readout(
        tokens=tokens, position=pos, top_ids=top_ids, top_labels=tuple(token_label(lm, i) for i in top_ids),
        top_probs=top_p.float().numpy(), **lens, targets=wanted,
        target_labels=tuple(token_label(lm, i) for i in wanted),
        model_logit=stream.logits[0, list(wanted)].double().numpy(), **parts,
        norm_name=u.norm_name, norm_kind=u.norm_kind, direct=u.direct,
    )  # fmt: skip


def _lens(lm: LoadedModel, u: Unembedding, resid: torch.Tensor, pos: int, final_id: int, first: int = 0) -> dict:
    """The logit lens over resid [L, n, d] at positions first..n-1 (and pos): one layer and one chunk of
    positions at a time, so that at most estimates.LENS_CHUNK_BYTES of logits [chunk, vocab] f32 and their f64
    softmax are held, never [L, n, vocab]. Each row is computed as the unchunked lens computes it (the norm,
    the LM head and the softmax act on each position alone). The request's deadline is checked per chunk."""
    L, n, _ = resid.shape
    vocab = int(head_module(lm).weight.shape[0])
    chunk = max(1, estimates.LENS_CHUNK_BYTES // (20 * vocab))  # 20 bytes a cell: f32 logits, f64 copy, f64 softmax
    spans = [(a, min(a + chunk, n)) for a in range(first, n, chunk)]
    if pos < first:  # the chosen position lies before the shown ones: its own chunk of one
        spans.insert(0, (pos, pos + 1))
    ids, probs = np.zeros((L, n - first), dtype=np.int64), np.zeros((L, n - first), dtype=np.float32)
    top_ids, top_probs = np.zeros((L, LENS_K), dtype=np.int64), np.zeros((L, LENS_K), dtype=np.float32)
    final = np.zeros(L, dtype=np.float32)
    for layer in range(L):
        for a, b in spans:
            budget.check_deadline()
            p = torch.softmax(unembed(lm, apply_norm(lm, u, resid[layer, a:b])).double(), dim=-1)  # [b - a, vocab]
            if a >= first:
                best_p, best_i = p.max(dim=-1)  # [b - a]
                ids[layer, a - first : b - first], probs[layer, a - first : b - first] = (
                    best_i.numpy(),
                    best_p.float().numpy(),
                )
            if a <= pos < b:
                tp, ti = p[pos - a].topk(min(LENS_K, p.shape[-1]))
                top_ids[layer, : len(ti)], top_probs[layer, : len(tp)] = ti.numpy(), tp.float().numpy()
                final[layer] = float(p[pos - a, final_id])
            del p
    names: dict[int, str] = {}

    def label(i: int) -> str:
        return names.setdefault(i, token_label(lm, i))

    return {
        "lens_ids": ids, "lens_probs": probs, "lens_labels": tuple(tuple(label(int(i)) for i in row) for row in ids),
        "lens_top_ids": top_ids, "lens_top_probs": top_probs, "lens_first": first,
        "lens_top_labels": tuple(tuple(label(int(i)) for i in row) for row in top_ids), "lens_final": final,
    }  # fmt: skip


def _attribution(
    lm: LoadedModel, u: Unembedding, rec: Recording, resid: torch.Tensor, pos: int, targets: tuple[int, ...]
) -> dict:
    """Direct logit attribution at ``pos``. Shapes: resid [L + 1, d] (the stream at pos after each layer)."""
    config = Config(model=lm.name)  # the model as it is: no what-if edits
    part = lm.part(None)
    heads, biases = [], []
    for layer in range(lm.n_layers(part)):
        budget.check_deadline()
        trace = pipeline.layer_trace(lm, rec, part, layer, config, x=False)  # head outputs: no X needed
        heads.append(trace.head_out[:, pos].double())  # [H, d]
        biases.append(
            torch.zeros(trace.head_out.shape[-1], dtype=torch.float64) if trace.b_O is None else trace.b_O.double()
        )
    head_vecs, bias_vecs = torch.stack(heads), torch.stack(biases)  # [L, H, d], [L, d]
    final, embed = resid[-1].double(), resid[0].double()  # [d]
    rest = final - embed - head_vecs.sum((0, 1)) - bias_vecs.sum(0)
    s = float(norm_scale(lm, u, final.float().unsqueeze(0))[0])
    gamma = torch.ones_like(final) if u.gamma is None else u.gamma.double()
    w, b = head_rows(lm, list(targets))  # [T, d], [T]
    readers = (w.double() * gamma) / s  # [T, d]: u_t ⊙ γ / s

    def logit(x: torch.Tensor) -> np.ndarray:  # x [..., d] -> [T, ...]
        return torch.einsum("td,...d->t...", readers, centre(u, x)).numpy()

    const = b.double() + (0 if u.beta is None else w.double() @ u.beta.double())
    return {
        "heads": logit(head_vecs), "biases": logit(bias_vecs), "embed": logit(embed), "rest": logit(rest),
        "const": const.numpy(), "scale": s,
    }  # fmt: skip
