"""Why does this head look there? One head's pre-softmax score s_ij, and the contrast s_ij − s_ij' against a second
key, split exactly into query-source × key-source terms (issue 37; models/score_split.py does the split).

One forward pass through the one door (pipeline.door.run) records the chosen layer's attention call and, at the
query and key tokens only, where that layer's input came from (models/score_record.py). Every number is checked
against the model's own q, k and score before it is returned. Norms are linear with their scale frozen at the value
the model computed for each token (TransformerLens's frozen LayerNorm scale: LINEARISATION)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mha_viz.analysis.referents import word
from mha_viz.config import PART_NAMES, Config
from mha_viz.models.load import LoadedModel
from mha_viz.models.tokens import Tokens
from mha_viz.pipeline.door import run
from mha_viz.pipeline.road import encode, layer_at
from mha_viz.pipeline.scores import RecordSources, check_sum, model_score, sides
from mha_viz.selection import Selection
from mha_viz.trace import MhaVizError

LINEARISATION = (
    "Exact split with every norm's scale frozen at the value the model computed for that token (the standard "
    "linearisation: TransformerLens's frozen LayerNorm scale); rotary angles and QK-norm scales are the model's own."
)
SOURCE_FIELDS = ("label", "kind", "layer", "head")  # each source: (label, kind, layer, head)


@dataclass(frozen=True, eq=False)
class Why:
    """One head's score split. terms [n_q, n_k] = scale · q_i^c · k_j^c' (sums with ``position`` to ``score``, the
    model's own pre-softmax score; before the soft-cap where the model caps); terms_versus the same for key
    ``versus`` (None without one). Sources are (label, kind, layer, head) tuples."""

    model: str
    part: str
    layer: int
    head: int
    labels: tuple[str, ...]
    query: int
    key: int
    versus: int | None
    q_sources: tuple[tuple, ...]
    k_sources: tuple[tuple, ...]
    terms: np.ndarray
    position: float
    score: float
    weight: float
    terms_versus: np.ndarray | None = None
    position_versus: float = 0.0
    score_versus: float = 0.0
    weight_versus: float = 0.0
    softcap: float | None = None


def find_token(labels: tuple[str, ...], name: str | int, what: str, last: bool = False) -> int:
    """The position of the token ``name`` (its word, case-insensitive; or a position number) in ``labels``: the
    first occurrence, or the ``last``. Raises MhaVizError naming the tokens when there is none."""
    if isinstance(name, int) or (isinstance(name, str) and name.strip().isdigit()):
        i = int(name)
        if 0 <= i < len(labels):
            return i
        raise MhaVizError(
            f"the {what} position {i} is outside the text's {len(labels)} tokens (0 to {len(labels) - 1})"
        )
    wanted = word(str(name))
    hits = [i for i, label in enumerate(labels) if word(label) == wanted or label == name]
    if not hits:
        shown = ", ".join(labels[:40]) + (", …" if len(labels) > 40 else "")
        raise MhaVizError(f"the {what} {str(name)[:40]!r} is not a token of the text; its tokens are: {shown}")
    return hits[-1] if last else hits[0]


def why(
    lm: LoadedModel, text: str, layer: int, head: int, query: str | int, key: str | int,
    versus: str | int | None = None, part: str | None = None, target: str | None = None,
) -> Why:  # fmt: skip
    """why_of on the selection of ``text`` (``target``: an encoder-decoder's decoder text), ``part`` and ``layer``."""
    return why_of(lm, Selection(Config(), text, target, part, layer), head, query, key, versus)


def why_of(lm: LoadedModel, sel: Selection, head: int, query: str | int, key: str | int,
           versus: str | int | None = None) -> Why:  # fmt: skip
    """Split head ``head`` of the selection's layer's score from token ``query`` (its last occurrence) to ``key`` (and
    the contrast against ``versus``) into query-source × key-source terms, on sel.text (and sel.target)."""
    tokens, target_tokens = encode(lm, sel.text, sel.target)
    i = find_token(tokens.labels, query, "query", last=True)
    j = find_token(tokens.labels, key, "key")
    jv = None if versus is None else find_token(tokens.labels, versus, "second key")
    return why_at(lm, tokens, sel.layer, head, i, j, jv, sel.part, target_tokens)


def why_at(
    lm: LoadedModel, tokens: Tokens, layer: int, head: int, i: int, j: int, jv: int | None = None,
    part: str | None = None, target_tokens: Tokens | None = None,
) -> Why:  # fmt: skip
    """why() at token positions (query i, key j, second key jv) of ``tokens``."""
    part = lm.part(part)
    if lm.encoder_decoder and part != "encoder":
        raise MhaVizError(f"the score split covers the encoder of an encoder-decoder model, not its {PART_NAMES[part]}")
    layer = layer_at(lm, None, part, layer).layer  # resolved once: an unknown layer is refused here
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < lm.n_heads:
        raise MhaVizError(f"head {head} does not exist; {lm.name} has heads 0 to {lm.n_heads - 1}")
    if jv == j:
        raise MhaVizError("the second key is the key itself; pick another token to contrast")
    positions = tuple(sorted({i, j} | ({jv} if jv is not None else set())))
    ids = torch.tensor([tokens.ids])  # [1, pos]
    dec = None if target_tokens is None else torch.tensor([target_tokens.ids])
    sources = RecordSources(part, layer, positions)  # the residual stream per component at these tokens
    ran = run(lm, ids, sources, only=(part, layer), extras=False, decoder_ids=dec)
    call, rec = ran.calls[(part, layer)], ran.records[sources]
    for k in (j, jv):
        if k is not None and call.allowed is not None and not bool(call.allowed[0, head % call.allowed.shape[1], i, k]):
            raise MhaVizError(f"{tokens.labels[i]!r} cannot see {tokens.labels[k]!r} in this head (the mask hides it)")
    sd = sides(lm, part, layer, head, rec, call)
    qi = sd.q[:, positions.index(i)]  # [n_q, dh]

    def table(k: int) -> tuple[np.ndarray, float, float, float]:  # terms, position bias, score, weight
        terms = call.scaling * qi @ sd.k[:, positions.index(k)].T  # [n_q, n_k]
        score, bias, weight = model_score(call, head, i, k)
        check_sum(float(terms.sum()), score, f"{tokens.labels[i]} → {tokens.labels[k]}")
        return terms.numpy(), bias, score + bias, weight

    terms, pos, score, weight = table(j)
    more = {}
    if jv is not None:
        tv, pv, sv, wv = table(jv)
        more = dict(terms_versus=tv, position_versus=pv, score_versus=sv, weight_versus=wv)
    return Why(
        lm.name, part, layer, head, tokens.labels, i, j, jv, tuple(map(tuple, sd.q_sources)),
        tuple(map(tuple, sd.k_sources)), terms, pos, score, weight, softcap=call.softcap, **more,
    )  # fmt: skip
