"""Step by step's eleven matrices (the seed sentence's shapes, MiniLM: 15 tokens, d_model 384, d_k 32) drawn as
the tab drew them before (six charts: five pairs and one alone) or as it draws them now (one stacked chart,
figures.stack), on a bare Streamlit page. bench_step_charts.py times a redraw of each in Chromium, in the same run."""

import numpy as np
import streamlit as st

from mha_viz.figures.finish import AsBuilt, finish
from mha_viz.figures.heatmap import in_pairs, matrix_pair, matrix_spec
from mha_viz.figures.stack import stacked

layout = st.selectbox("Layout", ["six charts", "one chart"], key="layout")
seed = st.selectbox("Values", list(range(6)), key="values")
rng = np.random.default_rng(seed)
tok = [f"t{i}" for i in range(15)]
shapes = [
    (384, None, True),
    (32, None, True),
    (32, None, True),
    (32, None, True),
    (15, tok, True),
    (15, tok, True),
    (15, tok, True),
    (15, tok, False),
    (32, None, True),
    (384, None, True),
    (384, None, True),
]
specs = [
    matrix_spec(rng.normal(size=(15, w)).astype(np.float32), x, tok, f"{i + 1}. matrix {i + 1}   [15 × {w}]",
                diverging=signed, value_name=f"m{i}", attention=not signed, height=380, title_chars=54)
    for i, (w, x, signed) in enumerate(shapes)
]  # fmt: skip
rows = [finish(fig if pair else matrix_pair(fig, None)) for _, fig, pair in in_pairs(specs)]
charts = [stacked(rows)] if layout == "one chart" else rows
for j, fig in enumerate(charts):
    st.plotly_chart(AsBuilt(fig), key=f"step_{layout}_{j}", width="stretch", theme=None)
