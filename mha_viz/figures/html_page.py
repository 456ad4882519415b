"""One self-contained HTML page from figures: plotly.js inlined once, the text and settings written on it.

No external URL (no CDN script, no MathJax, no font link): the page opens offline from a file. The text and
every setting are untrusted and HTML-escaped; figure labels were already escaped by figures.common.safe.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import plotly.io as pio

from mha_viz.trace import MhaVizError

STYLE = (
    "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
    "dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:600}"
    "blockquote{white-space:pre-wrap;border-left:3px solid #ccc;margin:0;padding:.3em 1em}"
)


def page(figures: Sequence[go.Figure | dict], title: str, settings: Mapping[str, str], text: str) -> str:
    """The HTML document: title, the text, the settings (model, layer, …) as a list, then every figure."""
    if not figures:
        raise MhaVizError("nothing to export: the view drew no figure")
    parts = []
    for i, fig in enumerate(figures):
        parts.append(
            pio.to_html(fig, include_plotlyjs=i == 0, include_mathjax=False, full_html=False,
                        config={"displaylogo": False}, default_width="100%", validate=False)
        )  # fmt: skip
    rows = "".join(f"<dt>{html.escape(str(k))}</dt><dd>{html.escape(str(v))}</dd>" for k, v in settings.items())
    esc = html.escape(title)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc}</title><style>{STYLE}</style></head><body>"
        f"<h1>{esc}</h1><h2>Text</h2><blockquote>{html.escape(text)}</blockquote>"
        f"<h2>Settings</h2><dl>{rows}</dl>"
        + "".join(f'<div class="figure">{p}</div>' for p in parts)
        + "<p><small>Made with mha-viz: every matrix is what the model computed.</small></p></body></html>\n"
    )
