"""Issue 36 §6, a tab switch's cost: Two sentences' charts (the moved-weight map, where the weight went, the shared
keys, the shown head's pattern in each sentence) are built once per set of values and kept finished
(ui.common.cached_figure): a rerun or a switch back to the tab draws them from the cache, not through plotly again,
and the charts sent are the same. Its change map (in an expander) is drawn only while the expander is open: a
closed expander's chart is still drawn by the browser."""

from __future__ import annotations

import numpy as np
from apptest_helpers import array, assert_clean, heatmaps, new_app, specs

from mha_viz.ui.common import cached_figure


def test_two_sentences_charts_are_built_once_and_drawn_again_from_the_cache(minilm) -> None:
    cache = cached_figure.cache
    cache.clear()
    at = new_app(view="Two sentences")
    at.run()
    assert_clean(at)
    first = specs(at)
    assert len(first) == 3  # the change map waits for its expander; the two patterns are one chart, the bars one
    kept = cache.total
    assert kept > 0  # the charts went into the cache (before: built through plotly on every run, none kept)
    at.run()  # the same page again (a rerun; a switch back to the tab is the same run)
    assert_clean(at)
    assert cache.total == kept  # nothing built anew: every chart was a hit
    assert specs(at) == first  # the very same charts
    at.selectbox(key="two_head").set_value((at.selectbox(key="two_head").value + 1) % 12).run()  # another head
    assert_clean(at)
    assert cache.total > kept  # its charts are new ones
    assert specs(at) != first


def test_two_sentences_change_map_only_while_its_expander_is_open(minilm) -> None:
    at = new_app(view="Two sentences")
    at.run()
    assert_clean(at)
    titles = [(s["layout"].get("title") or {}).get("text", "") for s in specs(at)]  # (the patterns' pair: none)
    assert not any("changes where it looks" in t for t in titles)  # closed: no chart for the browser to draw
    assert [e.label for e in at.expander if e.label.startswith("Another measure")]  # the expander is there
    at.session_state["two_change_open"] = True  # what opening it sets (it reruns the page)
    at.run()
    assert_clean(at)
    (change,) = [s for s in specs(at) if "changes where it looks" in (s["layout"].get("title") or {}).get("text", "")]
    z = array(heatmaps(change)[0]["z"])  # [layers, heads]: total variation of the focus row, in [0, 1]
    assert z.shape == (6, 12) and np.all((z >= 0) & (z <= 1)) and z.max() > 0.3
    assert len(specs(at)) == 4
