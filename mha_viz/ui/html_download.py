"""The "Download this view (.html)" button: the figures a view drew, as one self-contained page."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only figures/ imports plotly
    import plotly.graph_objects as go

import dataclasses
import re

import streamlit as st

from mha_viz.config import Config
from mha_viz.figures.html_page import page
from mha_viz.ui.context import Ctx

SKIP = ("weights_file", "model")  # bytes of an uploaded file; the model is written by name already


def view_settings(name: str, ctx: Ctx) -> dict[str, str]:
    """What the page says it shows: the view, model, attention kind, layer and every sidebar setting that is
    not at its default (from ctx.config), plus the display switches (ctx.c)."""
    out = {"view": name, "model": ctx.base.model_name, "attention": ctx.where}
    default = Config()
    for f in dataclasses.fields(Config):
        value = getattr(ctx.config, f.name)
        if f.name not in SKIP and value != getattr(default, f.name):
            out[f.name] = str(value)
    if ctx.config.weights_file:
        out["weights"] = "an uploaded .safetensors file"
    if ctx.target:
        out["target text"] = ctx.target
    out |= {"measure": ctx.measure, "hide special tokens": str(ctx.hide_special)}
    return out


def html_button(name: str, ctx: Ctx, figures: dict[str, go.Figure | dict]) -> None:
    """A download button for the figures the view drew, by chart key (nothing when it drew none); the page is
    built on click, from the dict as it is then (a fragment's rerun may have replaced some figures)."""
    if not figures:
        return
    settings = view_settings(name, ctx)
    text = ctx.text
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "view"
    st.download_button(
        "Download this view (.html)",
        lambda: page(list(figures.values()), f"mha-viz · {name}", settings, text).encode("utf-8"),
        file_name=f"mha-viz-{slug}.html",
        mime="text/html",
        key=f"dl-html-{slug}",
        help="One file with every figure of this view, interactive and offline (plotly.js inside), "
        "with the text and settings written on it.",
    )
