"""Figures in a notebook with no network: a Plotly renderer that writes plotly.js into the notebook once (the first
figure shown) and never fetches it from a CDN (used by mha_viz.show, which calls offline() on import); and Figures,
several figures that a notebook shows as figures, not as the repr of a list."""

from __future__ import annotations

from typing import SupportsIndex

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


class Figures(list):
    """Several figures (mha_viz.show.steps): a list of plotly Figures that Jupyter and VS Code show one after another
    when it ends a cell (each through the renderer above), and whose repr is one short line, never the figures'
    data (a plain list printed ~27,000 characters of it)."""

    def __getitem__(self, i: SupportsIndex | slice) -> object:
        found = super().__getitem__(i)
        return Figures(found) if isinstance(i, slice) else found  # steps[:2] is still shown as figures

    def _ipython_display_(self) -> None:
        from IPython.display import display

        for fig in self:
            display(fig)

    def __repr__(self) -> str:
        titles = [str(getattr(getattr(fig.layout, "title", None), "text", None) or "untitled") for fig in self]
        shown = "; ".join(t if len(t) <= 40 else t[:39] + "…" for t in titles[:8])
        return f"<{len(self)} figures: {shown}{' …' if len(titles) > 8 else ''}>"


def offline() -> None:
    """Make notebook figures render with no network: plotly.js is written into the notebook once (the first
    figure shown), never fetched from a CDN. Called on import; call it again if something changed the default."""
    if RENDERER not in pio.renderers:
        pio.renderers[RENDERER] = OfflineRenderer()
    pio.renderers.default = RENDERER
