"""The Two sentences tab: change one word ("tired" → "wide") and see which heads move the focus token ("it")
from one candidate referent ("animal") to another ("street"); see referents.referent_shift."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis.moves import destinations, rank_switch, switched_weight
from mha_viz.analysis.referent_pick import attended_candidates, pronoun_focus
from mha_viz.analysis.referents import (
    default_candidates,
    differing_words,
    focus_default,
    occurrences,
    referent_shift,
    replace_word,
    second_sentence,
    shared_pairs,
    word,
)
from mha_viz.ui.cache import recording_of, tokens_of
from mha_viz.ui.cache_rows import get_focus_rows
from mha_viz.ui.choices import forget, map_click, valid_choice
from mha_viz.ui.common import layer_head_map
from mha_viz.ui.context import Ctx, needs_pretrained
from mha_viz.ui.opened import set_linked
from mha_viz.ui.sidebar import check_text, plain
from mha_viz.ui.views.two_head import shown_head, verdict

SECOND_TEXT = "The animal didn't cross the street because it was too wide"
LAST = "the last token (each sentence's own)"
SHOWN = ("two_layer", "two_head")
TOP_MOVED = 5
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
        found = found or pronoun_focus(shared, None if changed == len(pairs) else changed)
        default = shared[found[0]] if found else shared[0]
        why = "" if found else f"The text has no pronoun both sentences share: the focus is “{shared[0]}”."
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
    found_c, why_c = _candidates(ctx, shared, pairs, (qa, focus), near_slot)
    found_c = found_c or ((words[0], words[1]) if len(words) > 1 else (0, min(1, len(shared) - 1)))
    valid_choice("two_c1", shared, shared[found_c[0]])
    valid_choice("two_c2", shared, shared[found_c[1]])
    c1 = cols[1].selectbox("Candidate 1 (weight leaves it)", shared, key="two_c1", bind="query-params",
                           on_change=_forget_shown)  # fmt: skip
    c2 = cols[2].selectbox("Candidate 2 (weight goes to it)", shared, key="two_c2", bind="query-params",
                           on_change=_forget_shown)  # fmt: skip
    if why_c and (c1, c2) == (shared[found_c[0]], shared[found_c[1]]):
        st.caption(plain(why_c))
    if c1 == c2:
        st.info("Choose two different candidate referents.")
        return
    # the focus rows only (row 0 of each): [L, H, 1, na], [L, H, 1, nb] = patterns[:, :, q : q + 1]
    pa = get_focus_rows(ctx.config, ctx.c.text, ctx.target, ctx.part, qa)[:, :, None]
    pb = get_focus_rows(ctx.config, text_b, ctx.target, ctx.part, qb)[:, :, None]
    cands = (where[c1], where[c2])
    r = referent_shift(pa, pb, 0, 0, pairs, (cands[0][0], cands[1][0]), (cands[0][1], cands[1][1]))
    slot = {p: n for n, p in enumerate(pairs)}
    sinks = np.asarray([bool(ctx.key_special[i]) or i == 0 for i, _ in pairs])  # special tokens, position 0
    r["dest_a"], r["dest_b"] = destinations(pa[:, :, 0], pb[:, :, 0], pairs, (slot[cands[0]], slot[cands[1]]), sinks)
    r["switched"] = switched_weight(r["dest_a"], r["dest_b"])
    r["keys"] = np.asarray([cands[0][0], cands[1][0]])  # the referents' positions in the first text
    f, n1, n2 = plain(focus), plain(c1), plain(c2)
    st.markdown(
        f"**Moved weight** of a head: take the row of “{f}” in each sentence, keep only the {len(pairs)} keys "
        "both sentences share and rescale them to sum to 1, so weight on the words only one sentence has (the "
        f"swapped word itself) does not count: w₁(key), w₂(key). **Moved** = what “{n2}” gained, at most what "
        f"“{n1}” lost: min(w₂({n2}) − w₁({n2}), w₁({n1}) − w₂({n1})) when “{n2}” gains and “{n1}” loses (negative "
        "the other way, 0 otherwise). Weight that leaves one referent for a sink ([CLS], [SEP], the first token) "
        "or another word is not a move between the two; the bars of each head say where it went. Heads are ranked "
        f"by the weight moved towards “{n2}”."
    )
    title = f"Weight “{focus}” moves from “{c1}” to “{c2}” (first → second sentence), per head"
    layer_head_map(r["switched"], title, "moved", "two_moved", ctx.c.image_format, _on_map_click, diverging=True)
    top = rank_switch(r["switched"], TOP_MOVED)
    verdict(r, f, n1, n2)
    st.markdown(f"**Top {len(top)} heads** by the weight moved towards “{n2}” (*Open* shows the head below):")
    for rank, (la, he, v) in enumerate(top, 1):
        a, b = r["dest_a"][la, he], r["dest_b"][la, he]
        left, right = st.columns([5, 1])
        left.markdown(
            f"{rank}. layer {la}, head {he}: moved {v:+.3f} ({n1} {a[0]:.2f} → {b[0]:.2f}, {n2} {a[1]:.2f} → "
            f"{b[1]:.2f}, sinks {a[2]:.2f} → {b[2]:.2f}, the rest {a[3]:.2f} → {b[3]:.2f})"
        )
        right.button("Open", key=f"two_open_{rank}", on_click=_show, args=(la, he))
    queries_b = ctx.base.tokens.labels if cross else tokens_b.labels
    sides = (ctx.base.tokens.labels, queries_b), (keys_a.labels, tokens_b.labels)
    shown_head(ctx, pa, pb, qa, qb, pairs, focus, text_b, sides, top[0][:2], r)


def _candidates(
    ctx: Ctx, shared: list[str], pairs: list[tuple[int, int]], focus: tuple[int, str], near: int | None
) -> tuple[tuple[int, int] | None, str]:
    """The default candidate referents (indices into ``shared``) and why: "animal" and "street" when the text has
    both (the seed example), else the two words the focus token attends to most in the first sentence
    (referent_pick.attended_candidates; ``focus``: its position in the first text and its label; ``near``: its
    index in ``shared``, None in cross-attention)."""
    if {"animal", "street"} <= {word(label) for label in shared}:
        return default_candidates(shared, near), ""
    ia = [i for i, _ in pairs]
    row = get_focus_rows(ctx.config, ctx.c.text, ctx.target, ctx.part, focus[0]).mean((0, 1))[ia]  # [shared keys]
    special = [bool(ctx.key_special[i]) or i == 0 for i in ia]
    picked = attended_candidates(row, shared, len(shared) if near is None else near, special, focus[1])
    return (picked[:2], picked[2]) if picked else (default_candidates(shared, near), "")
