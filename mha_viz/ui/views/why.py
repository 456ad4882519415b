"""The Why? tab (issue 37): why does this head look there? One head's score from a query to a key, against a second
key, split exactly into query-source × key-source terms (studies/why.py): the score and both weights, the largest
terms as a heatmap (sources grouped, or each one), each side's totals as bars, and one sentence naming the top pair.
Defaults: the opened head, the focus token, its top key and its second key."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.why_plan import csv_rows, default_keys, head_sources, plan
from mha_viz.figures.why import why_bars, why_heatmap
from mha_viz.pipeline.road import encode
from mha_viz.selection import Selection
from mha_viz.studies.why import LINEARISATION, Why, why_at
from mha_viz.ui.cache import model_of
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.found import found_head
from mha_viz.ui.links import plain
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.opened import WHY_KEYS, follow_focus, follow_head, open_why

NONE = "(no second key)"
KEYS_FOR = "_why_keys_for"  # session_state: the (model, layer, head, query) the key pickers took their defaults for
TOP = 12  # rows and columns of the heatmap, bars per side


@sized_cache(max_entries=16, max_mb=64)
def get_why(sel: Selection, head: int, q: int, k: int, v: int | None) -> Why:
    """The split on the selection's layer (one forward pass, the sources recorded at the three tokens only)."""
    lm = model_of(sel.config)
    tokens, target_tokens = encode(lm, sel.text, sel.target)
    return why_at(lm, tokens, sel.layer, head, q, k, v, sel.part, target_tokens)


def _pickers(ctx: Ctx, labels: list[str], pattern: np.ndarray) -> tuple[int, int, int, int | None]:
    """Head, query, key and second key: the opened head and focus token, then that row's top two keys."""
    h = pattern.shape[0]
    a, b, c, d = st.columns(4)
    on_head = follow_head(ctx, "why_head", h)
    head = int(a.selectbox("Head", list(range(h)), format_func=lambda i: f"head {i}", key="why_head",
                           on_change=on_head))  # fmt: skip
    if "why_q" not in st.session_state:
        found = found_head(ctx.sel)
        first = found.query if found is not None and found.query in labels else "it" if "it" in labels else labels[-1]
        st.session_state["why_q"] = first
    on_q = follow_focus("why_q", labels)
    q = labels.index(b.selectbox("Query (focus token)", labels, key="why_q", on_change=on_q))
    place = (ctx.base.model_name, ctx.part, ctx.layer, head, q)
    if st.session_state.get(KEYS_FOR) != place or st.session_state.get("why_k") not in labels:
        row = pattern[head, q]
        others = (np.arange(len(row)) != q) & ~np.asarray(ctx.hidden)  # not [CLS]/[SEP], a decoder's sink, itself
        top, second = default_keys(row, row > 0, others)  # 0: a key the mask hides
        st.session_state["why_k"] = labels[top]
        st.session_state["why_v"] = NONE if second is None else labels[second]
        st.session_state[KEYS_FOR] = place
    _asked(labels)
    k = labels.index(c.selectbox("Key", labels, key="why_k"))
    v = d.selectbox("Against key", [NONE, *labels], key="why_v")
    return head, q, k, None if v in (NONE, labels[k]) else labels.index(v)


def why_view(ctx: Ctx) -> None:
    st.markdown(
        "**Why does this head look there?** A head's score s_ij = scale · q_i · k_j (+ the model's position bias) "
        "split exactly into where its query and its key came from: the embeddings, each earlier head (its output "
        "through its slice of W^O), each MLP and each bias, all added into the residual stream. Softmax only sees "
        "differences, so the terms of s_ij − s_ij' (the key against a second key) say what made the key win."
    )
    st.caption(LINEARISATION)
    labels = list(ctx.base.tokens.labels)
    pattern = ctx.trace(x=False).pattern.numpy()  # [h, n_q, n_k]
    head, q, k, v = _pickers(ctx, labels, pattern)
    w = get_why(ctx.sel, head, q, k, v)
    expand = st.toggle("Each source on its own (each head, each bias) instead of groups", key="why_expand")
    p = plan(w, contrast=True, expand=expand, top=TOP)
    cols = st.columns(4 if v is not None else 2)
    cols[0].metric(f"score “{labels[q]}” → “{labels[k]}”", f"{w.score:.3f}")
    cols[1].metric("its weight", f"{w.weight:.3f}")
    if v is not None:
        cols[2].metric(f"score “{labels[q]}” → “{labels[v]}”", f"{w.score_versus:.3f}")
        cols[3].metric("its weight", f"{w.weight_versus:.3f}")
    st.info(plain(p["sentence"]))
    if w.softcap:
        st.caption(f"Split before the model's soft-cap: the weights come from {w.softcap:g} · tanh(s / {w.softcap:g}).")
    if p["position"]:
        st.caption(f"The position bias adds {p['position']:+.4f} of its own (in the score, not in the table).")
    plot(why_heatmap(p["rows"], p["cols"], p["terms"], p["title"], p["unit"]), "why_map", ctx.image_format)
    k_side = labels[k] if v is None else f"{labels[k]}” minus “{labels[v]}"
    plot(why_bars(p["q_totals"], p["k_totals"], labels[q], k_side), "why_bars", ctx.image_format)
    downloads("why", csv_data=lambda: csv_bytes(("query_source", "key_source", "contribution"), csv_rows(w)))
    _follow(w, labels)


def _asked(labels: list[str]) -> None:
    """The key and second key a "Why?" link from another tab asked for (opened.open_why), once, over the defaults."""
    key, versus = st.session_state.pop(WHY_KEYS, (None, None))
    if key in labels:
        st.session_state["why_k"] = key
        st.session_state["why_v"] = versus if versus in labels and versus != key else NONE


def _follow(w: Why, labels: list[str]) -> None:
    """One step of a chain: a head among the sources opens the same split for that head's own attention at the
    token it wrote into (the query for a query-side source, the key for a key-side one)."""
    found = head_sources(w, contrast=w.versus is not None)
    if not found:
        return
    says = [f"L{la}H{he} ({side} side, {total:+.3f}): why “{labels[t]}” looks where it does there" for side, la, he,
            t, total in found]  # fmt: skip
    st.selectbox("Follow a head (one step of the chain)", list(range(len(found))), index=None, key="why_follow",
                 placeholder="a head among the sources…", format_func=lambda r: says[r], on_change=_take_follow,
                 args=(found, labels))  # fmt: skip


def _take_follow(found: list[tuple[str, int, int, int, float]], labels: list[str]) -> None:
    r = st.session_state.get("why_follow")
    st.session_state["why_follow"] = None
    if r is not None:
        _side, layer, head, token, _total = found[r]
        open_why(layer, head, labels[token])
