"""Figures kept finished (ui.common.cached_figure): a hit is the very figure a fresh build gives, and a change
of any input (values, labels, title, settings) builds anew."""

from __future__ import annotations

import numpy as np

from mha_viz.figures import matrix_heatmap
from mha_viz.figures.finish import finish
from mha_viz.ui.common import cached_figure


def test_a_hit_is_the_fresh_figure_and_any_change_rebuilds() -> None:
    rng = np.random.default_rng(5)
    z = rng.random((6, 7)).astype(np.float32)
    x, y = tuple(f"k<{i}>" for i in range(7)), tuple(f"q&{i}" for i in range(6))
    first = cached_figure("matrix_heatmap", z, x, y, "t <b>", value_name="weight", attention=True)
    assert cached_figure("matrix_heatmap", z.copy(), x, y, "t <b>", value_name="weight", attention=True) is first
    fresh = finish(matrix_heatmap(z, x, y, "t <b>", value_name="weight", attention=True))
    assert _same(first, fresh)
    assert first["data"][0]["x"] == [f"k&lt;{i}&gt;" for i in range(7)]  # user text escaped, as safe() does
    assert first["layout"]["title"]["text"] == "t &lt;b&gt;"
    z2 = z.copy()
    z2[3, 4] += 1e-6  # one value changed: another figure
    for args, kwargs in (
        ((z2, x, y, "t <b>"), {"value_name": "weight", "attention": True}),
        ((z, x, y[::-1], "t <b>"), {"value_name": "weight", "attention": True}),
        ((z, x, y, "t <b>"), {"value_name": "share", "attention": True}),
        ((z, x, y, "t <b>"), {"value_name": "weight", "attention": False}),
    ):
        assert cached_figure("matrix_heatmap", *args, **kwargs) is not first


def _same(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
    return a == b


def test_masked_scores_escape_labels_once() -> None:
    from mha_viz.figures import scores_heatmap

    z = np.array([[0.5, -np.inf], [0.1, 0.2]])
    fig = scores_heatmap(z, ["a&b", "<c>"], ["a&b", "<c>"], "T <x>")
    assert tuple(fig.data[0].x) == ("a&amp;b", "&lt;c&gt;") and fig.layout.title.text == "T &lt;x&gt;"
    assert tuple(fig.layout.xaxis.ticktext) == ("a&amp;b", "&lt;c&gt;")
    assert fig.data[0].text[0][1] == "−∞ (masked)"
