"""The Corpus tab (issue 26 §2): every head's role scores over many texts — the mean of a chosen score, its spread
across texts and how stable the head's label is — as layer × head maps (a click opens the head on one of its most
typical texts), and Clark et al. 2019's Figure 2 for the page's model: attention to [CLS], [SEP] and punctuation by
layer."""

from __future__ import annotations

import dataclasses

import numpy as np
import streamlit as st

from mha_viz.analysis.corpus_stats import CLARK_PAPER, STATS_COLUMNS, StatsTable
from mha_viz.analysis.plans import corpus as plan
from mha_viz.analysis.roles import SCORE_KEYS
from mha_viz.config import MAX_TEXT_CHARS
from mha_viz.figures import clark_lines, corpus_map
from mha_viz.pipeline import budget
from mha_viz.pipeline.pace import eta
from mha_viz.studies.corpus_run import CorpusRun
from mha_viz.ui.cache import model_of
from mha_viz.ui.choices import clicked_points
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx
from mha_viz.ui.corpus_source import Texts, choose_corpus, get_run, has_run
from mha_viz.ui.links import check_choice, plain
from mha_viz.ui.long_run import long_run
from mha_viz.ui.opened import open_head, set_linked
from mha_viz.ui.request import own_input, sizes

AUTO_CELLS = 16 * 72  # texts × heads that score by themselves (MiniLM: 16 texts, a few seconds); more on a button
MAPS = ("corpus_mean", "corpus_std", "corpus_label")


def _open(key: str, texts: tuple[str, ...], n_layers: int, n_heads: int) -> None:
    """A map click: open the head in Heads on its most typical text (a stats file has none: the page's text)."""
    for _, custom in clicked_points(key):  # customdata (layer, head, value, typical text or -1)
        if len(custom) < 4:
            continue
        layer, head, index = int(custom[0]), int(custom[1]), int(custom[3])
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            return  # a stats file of another model's shape: nothing to open
        if 0 <= index < len(texts) and len(texts[index]) <= MAX_TEXT_CHARS:
            set_linked(text=texts[index])
        open_head(layer, head)
        return


def _lengths(ctx: Ctx, texts: tuple[str, ...]) -> list[int]:
    """Each text's tokens on the page's model (at most the model's limit): what the run will hold and do."""
    lm = model_of(ctx.config)
    ids = lm.tokenizer(list(texts), truncation=True, max_length=lm.max_tokens)["input_ids"]
    return [max(1, len(i)) for i in ids]


def _run(ctx: Ctx, texts: Texts) -> CorpusRun | None:
    config, part = ctx.config, ctx.part
    if has_run(config, texts, part):
        return get_run(config, texts, part)
    n = len(texts.texts)
    lengths, s = _lengths(ctx, texts.texts), sizes("Corpus", ctx)
    need, secs = budget.corpus_estimate(s, lengths)  # the corpus's own texts, not the sidebar's (issue 35 §4.9)
    refused = plan.refusal(n, ctx.base.model_name, secs, budget.max_request_s())
    if refused:
        st.error(refused)
        return None
    longest = dataclasses.replace(s, n_q=max(lengths), n_k=max(lengths))
    heads = ctx.base.n_layers * ctx.base.n_heads

    def waiting() -> None:
        st.caption(f"{n:,} texts ({sum(lengths):,} tokens) × {heads} heads: {eta(secs)}. Press the button to "
                   "start (it shows its progress and can be cancelled), or use fewer texts.")  # fmt: skip

    key = f"corpus_go_{texts.digest}_{n}_{config.model_name}"
    with own_input("Corpus", ctx, longest, need=need, secs=secs, what=f"Scoring {n:,} texts"):
        return long_run(key, f"Score {n:,} texts", plan.starts_by_itself(n, heads, AUTO_CELLS), waiting,
                        lambda progress: get_run(config, texts, part, progress), secs, primary=True)  # fmt: skip


def corpus_view(ctx: Ctx) -> None:
    st.markdown(
        "**One sentence can mislead**: a head that looks “previous token” on one text may be broad on the next. "
        "Here every head is scored on every text of a corpus exactly as in *Head roles* (the same scores and "
        "labels; `mha-viz corpus` on the command line), and the maps show each score's **mean** over the texts, "
        "its **spread** (standard deviation across texts) and **label stability** (the share of texts on which "
        "the head gets its most frequent label). Click a cell to open that head in *Heads* on its most typical "
        "text (the one whose score is closest to the head's mean)."
    )
    source = choose_corpus()
    if source is None:
        return
    run = _run(ctx, source) if isinstance(source, Texts) else None
    if isinstance(source, Texts) and run is None:
        return
    table = run.table() if run is not None else source
    assert isinstance(table, StatsTable)
    _caption(ctx, run, source)
    _maps(ctx, table, run)
    if run is not None:
        _clark(ctx, run)
    downloads("corpus", csv_data=csv_bytes(STATS_COLUMNS, plan.stats_rows(table)))


def _caption(ctx: Ctx, run: CorpusRun | None, source: object) -> None:
    if run is None:
        st.caption(plan.caption(ctx.base.model_name, None, 0, 0, {}))
    else:
        st.caption(plan.caption(ctx.base.model_name, source.name, len(run.texts), run.sums.tokens, run.sums.skipped))


def _maps(ctx: Ctx, table: StatsTable, run: CorpusRun | None) -> None:
    check_choice("corpus_score", list(SCORE_KEYS), "prev")
    score = st.selectbox("Score", SCORE_KEYS, index=0, key="corpus_score", bind="query-params",
                         help="See Head roles for each score's definition.")  # fmt: skip
    n_layers, n_heads = table.shape
    typical = run.typical(score) if run is not None else np.full((n_layers, n_heads), -1)  # [L, H]
    texts = run.texts if run is not None else ()
    rows = st.columns(2), st.columns(2)
    for i, m in enumerate(plan.corpus_maps(table, score)):
        with rows[i // 2][i % 2]:
            fig = corpus_map(m.values, m.title, m.name, typical, m.labels, m.top)
            on = lambda key=MAPS[i]: _open(key, texts, ctx.base.n_layers, ctx.base.n_heads)
            plot(fig, MAPS[i], ctx.image_format, on_select=on)
    with rows[1][1]:
        lines, stable = plan.label_key(table)
        st.markdown("**Each head's most frequent label** (heads; their mean share of texts):")
        st.text(lines)
        st.caption(stable)
    if run is not None:
        top = " · ".join(f"{head}“{plain(text)}”" for head, text in plan.highest(table, score, typical, texts))
        st.caption(f"Highest mean {score}, with each head's most typical text: " + top)  # (texts: as typed)


def _clark(ctx: Ctx, run: CorpusRun) -> None:
    p = plan.clark_plan(run.clark_by_layer(), run.cls_name, run.sep_name, ctx.base.model_name)
    left, right = st.columns([3, 2])
    with left:
        plot(clark_lines(p.series, p.title), "corpus_clark", ctx.image_format)
    with right:
        st.markdown("**Clark et al. 2019, Figure 2, for this model.** Each point: the weight every query token "
                    "puts on the target, averaged over the query tokens, the layer's heads and the texts.")  # fmt: skip
        if p.note:
            st.caption(plain(p.note))
        st.caption("Punctuation: tokens made of punctuation only (the paper counts periods and commas).")
        st.markdown(f"**The paper** (for comparison): {CLARK_PAPER}")
    header = ["layer", *(f"to_{k}" for k in ("cls", "sep", "punct"))]
    right.download_button("Download Figure 2 data (.csv)", csv_bytes(header, p.rows), key="dl-csv-corpus-clark",
                          file_name="mha-viz-corpus-clark.csv", mime="text/csv", on_click="ignore")  # fmt: skip
