"""The Two sentences tab: change one word ("tired" → "wide") and see which heads move the focus token ("it")
from one candidate referent ("animal") to another ("street"); see referents.referent_shift."""

from __future__ import annotations

import numpy as np
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from mha_viz.analysis.moves import rank_switch
from mha_viz.analysis.plans.two_sentences import (
    SECOND_TEXT,
    TwoFocus,
    repeat_note,
    seed_words,
    two_candidates,
    two_focus,
    two_shift,
)
from mha_viz.analysis.referents import differing_words, replace_word, second_sentence
from mha_viz.ui.cache import recording_of, tokens_of
from mha_viz.ui.cache_rows import get_focus_rows
from mha_viz.ui.choices import forget, map_click, valid_choice
from mha_viz.ui.common import layer_head_map
from mha_viz.ui.context import Ctx, needs_pretrained
from mha_viz.ui.opened import set_linked
from mha_viz.ui.sidebar import check_text, plain
from mha_viz.ui.two_head import shown_head, verdict

SHOWN = ("two_layer", "two_head")
TOP_MOVED = 5
TOP = "two_top"  # the ranked heads' radio
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


def _show(layer: int, head: int) -> None:
    set_linked(two_layer=layer, two_head=head)


def _pick_top(top: list[tuple[int, int, float]]) -> None:
    """A ranked head chosen: open it below."""
    rank = st.session_state.get(TOP)
    if rank is not None:
        _show(*top[rank][:2])


def _row(rank: int, la: int, he: int, v: float, a: np.ndarray, b: np.ndarray, n1: str, n2: str) -> str:
    """A ranked head's line: what moved, and where each sentence's weight went (a, b: referent 1, referent 2, the
    sinks, the rest)."""
    return (
        f"{rank}\\. layer {la}, head {he}: moved {v:+.3f} ({n1} {a[0]:.2f} → {b[0]:.2f}, {n2} {a[1]:.2f} → "
        f"{b[1]:.2f}, sinks {a[2]:.2f} → {b[2]:.2f}, the rest {a[3]:.2f} → {b[3]:.2f})"
    )


_on_map_click = map_click("two_moved", _show)


def _forget_shown() -> None:
    """A new focus or candidates: show the new ranking's top head."""
    forget(SHOWN)


def _sentences(ctx: Ctx) -> str:
    text_b = st.text_input(
        "Second sentence (press Enter)",
        second_sentence(ctx.text, SECOND_TEXT),
        key="text_b",
        bind="query-params",
        max_chars=5000,
    )
    diff = differing_words(ctx.text, text_b)
    a, b, c, d = st.columns([2, 2, 1.5, 1.5], vertical_alignment="bottom")  # the swap too: one row, fewer blocks
    check_text("two_old", 100)
    check_text("two_new", 100)
    st.session_state.setdefault("two_old", diff[0] if diff else "")
    st.session_state.setdefault("two_new", diff[1] if diff else "")
    a.text_input("Replace the word", key="two_old", max_chars=100, help="a word of the first (sidebar) sentence",
                 bind="query-params")  # fmt: skip
    b.text_input("with", key="two_new", max_chars=100, bind="query-params")
    c.button("Make the second sentence", key="two_build", on_click=_build)
    swap = plain(f"Swap {diff[0]} ↔ {diff[1]}") if diff else "Swap the two sentences"
    d.button(swap, key="two_swap", on_click=_swap, help="The first sentence (sidebar) and the second change places.")
    note = st.session_state.pop(NOTE, None)
    if note:
        st.warning(plain(note))
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
    tokens_b = recording_of(ctx.sel.with_text(text_b)).tokens if ctx.target else tokens_of(ctx.config, text_b)
    keys_a = ctx.base.key_tokens  # the first text's source tokens (the keys, and the queries but in cross-attention)
    queries = list(ctx.base.tokens.labels) if cross else None  # cross-attention: the decoder's, the same in both runs
    plan = two_focus(keys_a.pieces, keys_a.labels, tokens_b.pieces, queries, ctx.base.causal)
    if plan is None:
        st.warning("The two sentences share no tokens to compare.")
        return
    if plan.causal_note:
        st.info(plan.causal_note)
    cols = st.columns(3)
    focus, notes = _focus(ctx, plan, text_b, cols[0])
    qa, qb = plan.rows(focus)
    picked = _referents(ctx, plan, focus, qa, cols[1:], notes)
    if picked is None:
        return
    c1, c2 = picked
    # the focus rows only (row 0 of each): [L, H, 1, na], [L, H, 1, nb] = patterns[:, :, q : q + 1]
    pa = get_focus_rows(ctx.sel, qa)[:, :, None]
    pb = get_focus_rows(ctx.sel.with_text(text_b), qb)[:, :, None]
    r = two_shift(pa, pb, plan, c1, c2, ctx.key_special)
    f, n1, n2 = plain(focus), plain(c1), plain(c2)
    top = _ranking(ctx, r, plan, (focus, c1, c2), (f, n1, n2))
    queries_b = ctx.base.tokens.labels if cross else tokens_b.labels
    sides = (ctx.base.tokens.labels, queries_b), (keys_a.labels, tokens_b.labels)
    shown_head(ctx, pa, pb, qa, qb, list(plan.pairs), focus, text_b, sides, top[0][:2], r)


def _focus(ctx: Ctx, plan: TwoFocus, text_b: str, col: DeltaGenerator) -> tuple[str, list[str]]:
    """The focus token picker (the plan's options and default), and the plan's notes on it."""
    valid_choice("two_focus", plan.options, plan.default)
    focus = col.selectbox("Focus token (in both sentences)", plan.options, key="two_focus", bind="query-params",
                          on_change=_forget_shown)  # fmt: skip
    notes = [plan.note] if focus == plan.default and plan.note else []
    notes.append(repeat_note(ctx.text, text_b, plan.first_change))
    return focus, notes


def _referents(ctx: Ctx, plan: TwoFocus, focus: str, qa: int, cols: list, notes: list[str]) -> tuple[str, str] | None:
    """The two candidate referents' pickers (the plan's defaults, and why), and every note on the pickers as one
    caption (``notes``: the focus's); None when both are the same."""
    shared = list(plan.shared)
    row = None  # the focus row's mean over every layer and head, needed only without the seed example's words
    if not seed_words(shared):
        row = get_focus_rows(ctx.sel, qa).mean((0, 1))  # [n_keys]
    found_c, why_c = two_candidates(plan, focus, ctx.key_special, row)
    valid_choice("two_c1", shared, shared[found_c[0]])
    valid_choice("two_c2", shared, shared[found_c[1]])
    c1 = cols[0].selectbox("Candidate 1 (weight leaves it)", shared, key="two_c1", bind="query-params",
                           on_change=_forget_shown)  # fmt: skip
    c2 = cols[1].selectbox("Candidate 2 (weight goes to it)", shared, key="two_c2", bind="query-params",
                           on_change=_forget_shown)  # fmt: skip
    if why_c and (c1, c2) == (shared[found_c[0]], shared[found_c[1]]):
        notes.append(why_c)
    said = [plain(n) for n in notes if n]
    if said:
        st.caption("  \n".join(said))  # one element, a line each
    if c1 == c2:
        st.info("Choose two different candidate referents.")
        return None
    return c1, c2


def _ranking(
    ctx: Ctx, r: dict[str, np.ndarray], plan: TwoFocus, names: tuple[str, str, str], said: tuple[str, str, str]
) -> list[tuple[int, int, float]]:
    """The moved-weight map, the verdict and the top heads with their Open buttons; returns the ranking."""
    (focus, c1, c2), (f, n1, n2) = names, said
    st.markdown(
        f"**Moved weight** of a head: take the row of “{f}” in each sentence, keep only the {len(plan.pairs)} keys "
        "both sentences share and rescale them to sum to 1, so weight on the words only one sentence has (the "
        f"swapped word itself) does not count: w₁(key), w₂(key). **Moved** = what “{n2}” gained, at most what "
        f"“{n1}” lost: min(w₂({n2}) − w₁({n2}), w₁({n1}) − w₂({n1})) when “{n2}” gains and “{n1}” loses (negative "
        "the other way, 0 otherwise). Weight that leaves one referent for a sink ([CLS], [SEP], the first token) "
        "or another word is not a move between the two; the bars of each head say where it went. Heads are ranked "
        f"by the weight moved towards “{n2}”."
    )
    title = f"Weight “{focus}” moves from “{c1}” to “{c2}” (first → second sentence), per head"
    layer_head_map(r["switched"], title, "moved", "two_moved", ctx.image_format, _on_map_click, diverging=True)
    top = rank_switch(r["switched"], TOP_MOVED)
    verdict(r, f, n1, n2)
    # one radio for the ranked heads (was a row of columns, text and an Open button per head: 15 blocks and 10
    # elements the browser re-renders on every switch, issue 36 §6); choosing one opens it below
    rows = [_row(rank, la, he, v, r["dest_a"][la, he], r["dest_b"][la, he], n1, n2)
            for rank, (la, he, v) in enumerate(top, 1)]  # fmt: skip
    shown = tuple(st.session_state.get(k) for k in SHOWN)
    shown = top[0][:2] if None in shown else shown  # none chosen yet: the top head opens
    st.session_state[TOP] = next((i for i, (la, he, _) in enumerate(top) if (la, he) == shown), None)
    st.radio(f"**Top {len(top)} heads** by the weight moved towards “{n2}” (choose one to open it below):",
             range(len(top)), key=TOP, format_func=rows.__getitem__, on_change=_pick_top, args=(top,))  # fmt: skip
    return top
