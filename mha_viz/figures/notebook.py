"""Figures in a notebook with no network: a Plotly renderer that writes plotly.js into the notebook once (the first
figure shown) and never fetches it from a CDN (used by mha_viz.show, which calls offline() on import)."""

from __future__ import annotations

import plotly.io as pio
from plotly.io.base_renderers import HtmlRenderer

RENDERER = "mha_viz_offline"


class OfflineRenderer(HtmlRenderer):
    """text/html with plotly.js inlined once per kernel (when first activated) and no MathJax or CDN URL,
    plus application/vnd.plotly.v1+json, which JupyterLab and VS Code draw with their own bundled plotly.js."""

    def __init__(self) -> None:
        super().__init__(connected=False, global_init=True, include_plotlyjs=False)

    def to_mimebundle(self, fig_dict: dict) -> dict:
        html = pio.to_html(
            fig_dict, include_plotlyjs=False, include_mathjax=False, full_html=False, default_width="100%",
            default_height=525, validate=False, config={"displaylogo": False},
        )  # fmt: skip
        return {"application/vnd.plotly.v1+json": {"config": {"displaylogo": False}, **fig_dict}, "text/html": html}


def offline() -> None:
    """Make notebook figures render with no network: plotly.js is written into the notebook once (the first
    figure shown), never fetched from a CDN. Called on import; call it again if something changed the default."""
    if RENDERER not in pio.renderers:
        pio.renderers[RENDERER] = OfflineRenderer()
    pio.renderers.default = RENDERER
