"""The KV cache figures (figures/kv.py), as the screenshots of issue 39 checked them: the curve marks the chosen point,
policies whose lines coincide stay apart by dash and marker, a K/V sharing point far above the evictions does not
flatten them, the strips thin their token labels at a 1,000-token text and name their axes, and a signed per-head map
is diverging around 0 (a non-negative one starts at 0)."""

from __future__ import annotations

import math

import numpy as np

from mha_viz.figures.common import LABEL_PX
from mha_viz.figures.kv import budget_curve, head_map, keep_strips

CURVES = {  # two policies with the same points (SnapKV and Ada-KV under SnapKV's window do this)
    "SnapKV": ([0.1, 0.25, 0.5, 0.75], [13.5, 33.8, 67.5, 101.3], [0.135, 0.089, 0.049, 0.013]),
    "Ada-KV": ([0.1, 0.25, 0.5, 0.75], [13.5, 33.8, 67.5, 101.3], [0.135, 0.089, 0.049, 0.013]),
    "H2O": ([0.1, 0.25, 0.5, 0.75], [13.5, 33.8, 67.5, 101.3], [0.128, 0.063, 0.024, 0.012]),
}
CHOSEN = ("H2O at 25%", 33.8, 0.063)


def test_the_curve_marks_the_chosen_point() -> None:
    fig = budget_curve(CURVES, [], CHOSEN, 135.0)
    star = fig.data[-1]
    assert star.name == "chosen: H2O at 25%" and star.marker.symbol == "star"
    assert (list(star.x), list(star.y)) == ([33.8], [0.063])
    assert fig.data[-2].name == "full cache" and list(fig.data[-2].y) == [0.0]


def test_coinciding_policies_stay_visible() -> None:
    fig = budget_curve(CURVES, [], CHOSEN, 135.0)
    snap, ada = fig.data[0], fig.data[1]
    assert list(snap.y) == list(ada.y)  # the same line: only its dash and markers tell them apart
    assert snap.line.dash != ada.line.dash and snap.marker.symbol != ada.marker.symbol


def test_a_far_sharing_point_leaves_the_evictions_readable() -> None:
    fig = budget_curve(CURVES, [("share→1 K/V (Variants)", 45.0, 6.2835)], CHOSEN, 135.0)
    share = fig.data[3]
    lo, hi = fig.layout.yaxis.range
    assert lo < 0.0 and 0.135 < hi < 0.5  # the evictions fill the plot, not its bottom 2 %
    assert lo <= share.y[0] <= hi and share.marker.symbol == "triangle-up"
    assert list(share.customdata) == [6.2835] and "+6.28 nats, off the scale" in share.text[0]
    assert "%{customdata" in share.hovertemplate  # the hover gives the true value
    near = budget_curve(CURVES, [("share→1 K/V (Variants)", 45.0, 0.3)], CHOSEN, 135.0)
    assert near.layout.yaxis.range is None and list(near.data[3].y) == [0.3] and near.data[3].text is None


def test_strip_ticks_are_thinned_at_a_long_text() -> None:
    p = 750  # the prefix of a 1,000-token text
    keep = np.zeros((30, 3, p), dtype=bool)  # [L, kv, P]
    keep[..., :4] = keep[..., -100:] = True
    labels = [" " * 30 + "GNU"] + [f"tok{i}" for i in range(1, p)]  # GPL-3 opens with a run of spaces
    fig = keep_strips(keep, labels, "StreamingLLM at 25%")
    shown = list(fig.layout.xaxis.ticktext)
    room = 900 * abs(math.sin(math.radians(fig.layout.xaxis.tickangle)))
    assert 10 < len(shown) <= room / LABEL_PX and len(set(shown)) == len(shown)
    step = math.ceil(p * LABEL_PX / room)  # every step-th key is labelled, at its position
    assert step > 1 and shown[1] == f"{step}: tok{step}"
    assert shown[0] == "0: " + " " * 10 + "…" and fig.layout.xaxis.tickvals[0] == "0: " + labels[0]  # cut, named whole
    assert fig.layout.xaxis.title.text.startswith("prefix key") and fig.layout.yaxis.title.text.startswith("layer")
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), keep.reshape(90, p).astype(np.float32))


def test_a_signed_head_map_is_diverging_around_zero() -> None:
    signed = head_map(np.array([[0.03, -0.01, 0.0], [0.0, 0.002, -0.004]]), "restored", "nats", "kv")
    assert signed.data[0].zmid == 0.0 and signed.data[0].reversescale
    assert signed.layout.xaxis.title.text == "K/V head" and signed.layout.yaxis.title.text == "layer"
    mass = head_map(np.array([[0.4, 0.1], [0.2, 0.0]]), "lost", "lost mass")
    assert mass.data[0].zmin == 0 and mass.data[0].zmid is None
    assert mass.layout.xaxis.title.text == "query head"
