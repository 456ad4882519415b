"""Two sentences' lower half: whether any head switches the focus token between the referents, and the shown
head (where its weight goes, its weights over the shared keys, its pattern in each sentence, the download)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st

from mha_viz.analysis.patterns import focus_shift
from mha_viz.analysis.plans.two_sentences import verdict as plan_verdict
from mha_viz.analysis.referents import shared_weights
from mha_viz.config import WINDOW_ROWS
from mha_viz.figures.finish import Finished, finish
from mha_viz.figures.two_patterns import two_patterns
from mha_viz.ui.cache import get_trace
from mha_viz.ui.choices import valid_choice
from mha_viz.ui.common import cached_figure, csv_bytes, downloads, layer_head_map, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.memo import sized_cache
from mha_viz.ui.opened import why_link
from mha_viz.ui.sidebar import plain

FULL_WIDTH = 820  # px: the main column at a 1280 px page (long texts' patterns use all of it)


def _listing(words: list[str], most: int = 12) -> str:
    """Up to ``most`` words, then how many more ("–" for none)."""
    if not words:
        return "–"
    more = f" … and {len(words) - most} more" if len(words) > most else ""
    return " ".join(words[:most]) + more


def verdict(r: dict[str, np.ndarray], f: str, n1: str, n2: str) -> None:
    """Whether any head really switches the focus token from referent 1 to referent 2 (plans.two_sentences.verdict)."""
    switched, sentence = plan_verdict(r, f, n1, n2)
    (st.success if switched else st.info)(sentence)


def shown_head(
    ctx: Ctx,
    pa: np.ndarray,
    pb: np.ndarray,
    qa: int,
    qb: int,
    pairs: list[tuple[int, int]],
    focus: str,
    text_b: str,
    sides: tuple[tuple[Sequence[str], Sequence[str]], tuple[Sequence[str], Sequence[str]]],
    top: tuple[int, int],
    r: dict[str, np.ndarray],
) -> None:
    """The chosen head: the focus token's weights over the shared keys in both sentences, and the head's
    pattern in each (beyond WINDOW_ROWS tokens, the rows around the focus token). ``sides``: ((query labels of
    the first, of the second text), (key labels of the first, of the second)); they differ only in
    cross-attention, whose queries are the decoder's tokens. Shapes: pa [L, H, 1, na], pb [L, H, 1, nb]: the focus
    rows (qa, qb are the focus tokens' positions; na, nb the key counts)."""
    L, H = pa.shape[:2]
    valid_choice("two_layer", list(range(L)), top[0])
    valid_choice("two_head", list(range(H)), top[1])
    left, right, why = st.columns([2, 2, 1], vertical_alignment="bottom")  # the Why? button in the row: fewer blocks
    la = int(left.selectbox("Shown layer", list(range(L)), key="two_layer", bind="query-params"))
    he = int(right.selectbox("Shown head", list(range(H)), key="two_head", bind="query-params"))
    ia, ib = np.asarray([i for i, _ in pairs]), np.asarray([j for _, j in pairs])
    wa, mass_a = shared_weights(pa[la, he, 0], ia)  # [m], []
    wb, mass_b = shared_weights(pb[la, he, 0], ib)
    _, (labels_a, labels_b) = sides
    why_link(why, "two_why", la, he, sides[0][0][qa], *(labels_a[int(i)] for i in r["keys"]))  # referent 1 against 2
    keys = [labels_a[i] for i in ia]
    names = ("first sentence", "second sentence")
    c1, c2 = (plain(labels_a[int(i)]) for i in r["keys"])
    dest = [f"“{c1}” (referent 1)", f"“{c2}” (referent 2)", "sinks ([CLS], [SEP], first token)", "the rest"]
    goes = f"Layer {la}, head {he}: where “{focus}”'s weight goes (shared keys, each sentence's sum 1)"
    attends = f"Layer {la}, head {he}: “{focus}” attends to (shared keys, rescaled to sum to 1)"
    panels = ((tuple(dest), r["dest_a"][la, he], r["dest_b"][la, he], goes), (tuple(keys), wa, wb, attends))
    # one chart of two panels (one draw pair for the browser, issue 36 §6), from the cache when this head was drawn
    # before (a tab switch back draws it again): no plotly build
    plot(cached_figure("paired_bars_rows", panels, names), "two_bars", ctx.image_format)
    only_a = _listing([labels_a[i] for i in range(len(labels_a)) if i not in set(ia.tolist())])
    only_b = _listing([labels_b[j] for j in range(len(labels_b)) if j not in set(ib.tolist())])
    st.caption(
        plain(
            f"Moved here: {r['switched'][la, he]:+.3f} (the difference of the two changes, (w₂(2) − w₁(2)) − "
            f"(w₂(1) − w₁(1)), is {r['moved'][la, he]:+.3f}). Before rescaling, the shared keys held "
            f"{float(mass_a):.3f} of the row in the first sentence and {float(mass_b):.3f} in the second; the rest "
            f"went to the words only one sentence has ({only_a} | {only_b})."
        )
    )
    _patterns(ctx, (la, he), (qa, qb), focus, text_b, sides)
    _change(ctx, pa, pb, pairs, focus, r)


def _patterns(
    ctx: Ctx, shown: tuple[int, int], q: tuple[int, int], focus: str, text_b: str,
    sides: tuple[tuple[Sequence[str], Sequence[str]], tuple[Sequence[str], Sequence[str]]],
) -> None:  # fmt: skip
    """The shown head's pattern in each sentence (beyond WINDOW_ROWS tokens, the rows around the focus token)."""
    la, he = shown
    qa, qb = q
    (queries_a, queries_b), (labels_a, labels_b) = sides
    long = max(len(labels_a), len(labels_b), len(queries_a), len(queries_b)) > WINDOW_ROWS
    if long:
        st.caption(
            f"Long texts: each pattern below shows the {WINDOW_ROWS} query rows around “{focus}” (every key column, "
            "the exact weights), one above the other at the page's width; all n × n cells would be too many to draw "
            "and read."
        )
    shown = []
    for text, q, labels, qlabels, name in (
        (ctx.text, qa, labels_a, queries_a, "first"),
        (text_b, qb, labels_b, queries_b, "second"),
    ):
        p = get_trace(ctx.sel.with_text(text).at(layer=la), x=False).pattern[he].numpy()  # [n_q, n_k]
        rows = _around(len(qlabels), q)
        what = "" if rows.stop - rows.start == len(qlabels) else f" (rows {rows.start}–{rows.stop - 1})"
        shown.append(
            (p[rows], tuple(labels), tuple(qlabels[rows]), f"Layer {la}, head {he}: the {name} sentence{what}")
        )
    if not long:  # side by side as one chart of two panels (two charts were two more draws: issue 36 §6)
        (za, ka, qa_, ta), (zb, kb, qb_, tb) = shown
        plot(pattern_pair_figure(za, zb, (ka, kb), (qa_, qb_), (ta, tb)), "two_heads", ctx.image_format)
        return
    for (z, keys, qlabels, title), key in zip(shown, ("two_head_a", "two_head_b"), strict=True):
        fig = cached_figure("matrix_heatmap", z, keys, qlabels, title, value_name="weight", attention=True,
                            width=FULL_WIDTH)  # fmt: skip
        plot(fig, key, ctx.image_format)


@sized_cache(max_entries=16, max_mb=16)
def pattern_pair_figure(
    first: np.ndarray,
    second: np.ndarray,
    keys: tuple[tuple[str, ...], tuple[str, ...]],
    queries: tuple[tuple[str, ...], tuple[str, ...]],
    titles: tuple[str, str],
) -> Finished:
    """figures.two_patterns (the shown head in each sentence, one chart), finished and kept: a rerun or a switch
    back to the tab draws it from here. Shapes: first [n_q1, n_k1], second [n_q2, n_k2]."""
    return finish(two_patterns(first, second, keys, queries, titles))


def _change(ctx: Ctx, pa: np.ndarray, pb: np.ndarray, pairs: list[tuple[int, int]], focus: str,
            r: dict[str, np.ndarray]) -> None:  # fmt: skip
    """How much the focus row changes at all (total variation), per head, and the download of every measure."""
    L, H = pa.shape[:2]
    change = np.stack([focus_shift(pa[x], pb[x], 0, 0, pairs)["change"] for x in range(L)])  # [L, H]
    # drawn only while open (a closed expander's chart is still drawn by the browser, twice: issue 36 §6)
    box = st.expander("Another measure: how much the focus row changes at all (total variation)",
                      key="two_change_open", on_change="rerun")  # fmt: skip
    if box.open:
        with box:
            st.caption(
                "Total variation distance between the focus token's two rows, 0.5 Σ |w₁ − w₂|, where weight on "
                "words only one sentence has counts fully: a head that looks only at the swapped word ranks high here."
            )
            layer_head_map(change, f"How much “{focus}” changes where it looks, per head", "change", "two_change",
                           ctx.image_format)  # fmt: skip
    names = ["switched", "moved", "a1", "a2", "b1", "b2"]
    dest = [(k, d) for k in ("dest_a", "dest_b") for d in (2, 3)]  # each sentence's sinks and rest
    rows = [[x, y, *(f"{r[k][x, y]:.6g}" for k in names), *(f"{r[k][x, y, d]:.6g}" for k, d in dest),
             f"{change[x, y]:.6g}"] for x in range(L) for y in range(H)]  # fmt: skip
    header = ["layer", "head", "moved", "difference", "first_c1", "first_c2", "second_c1", "second_c2",
              "first_sinks", "first_rest", "second_sinks", "second_rest", "total_variation"]  # fmt: skip
    downloads("two", csv_data=csv_bytes(header, rows))


def _around(n: int, q: int) -> slice:
    """All n rows up to WINDOW_ROWS; beyond, the WINDOW_ROWS rows centred on row q (inside 0…n)."""
    if n <= WINDOW_ROWS:
        return slice(0, n)
    start = min(max(0, q - WINDOW_ROWS // 2), n - WINDOW_ROWS)
    return slice(start, start + WINDOW_ROWS)
