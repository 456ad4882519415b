"""The Two sentences tab: change one word ("tired" → "wide") and see which heads move the focus token ("it")
from one candidate referent ("animal") to another ("street"); see referents.referent_shift."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import streamlit as st

from mha_viz.analysis.patterns import focus_shift
from mha_viz.analysis.referents import (
    default_candidates,
    differing_words,
    focus_default,
    occurrences,
    rank_heads,
    referent_shift,
    replace_word,
    second_sentence,
    shared_pairs,
    shared_weights,
)
from mha_viz.config import WINDOW_ROWS
from mha_viz.figures import matrix_heatmap, paired_bars
from mha_viz.ui.cache import get_trace, recording_of, tokens_of
from mha_viz.ui.cache_rows import get_focus_rows
from mha_viz.ui.choices import forget, map_click, valid_choice
from mha_viz.ui.common import csv_bytes, downloads, layer_head_map, plot
from mha_viz.ui.context import Ctx, needs_pretrained
from mha_viz.ui.opened import set_linked
from mha_viz.ui.sidebar import check_text, plain

SECOND_TEXT = "The animal didn't cross the street because it was too wide"
LAST = "the last token (each sentence's own)"
SHOWN = ("two_layer", "two_head")
TOP_MOVED = 5
FULL_WIDTH = 820  # px: the main column at a 1280 px page (long texts' patterns use all of it)
NOTE = "_two_note"  # session_state: what the "replace word" button could not do


def _swap() -> None:
    """The two sentences change places (the first is the sidebar's text)."""
    a, b = st.session_state.get("text"), st.session_state.get("text_b")
    if a is not None and b is not None:
        st.session_state.update(text=b, text_b=a)


def _build() -> None:
    text = st.session_state.get("text", "")
    old, new = st.session_state.get("two_old", ""), st.session_state.get("two_new", "")
    out = replace_word(text, old, new, first=True)
    if out is None:
        st.session_state[NOTE] = f"“{old}” is not a word of the first sentence, or “{new}” is not one word."
    else:
        st.session_state["text_b"] = out


def _listing(words: list[str], most: int = 12) -> str:
    """Up to ``most`` words, then how many more ("–" for none)."""
    if not words:
        return "–"
    more = f" … and {len(words) - most} more" if len(words) > most else ""
    return " ".join(words[:most]) + more


def _show(layer: int, head: int) -> None:
    set_linked(two_layer=layer, two_head=head)


_on_map_click = map_click("two_moved", _show)


def _forget_shown() -> None:
    """A new focus or candidates: show the new ranking's top head."""
    forget(SHOWN)


def _sentences(ctx: Ctx) -> str:
    text_b = st.text_input(
        "Second sentence (press Enter)",
        second_sentence(ctx.c.text, SECOND_TEXT),
        key="text_b",
        bind="query-params",
        max_chars=5000,
    )
    diff = differing_words(ctx.c.text, text_b)
    a, b, c = st.columns([2, 2, 1.5], vertical_alignment="bottom")
    check_text("two_old", 100)
    check_text("two_new", 100)
    st.session_state.setdefault("two_old", diff[0] if diff else "")
    st.session_state.setdefault("two_new", diff[1] if diff else "")
    a.text_input("Replace the word", key="two_old", max_chars=100, help="a word of the first (sidebar) sentence",
                 bind="query-params")  # fmt: skip
    b.text_input("with", key="two_new", max_chars=100, bind="query-params")
    c.button("Make the second sentence", key="two_build", on_click=_build)
    note = st.session_state.pop(NOTE, None)
    if note:
        st.warning(plain(note))
    swap = plain(f"Swap {diff[0]} ↔ {diff[1]}") if diff else "Swap the two sentences"
    st.button(swap, key="two_swap", on_click=_swap, help="The first sentence (sidebar) and the second change places.")
    return text_b


def _parts_note(ctx: Ctx) -> bool:
    """An encoder-decoder model: say what is compared (the two source texts, one decoder text); its decoder
    self-attention is not compared (return True: nothing to draw)."""
    if len(ctx.base.parts) == 1:
        return False
    if ctx.part == "decoder":
        st.info(
            "On an encoder-decoder model this view compares two source texts (the changed word is in the source): "
            "choose encoder self-attention or cross-attention in the sidebar."
        )
        return True
    target = plain(ctx.target or "")
    kind = (
        "Encoder self-attention: each source token's weights over the source tokens both texts share."
        if ctx.part == "encoder"
        else "Cross-attention: the queries are the decoder's tokens (the same in both runs), the keys the source "
        "tokens; the moved weight is a decoder token's weight on the source tokens both texts share."
    )
    st.info(
        f"{ctx.base.model_name} is an encoder-decoder model: the first (sidebar) and second source texts are each "
        f"run with the same decoder text (“{target}”, the sidebar's target). {kind}"
    )
    return False


def two_view(ctx: Ctx) -> None:
    if needs_pretrained(ctx, self_attention=len(ctx.base.parts) == 1) or _parts_note(ctx):
        return
    ctx.hiding_not_applied("the weights compared are the model's own, over every token.")
    text_b = _sentences(ctx)
    cross = ctx.part == "cross"
    # the source side of the second text (an encoder-decoder's needs the decoder text to be run)
    tokens_b = recording_of(ctx.config, text_b, ctx.target).tokens if ctx.target else tokens_of(ctx.config, text_b)
    keys_a = ctx.base.key_tokens  # the first text's source tokens (the keys, and the queries but in cross-attention)
    a, b = list(keys_a.pieces), list(tokens_b.pieces)
    pairs = shared_pairs(a, b)  # shared keys (i in the first text, j in the second)
    if not pairs:
        st.warning("The two sentences share no tokens to compare.")
        return
    shared = [keys_a.labels[i] for i, _ in pairs]
    where = dict(zip(shared, pairs, strict=True))
    changed = next((n for n, p in enumerate(pairs) if p != (n, n)), len(pairs))  # tokens before it are the same
    first_change = pairs[changed - 1][0] + 1 if changed else 0  # the first text's first changed token
    if cross:  # the queries: the decoder's tokens, the same in both runs
        queries = list(ctx.base.tokens.labels)
        choices = {label: (i, i) for i, label in enumerate(queries)}
        found = focus_default(queries, None)
        default = queries[found[0]] if found else queries[-1]
        why = "" if found else "The decoder text has no “it”: the focus is its last token."
    else:
        choices = dict(where)
        found = focus_default(shared, None if changed == len(pairs) else changed)
        default = shared[found[0]] if found else shared[0]
        why = "" if found else f"The text has no “it” both sentences share: the focus is “{shared[0]}”."
    if ctx.base.causal and not cross:
        same = changed  # tokens before the first difference see the same prefix in both sentences
        st.info(
            "Under a causal mask a token sees only what comes before it, so a shared token before the first change "
            f"(here the first {same} tokens, up to “{a[same - 1] if same else '–'}”) attends exactly the same way in "
            "both sentences. The comparison that can differ is at or after the changed word: by default the last "
            "token of each sentence (the one that predicts what comes next)."
        )
        choices = {LAST: (len(a) - 1, len(b) - 1), **{lb: p for lb, p in choices.items() if p[0] >= same}}
        default, why, found = LAST, "", None
    options = list(choices)
    valid_choice("two_focus", options, default)
    cols = st.columns(3)
    focus = cols[0].selectbox("Focus token (in both sentences)", options, key="two_focus", bind="query-params",
                              on_change=_forget_shown)  # fmt: skip
    if focus == default and (why or (found and found[1])):
        st.caption(plain(why or found[1]))
    diff = differing_words(ctx.c.text, text_b)
    if diff and occurrences(ctx.c.text, diff[0]) > 1:
        st.caption(
            plain(
                f"“{diff[0]}” occurs {occurrences(ctx.c.text, diff[0])} times in the first text; the second text "
                f"changes the one at token {first_change} (“Make the second sentence” changes the first occurrence)."
            )
        )
    qa, qb = choices[focus]
    words = [n for n, (i, _) in enumerate(pairs) if not ctx.key_special[i] and shared[n] != focus]  # shared words
    near = None if cross else where.get(focus, (None,))[0]
    near_slot = next((n for n, (i, _) in enumerate(pairs) if i == near), None)
    found_c = default_candidates(shared, near_slot)
    found_c = found_c or ((words[0], words[1]) if len(words) > 1 else (0, min(1, len(shared) - 1)))
    valid_choice("two_c1", shared, shared[found_c[0]])
    valid_choice("two_c2", shared, shared[found_c[1]])
    c1 = cols[1].selectbox("Candidate 1 (weight leaves it)", shared, key="two_c1", bind="query-params",
                           on_change=_forget_shown)  # fmt: skip
    c2 = cols[2].selectbox("Candidate 2 (weight goes to it)", shared, key="two_c2", bind="query-params",
                           on_change=_forget_shown)  # fmt: skip
    if c1 == c2:
        st.info("Choose two different candidate referents.")
        return
    # the focus rows only (row 0 of each): [L, H, 1, na], [L, H, 1, nb] = patterns[:, :, q : q + 1]
    pa = get_focus_rows(ctx.config, ctx.c.text, ctx.target, ctx.part, qa)[:, :, None]
    pb = get_focus_rows(ctx.config, text_b, ctx.target, ctx.part, qb)[:, :, None]
    cands = (where[c1], where[c2])
    r = referent_shift(pa, pb, 0, 0, pairs, (cands[0][0], cands[1][0]), (cands[0][1], cands[1][1]))
    f, n1, n2 = plain(focus), plain(c1), plain(c2)
    st.markdown(
        f"**Moved weight** of a head: take the row of “{f}” in each sentence, keep only the {len(pairs)} keys "
        "both sentences share and rescale them to sum to 1, so weight on the words only one sentence has (the "
        f"swapped word itself) does not count: w₁(key), w₂(key). **Moved** = (w₂({n2}) − w₁({n2})) − "
        f"(w₂({n1}) − w₁({n1})). Positive: from the first sentence to the second, “{f}” turns from “{n1}” towards "
        f"“{n2}”; negative: the other way. Heads are ranked by the size of the move, |moved|."
    )
    title = f"Weight “{focus}” moves from “{c1}” to “{c2}” (first → second sentence), per head"
    layer_head_map(r["moved"], title, "moved", "two_moved", ctx.c.image_format, _on_map_click, diverging=True)
    top = rank_heads(r["moved"], TOP_MOVED)
    st.markdown(f"**Top {len(top)} heads** by |moved| (*Open* shows the head below):")
    for rank, (la, he, v) in enumerate(top, 1):
        left, right = st.columns([5, 1])
        left.markdown(
            f"{rank}. layer {la}, head {he}: moved {v:+.3f} ({n1} {r['a1'][la, he]:.2f} → {r['b1'][la, he]:.2f}, "
            f"{n2} {r['a2'][la, he]:.2f} → {r['b2'][la, he]:.2f})"
        )
        right.button("Open", key=f"two_open_{rank}", on_click=_show, args=(la, he))
    queries_b = ctx.base.tokens.labels if cross else tokens_b.labels
    sides = (ctx.base.tokens.labels, queries_b), (keys_a.labels, tokens_b.labels)
    _shown_head(ctx, pa, pb, qa, qb, pairs, focus, text_b, sides, top[0][:2], r)


def _shown_head(
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
    left, right = st.columns(2)
    la = int(left.selectbox("Shown layer", list(range(L)), key="two_layer", bind="query-params"))
    he = int(right.selectbox("Shown head", list(range(H)), key="two_head", bind="query-params"))
    ia, ib = np.asarray([i for i, _ in pairs]), np.asarray([j for _, j in pairs])
    wa, mass_a = shared_weights(pa[la, he, 0], ia)  # [m], []
    wb, mass_b = shared_weights(pb[la, he, 0], ib)
    (queries_a, queries_b), (labels_a, labels_b) = sides
    keys = [labels_a[i] for i in ia]
    title = f"Layer {la}, head {he}: “{focus}” attends to (shared keys, rescaled to sum to 1)"
    plot(paired_bars(keys, wa, wb, ("first sentence", "second sentence"), title), "two_bars", ctx.c.image_format)
    only_a = _listing([labels_a[i] for i in range(len(labels_a)) if i not in set(ia.tolist())])
    only_b = _listing([labels_b[j] for j in range(len(labels_b)) if j not in set(ib.tolist())])
    st.caption(
        plain(
            f"Moved here: {r['moved'][la, he]:+.3f}. Before rescaling, the shared keys held {float(mass_a):.3f} of "
            f"the row in the first sentence and {float(mass_b):.3f} in the second; the rest went to the words only "
            f"one sentence has ({only_a} | {only_b})."
        )
    )
    long = max(len(labels_a), len(labels_b), len(queries_a), len(queries_b)) > WINDOW_ROWS
    if long:
        st.caption(
            f"Long texts: each pattern below shows the {WINDOW_ROWS} query rows around “{focus}” (every key column, "
            "the exact weights), one above the other at the page's width; all n × n cells would be too many to draw "
            "and read."
        )
    places = (st.container(), st.container()) if long else tuple(st.columns(2))
    for col, text, q, labels, qlabels, name, key in (
        (places[0], ctx.c.text, qa, labels_a, queries_a, "first", "two_head_a"),
        (places[1], text_b, qb, labels_b, queries_b, "second", "two_head_b"),
    ):
        with col:
            p = get_trace(ctx.config, text, ctx.target, ctx.part, la, x=False).pattern[he].numpy()  # [n_q, n_k]
            rows = _around(len(qlabels), q)
            what = "" if rows.stop - rows.start == len(qlabels) else f" (rows {rows.start}–{rows.stop - 1})"
            fig = matrix_heatmap(p[rows], labels, qlabels[rows], f"Layer {la}, head {he}: the {name} sentence{what}",
                                 value_name="weight", attention=True, width=FULL_WIDTH if long else 520)  # fmt: skip
            plot(fig, key, ctx.c.image_format)
    change = np.stack([focus_shift(pa[x], pb[x], 0, 0, pairs)["change"] for x in range(L)])  # [L, H]
    with st.expander("Another measure: how much the focus row changes at all (total variation)"):
        st.caption(
            "Total variation distance between the focus token's two rows, 0.5 Σ |w₁ − w₂|, where weight on words "
            "only one sentence has counts fully: a head that looks only at the swapped word ranks high here."
        )
        layer_head_map(change, f"How much “{focus}” changes where it looks, per head", "change", "two_change",
                       ctx.c.image_format)  # fmt: skip
    names = ["moved", "a1", "a2", "b1", "b2"]
    rows = [[x, y, *(f"{r[k][x, y]:.6g}" for k in names), f"{change[x, y]:.6g}"] for x in range(L) for y in range(H)]
    header = ["layer", "head", "moved", "first_c1", "first_c2", "second_c1", "second_c2", "total_variation"]
    downloads("two", csv_data=csv_bytes(header, rows))


def _around(n: int, q: int) -> slice:
    """All n rows up to WINDOW_ROWS; beyond, the WINDOW_ROWS rows centred on row q (inside 0…n)."""
    if n <= WINDOW_ROWS:
        return slice(0, n)
    start = min(max(0, q - WINDOW_ROWS // 2), n - WINDOW_ROWS)
    return slice(start, start + WINDOW_ROWS)
