"""Notebook API: the dashboard's most used views as Plotly figures, from the same pipeline and figure code.

    from mha_viz import show

    text = "The animal didn't cross the street because it was too tired"
    layer, head, weight = show.found(text, "it", "animal")  # (3, 1, 0.64) on the bundled MiniLM
    show.heads(text, layer=layer)  # every head of the layer
    show.head(text, layer=layer, head=head)  # one head, large
    show.lines(text, layer=layer, heads=[head], focus="it")  # the token-to-token lines
    show.focus(text, layer=layer, token="it")  # where "it" looks, head by head
    show.overview(text)  # every layer × head
    show.steps(text, layer=layer, head=head)  # the seven steps: a list of figures, shown one after another
    show.why(text, layer=layer, head=head)  # "it" → "animal" against "street" split by source (docs/why.md)

``model`` is "" for the bundled MiniLM (default), "smollm2", a Hugging Face id or a folder; a model is loaded
once per process and device. Bad input raises mha_viz.trace.MhaVizError with a message saying what to do.
Importing this module calls offline(): figures render in Jupyter and VS Code with no network. Imported before
torch, it also asks torch for huge pages on big tensors (runtime.allocator, as the app and the CLI do: a long
text's pass is not spent faulting in 4 KB pages); a notebook that imported torch first keeps torch's setting.
"""

# ruff: noqa: E402 (huge pages are asked for before the imports below load torch)
from __future__ import annotations

from mha_viz.runtime.allocator import huge_pages, tune_allocator

huge_pages()
tune_allocator()  # big blocks go back to the system when freed (a long recording's freed heap otherwise stays)

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from mha_viz import figures
from mha_viz.analysis.opening import opening_head, opening_pair
from mha_viz.analysis.referents import word
from mha_viz.analysis.steps import head_steps, numbered
from mha_viz.config import MAX_NOTEBOOK_RECORDINGS, Config
from mha_viz.figures.notebook import Figures, offline
from mha_viz.models.load import LoadedModel
from mha_viz.pipeline.road import Recording, layer_trace, load, record
from mha_viz.studies import why as why_study
from mha_viz.studies.sweeps import all_patterns
from mha_viz.trace import AttentionTrace, MhaVizError

if TYPE_CHECKING:  # only figures/ imports plotly
    import plotly.graph_objects as go

__all__ = [
    "focus", "found", "head", "heads", "lines", "loaded", "offline", "overview", "patterns", "steps", "trace", "why",
]  # fmt: skip
_MODELS: dict[tuple[str, str], LoadedModel] = {}  # (model, device) -> the loaded model, once per process
_RECORDINGS: OrderedDict[tuple[str, str, str], Recording] = OrderedDict()  # the last few texts' model runs


def loaded(name: str = "", device: str = "cpu") -> LoadedModel:
    """The loaded model (cached per process; never mutated here)."""
    if name.strip().lower() == "own":
        raise MhaVizError('mha_viz.show draws pretrained models; "own" weights are in the dashboard and the CLI')
    key = (name.strip(), device)
    if key not in _MODELS:
        _MODELS[key] = load(Config(model=key[0], device=device))
    return _MODELS[key]


def _recording(text: str, name: str, device: str) -> tuple[LoadedModel, Recording]:
    if not isinstance(text, str) or not text.strip():
        raise MhaVizError("give a text to analyse (a non-empty string)")
    lm = loaded(name, device)
    key = (name.strip(), device, text)
    if key not in _RECORDINGS:
        _RECORDINGS[key] = record(lm, text)
        while len(_RECORDINGS) > MAX_NOTEBOOK_RECORDINGS:
            _RECORDINGS.popitem(last=False)
    _RECORDINGS.move_to_end(key)
    return lm, _RECORDINGS[key]


def trace(text: str, layer: int, model: str = "", device: str = "cpu") -> AttentionTrace:
    """One layer's trace of the model's first attention (self-attention for encoders and decoders)."""
    lm, rec = _recording(text, model, device)
    n = lm.n_layers(lm.part(None))
    if not isinstance(layer, int | np.integer) or not 0 <= layer < n:
        raise MhaVizError(f"layer {layer!r} does not exist: {lm.name} has layers 0 to {n - 1}")
    return layer_trace(lm, rec, None, int(layer), Config(model=model.strip(), device=device))


def patterns(text: str, model: str = "", device: str = "cpu") -> np.ndarray:
    """Every layer's attention weights. Shapes: [n_layers, n_heads, n_query, n_key] float32."""
    lm, rec = _recording(text, model, device)
    return all_patterns(lm, rec, None, Config(model=model.strip(), device=device))


def _head_index(t: AttentionTrace, head: int) -> int:
    h = t.n_heads
    if not isinstance(head, int | np.integer) or not 0 <= head < h:
        raise MhaVizError(f"head {head!r} does not exist: this layer has heads 0 to {h - 1}")
    return int(head)


def _token_index(labels: Sequence[str], token: str) -> int:
    """The position of ``token``: its exact label, else the first label whose word it is ("the" → "the (5)")."""
    labels = list(labels)
    if token in labels:
        return labels.index(token)
    wanted = word(str(token))
    for i, label in enumerate(labels):
        if word(label) == wanted:
            return i
    shown = ", ".join(labels[:40]) + (" …" if len(labels) > 40 else "")
    raise MhaVizError(f"token {str(token)[:40]!r} is not in the text; its tokens are: {shown}")


def found(text: str, query: str | None = None, key: str | None = None, model: str = "", device: str = "cpu") -> tuple:
    """(layer, head, weight) of the head the app opens on (analysis.opening, the one rule the app, the Lesson, Lines
    and the example notebook share): where ``query``'s weight on ``key`` stands out most from the other tokens'
    weight on ``key`` (not simply the largest weight, which can be a head where every token looks at ``key``).
    Without ``query`` and ``key`` (or with the words of the app's own pair): the app's pair, "it" → "animal" (the
    last "it", the nearest "animal" before it). On the bundled MiniLM and the seed sentence: (3, 1, 0.64)."""
    p = patterns(text, model, device)
    lm, rec = _recording(text, model, device)
    part = lm.part(None)
    labels, key_labels = rec.query_tokens(part).labels, rec.key_tokens(part).labels
    pair = opening_pair(labels, key_labels)
    asked = (word(query or "it"), word(key or "animal"))
    given = query is not None or key is not None
    if pair is None or (given and asked != (word(labels[pair[0]]), word(key_labels[pair[1]]))):
        pair = _token_index(labels, "it" if query is None else query), _token_index(key_labels, key or "animal")
    chosen = opening_head(p, *pair)
    if chosen is None:
        raise MhaVizError(
            f"no head gives {key_labels[pair[1]]!r} any weight from {labels[pair[0]]!r} (a mask hides it)"
        )
    return chosen[:3]


def heads(text: str, layer: int = 0, model: str = "", device: str = "cpu") -> go.Figure:
    """Every head of one layer, one heatmap each (the Heads tab's grid)."""
    t = trace(text, layer, model, device)
    return figures.heads_grid(t.pattern.numpy(), t.tokens, clickable=False, key_tokens=t.key_tokens)


def head(text: str, layer: int, head: int, model: str = "", device: str = "cpu") -> go.Figure:
    """One head's attention weights, every cell (the Heads tab's opened head)."""
    t = trace(text, layer, model, device)
    i = _head_index(t, head)
    title = f"Layer {layer}, head {i}: attention weights [{len(t.tokens)} × {len(t.key_tokens)}]"
    return figures.matrix_heatmap(t.pattern[i].numpy(), t.key_tokens, t.tokens, title, value_name="weight",
                                  attention=True)  # fmt: skip


def overview(text: str, model: str = "", device: str = "cpu") -> go.Figure:
    """Every layer × head in one figure (the Overview tab)."""
    lm = loaded(model, device)
    group = max(1, lm.n_heads // max(1, lm.n_kv_heads))
    return figures.overview(patterns(text, model, device), group=group)


def focus(text: str, layer: int, token: str = "it", model: str = "", device: str = "cpu") -> go.Figure:
    """Where one query token attends in every head of a layer, as bars (the Heads tab's focus bars)."""
    t = trace(text, layer, model, device)
    q = _token_index(t.tokens, token)
    return figures.focus_bars(t.pattern.numpy(), t.key_tokens, q, 4, t.tokens[q])


def lines(
    text: str,
    layer: int,
    heads: Sequence[int] | None = None,
    focus: str | None = None,
    model: str = "",
    device: str = "cpu",
) -> go.Figure:
    """Token-to-token lines of some heads (default: the layer's head the app opens, analysis.opening, else head 0);
    with ``focus``, only that query token's lines (the Lines tab)."""
    t = trace(text, layer, model, device)
    p = t.pattern.numpy()  # [h, n_q, n_k]
    chosen = [figures.strongest_head(p, t.tokens, t.key_tokens)] if heads is None else list(heads)
    if not chosen or len(chosen) > figures.MAX_LINE_HEADS:
        raise MhaVizError(f"give 1 to {figures.MAX_LINE_HEADS} heads, got {len(chosen)}")
    chosen = [_head_index(t, i) for i in chosen]
    q = None if focus is None else _token_index(t.tokens, focus)
    windows = None
    if len(t.tokens) > figures.MAX_ROWS or len(t.key_tokens) > figures.MAX_ROWS:
        centre = 0 if q is None else q
        windows = (figures.token_window(len(t.tokens), centre), figures.token_window(len(t.key_tokens), centre))
    sel = figures.select_lines(p, chosen, q, windows)
    about = "every query" if q is None else f"“{t.tokens[q]}” as the query"
    title = f"Layer {layer}, {', '.join(f'head {i}' for i in chosen)}: {about}"
    return figures.attention_lines(p, t.tokens, t.key_tokens, sel, title)


def steps(text: str, layer: int, head: int, model: str = "", device: str = "cpu") -> Figures:
    """One head's computation in the order of the seven steps: one heatmap per matrix (the Step by step tab), as a
    list that a notebook shows as the figures one after another."""
    t = trace(text, layer, model, device)
    found_steps = head_steps(t, _head_index(t, head))
    out = Figures()
    for s, title in zip(found_steps, numbered(found_steps), strict=True):
        rows = t.key_tokens if s.key_rows else t.tokens
        fig = figures.matrix_heatmap(s.z, t.key_tokens if s.keys else None, rows, f"{title}   {s.shape}",
                                     diverging=s.signed, value_name=s.name, attention=s.name == "weight",
                                     height=380)  # fmt: skip
        out.append(fig)
    return out


def why(
    text: str, layer: int, head: int, query: str = "it", key: str = "animal", versus: str | None = "street",
    model: str = "", device: str = "cpu",
) -> why_study.Why:  # fmt: skip
    """Why does this head look there? The head's score from ``query`` to ``key`` (and the contrast against
    ``versus``) split into query-source × key-source terms (studies/why.py; the same numbers as `mha-viz why` and
    the Why? view); mha_viz.analysis.why_plan.plan(w) is what the view draws, with mha_viz.figures.why."""
    return why_study.why(loaded(model, device), text, layer, head, query, key, versus)


offline()
