"""The Patching tab: activation patching per head (mha_viz.studies.patching). Which heads carry the difference between a
clean text and a corrupted one to the output: the corrupted text is run with one head's clean activation put
back, and the share of the clean metric that returns is drawn as a layer × head map."""

from __future__ import annotations

import dataclasses

import numpy as np
import streamlit as st

from mha_viz.analysis.plans import patching as plan
from mha_viz.analysis.plans.two_sentences import SECOND_TEXT
from mha_viz.analysis.referents import second_sentence
from mha_viz.config import AUTO_SCAN_TOKENS
from mha_viz.figures import token_bars
from mha_viz.pipeline import budget
from mha_viz.pipeline.pace import eta
from mha_viz.selection import Selection
from mha_viz.studies import patching as pt
from mha_viz.ui.cache import model_of, tokens_of
from mha_viz.ui.cache_rows import get_role_labels
from mha_viz.ui.choices import clicked_points
from mha_viz.ui.common import csv_bytes, downloads, kept_input, layer_head_map, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.long_run import long_run, progress_bar, run_key
from mha_viz.ui.memo import CACHES, SizedCache
from mha_viz.ui.opened import open_head
from mha_viz.ui.request import own_input, sizes
from mha_viz.ui.sidebar import plain

AUTO_RUNS = 100  # scans of at most this many patched runs start by themselves (MiniLM: 72 heads, ~0.5 s) ...
TOP_HEADS = 5
RESULTS = SizedCache("patching", max_entries=16, max_bytes=4 * 2**20)
CACHES.append(RESULTS)


def _open_head(group: int) -> None:
    """Open the clicked head in Heads (a K/V head: the first query head that reads it; ``group`` query heads per
    K/V head, 1 for query heads)."""
    for _, custom in clicked_points("patch_map"):  # customdata (layer, head, value)
        if len(custom) >= 2:
            open_head(int(custom[0]), int(custom[1]) * group)
            return


def _inputs(ctx: Ctx, decoder: bool) -> tuple[str, str, dict]:
    """The two texts and the metric's words, from the view's own boxes (defaults: the IOI pair for decoders,
    Two sentences' pair for encoders)."""
    other = "" if decoder else st.session_state.get("text_b") or second_sentence(ctx.text, SECOND_TEXT)
    clean_default, corrupt_default, default = plan.input_defaults(decoder, ctx.text, other, pt.IOI, pt.IOI_ANSWERS,
                                                                  pt.REFERENTS)  # fmt: skip
    kind = "dec" if decoder else "enc"
    if st.session_state.get("_patch_kind") != kind:  # a new kind of model: its own defaults
        for key in ("patch_clean", "patch_corrupt", "_kept_patch_clean", "_kept_patch_corrupt"):
            st.session_state.pop(key, None)
        st.session_state["_patch_kind"] = kind
    left, right = st.columns(2)
    clean = kept_input(left, "Clean text", "patch_clean", clean_default, 2000)
    corrupt = kept_input(right, "Corrupted text (the same number of tokens)", "patch_corrupt", corrupt_default, 2000)
    cols = st.columns(3)
    if decoder:
        answer = kept_input(cols[0], "Answer token", "patch_answer", default["answer"], 40)
        wrong = kept_input(cols[1], "Wrong token", "patch_wrong", default["wrong"], 40)
        words = {"answer": answer, "wrong": wrong}
    else:
        focus = kept_input(cols[0], "Focus token", "patch_focus", default["focus"], 40)
        r1 = kept_input(cols[1], "Referent 1", "patch_ref1", default["referents"][0], 40)
        r2 = kept_input(cols[2], "Referent 2", "patch_ref2", default["referents"][1], 40)
        words = {"focus": focus, "referents": (r1, r2)}
    return clean, corrupt, words


def _scan(ctx: Ctx, clean: str, corrupt: str, words: dict, what: str, progress=None) -> dict:
    """Every head patched (cached per model, texts, metric and what): {"patched" [L, G], "clean", "corrupted",
    "metric", "tokens"}."""
    key = ("heads", ctx.config.model_name, ctx.config.model_device, clean, corrupt, repr(words), what)

    def compute() -> dict:
        pair = pt.prepare(model_of(ctx.config), clean, corrupt, **words)
        return {"patched": pt.patch_heads(pair, what, progress), "clean": pair.clean, "corrupted": pair.corrupted,
                "metric": pair.metric.describe(), "tokens": pair.tokens.labels}  # fmt: skip

    return RESULTS.get_or_compute(key, compute)


def patching_view(ctx: Ctx) -> None:
    lm = model_of(ctx.config)
    if lm.encoder_decoder:
        st.info("Patching takes a decoder-only or an encoder-only model; this one is an encoder-decoder model.")
        return
    decoder = lm.causal_lm
    st.markdown(
        "**Activation patching.** Run the corrupted text with one head's activation put back to its value in the "
        "clean text, and measure how much of the clean behaviour returns: **recovered** = (patched − corrupted) / "
        "(clean − corrupted); 1 means that head alone restores the clean value, 0 that it carries none of the "
        "difference. The rest of the model is the corrupted run's (Wang et al. 2022, *Interpretability in the Wild*)."
    )
    clean, corrupt, words = _inputs(ctx, decoder)
    whats = list(pt.WHATS)
    what = st.radio("Patch each head's", whats, format_func=lambda w: pt.WHATS[w], key="patch_what", horizontal=True,
                    help="The head's output is its slice of W^O's input at every position; q, k and v as the model "
                    "used them (after rotary embeddings). Grouped-query models: k and v per K/V head.")  # fmt: skip
    tokens = max(len(lm.tokenizer(t)["input_ids"]) for t in (clean, corrupt))
    s = dataclasses.replace(sizes("Patching", ctx), n_q=tokens, n_k=tokens)  # the boxes' texts, not the sidebar's
    with own_input("Patching", ctx, s, what="Patching these two texts"):
        r = _run(ctx, lm, clean, corrupt, words, what, s)
        if r is not None:
            _show(ctx, lm, r, what, clean, corrupt, words)


def _run(ctx: Ctx, lm, clean: str, corrupt: str, words: dict, what: str, s: budget.Sizes) -> dict | None:
    """The scan: cached, started by itself when small, else on a button after the attribution estimate; its controls
    are gone once it is done (ui/long_run.py). None: not started."""
    G = pt.heads_of(lm, what)
    n = lm.n_layers(lm.parts[0]) * G
    if ("heads", ctx.config.model_name, ctx.config.model_device, clean, corrupt, repr(words), what) in RESULTS:
        return _scan(ctx, clean, corrupt, words, what)
    auto = plan.starts_by_itself(n, s.n_q, AUTO_RUNS, AUTO_SCAN_TOKENS)
    secs = budget.seconds("Patching", s)

    def waiting() -> None:
        st.caption(
            f"Exact patching: {n} patched runs of the whole model on {s.n_q} tokens, {pt.batch_size(lm, s.n_q)} per "
            f"forward pass, {eta(secs)}. Press the button to start (it shows its progress and can be cancelled)."
        )

    first = None if auto else lambda: _estimate(ctx, clean, corrupt, words, what)  # gone with the controls
    key = run_key("patch_go", (ctx.config, (clean, corrupt, repr(words)), what, lm.parts[0]))
    return long_run(key, f"Patch all {n} heads exactly", auto, waiting,
                    lambda progress: _scan(ctx, clean, corrupt, words, what, progress), secs, before=first)  # fmt: skip


def _attribution(ctx: Ctx, clean: str, corrupt: str, words: dict, what: str) -> dict:
    """The attribution patching estimate (cached like the scan): {"patched" [L, G], "clean", "corrupted"}."""
    from mha_viz.studies.attribution_patching import attribution

    key = ("attribution", ctx.config.model_name, ctx.config.model_device, clean, corrupt, repr(words), what)

    def compute() -> dict:
        pair = pt.prepare(model_of(ctx.config), clean, corrupt, **words)
        return {"patched": attribution(pair, what), "clean": pair.clean, "corrupted": pair.corrupted}

    return RESULTS.get_or_compute(key, compute)


def _estimate(ctx: Ctx, clean: str, corrupt: str, words: dict, what: str) -> None:
    """Above AUTO_RUNS heads: the attribution estimate first, drawn as the map (no click)."""
    a = _attribution(ctx, clean, corrupt, words, what)
    est = plan.recovered_of(a["patched"], a["clean"], a["corrupted"])  # [L, G]
    st.markdown(plan.estimate_text(est, a["clean"], a["corrupted"], AUTO_RUNS))
    layer_head_map(est.astype(np.float32), f"Estimated recovered ({pt.WHATS[what]}, attribution patching)",
                   "estimated recovered", "patch_attr_map", ctx.image_format, diverging=True)  # fmt: skip


def _show(ctx: Ctx, lm, r: dict, what: str, clean: str, corrupt: str, words: dict) -> None:
    patched, c0, c1 = r["patched"], r["clean"], r["corrupted"]
    p = plan.patch_plan(patched, c0, c1, (what, pt.WHATS[what]), (lm.n_heads, lm.n_kv_heads), TOP_HEADS)
    st.markdown(f"Metric: **{plain(r['metric'])}**.")
    (la, h, _), cols = p.best, st.columns(3)
    cols[0].metric("clean", f"{c0:.4f}")
    cols[1].metric("corrupted", f"{c1:.4f}")
    cols[2].metric(f"patched, best head (L{la} H{h})", f"{patched[la, h]:.4f}")
    layer_head_map(p.recovered.astype(np.float32), p.title, "recovered", "patch_map", ctx.image_format,
                   on_select=lambda: _open_head(p.group), diverging=True)  # fmt: skip
    tokens = tokens_of(ctx.config, clean)
    roles = {la: get_role_labels(Selection(ctx.config, clean, None, lm.parts[0], la), tokens) for la, _, _ in p.top}
    st.markdown(plan.top_lines(p, patched, roles))
    a = _attribution(ctx, clean, corrupt, words, what)
    st.caption(plan.attribution_note(plan.recovered_of(a["patched"], c0, c1), p.recovered, p.unit))
    rows = plan.patch_rows(patched, p.recovered, c0, c1)
    downloads("patching", csv_data=csv_bytes(["layer", "head", "patched", "recovered", "clean", "corrupted"], rows))
    _by_position(ctx, lm, what, clean, corrupt, words, p.best[:2], r["tokens"])
    if what == "out":
        _path(ctx, lm, clean, corrupt, words, p.best)


def _by_position(ctx: Ctx, lm, what: str, clean: str, corrupt: str, words: dict, top, tokens) -> None:
    """One head patched at one position at a time (a button: one run per token)."""
    with st.expander("By position: one head, one position at a time"):
        L, G = lm.n_layers(lm.parts[0]), pt.heads_of(lm, what)
        left, right = st.columns(2)
        la = int(left.selectbox("Layer", list(range(L)), index=top[0], key="patch_pos_layer"))
        h = int(right.selectbox("Head", list(range(G)), index=top[1], key="patch_pos_head"))
        if not st.button(f"Patch layer {la}, head {h} at each of {len(tokens)} positions", key="patch_pos_go"):
            return
        pair = pt.prepare(model_of(ctx.config), clean, corrupt, **words)
        rec = pair.recovered(pt.patch_positions(pair, la, h, what))  # [pos]
        title = f"Recovered by patching layer {la}, head {h} ({pt.WHATS[what]}) at one position"
        plot(token_bars(tokens, {"recovered": rec}, title), "patch_pos", ctx.image_format)


def _path(ctx: Ctx, lm, clean: str, corrupt: str, words: dict, top) -> None:
    """Path patching from one sender head to the q, k or v of every later head (a button)."""
    with st.expander("Path patching: from a sender head to the heads that read it"):
        st.caption(
            "The sender's clean output reaches each later head only through the chosen input: the later heads' "
            "outputs are frozen at the corrupted run while the receivers' inputs are recorded, then each receiver "
            "alone gets its recorded input in a corrupted run (Wang et al. 2022; MLPs are recomputed)."
        )
        L = lm.n_layers(lm.parts[0])
        cols = st.columns(3)
        first = plan.sender(top, L)
        la = int(cols[0].selectbox("Sender layer", list(range(L - 1)), index=first[0], key="path_layer"))
        h = int(cols[1].selectbox("Sender head", list(range(lm.n_heads)), index=first[1], key="path_head"))
        into = cols[2].radio("Through the receivers'", ["q", "k", "v"], format_func=pt.WHATS.get, key="path_what",
                             horizontal=True)  # fmt: skip
        if not st.button(f"Path patch from layer {la}, head {h}", key="path_go"):
            return
        from mha_viz.studies.path_patching import path_patch

        pair = pt.prepare(model_of(ctx.config), clean, corrupt, **words)
        bar, progress = progress_bar()
        rec = pair.recovered(path_patch(pair, (la, h), into, progress))  # [L, G], NaN up to the sender's layer
        bar.empty()
        title = plan.path_title((into, pt.WHATS[into]), (lm.n_heads, lm.n_kv_heads), (la, h))
        layer_head_map(rec.astype(np.float32), title, "recovered", "path_map", ctx.image_format, diverging=True)
        best = plan.ranked(np.nan_to_num(rec), TOP_HEADS)
        st.markdown("Receivers by |recovered|: " + ", ".join(f"layer {a}, head {b} ({v:+.3f})" for a, b, v in best))
