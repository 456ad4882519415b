"""What every view is handed (Ctx), and what a view says when this model or part has nothing for it.

The one opened head every view follows is in opened.py; choice widgets checked against their options and chart
clicks in choices.py."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from mha_viz.config import PART_NAMES, Config
from mha_viz.selection import Selection
from mha_viz.trace import AttentionTrace
from mha_viz.ui.cache import Base, get_all_patterns, get_trace
from mha_viz.ui.common import Shown, trace_shown
from mha_viz.ui.registry import View
from mha_viz.ui.sidebar import Controls


@dataclass(frozen=True)
class Ctx:
    """Everything a view needs: the sidebar's selection (settings, text, decoder text, attention kind, layer: one
    value, the key of the caches it is handed to), the other controls (``c``: display switches), and what the
    selection holds (``base``)."""

    c: Controls
    sel: Selection
    base: Base

    @property
    def config(self) -> Config:
        return self.sel.config

    @property
    def text(self) -> str:
        return self.sel.text

    @property
    def target(self) -> str | None:
        return self.sel.target

    @property
    def part(self) -> str:
        return self.base.part  # the selection's part as the model names it ("encoder" when it was left out)

    @property
    def layer(self) -> int:
        return int(self.sel.layer or 0)

    @property
    def image_format(self) -> str:
        return self.c.image_format

    @property
    def hide_special(self) -> bool:
        return self.c.hide_special

    @property
    def special(self) -> tuple[bool, ...]:
        return self.base.tokens.special

    @property
    def key_special(self) -> tuple[bool, ...]:
        return self.base.key_tokens.special

    @property
    def where(self) -> str:
        """ "layer 3" (with the attention kind for encoder-decoder models)."""
        kind = f"{PART_NAMES[self.part]}, " if len(self.base.parts) > 1 else ""
        return f"{kind}layer {self.layer}"

    def trace(self, layer: int | None = None, x: bool = True, **edits) -> AttentionTrace:
        """The layer's trace (this layer by default) with the sidebar's settings plus ``edits``. ``x`` False: a view
        that shows no X (nor pre-rotary q, k) spares a long text's pass to this layer (cache.get_trace)."""
        sel = self.sel if layer is None else self.sel.at(layer=layer)
        return get_trace(sel.edited(**edits), x)

    @property
    def hidden(self) -> tuple[bool, ...]:
        """Query-side tokens that "hide" removes: [CLS]/[SEP]-like special tokens, or a decoder's first token."""
        if self.base.causal and self.part != "cross":
            return tuple(i == 0 for i in range(len(self.base.tokens.ids)))
        return self.special

    @property
    def key_hidden(self) -> tuple[bool, ...]:
        if self.base.causal and self.part != "cross":
            return tuple(i == 0 for i in range(len(self.base.key_tokens.ids)))
        return self.key_special

    def hiding_not_applied(self, why: str) -> None:
        """Say so when "hide" is on but this view shows every token (and why)."""
        if self.hide_special:
            st.caption(f"Hiding tokens does not apply here: {why}")

    @property
    def measure(self) -> str:
        """What the pattern views draw: "weight" or "contribution" (the sidebar's switch)."""
        return self.c.measure

    @property
    def value_name(self) -> str:
        """The hover name of a drawn pattern's values."""
        return "contribution share" if self.measure == "contribution" else "weight"

    def shown(self, trace: AttentionTrace, follow_measure: bool = False) -> Shown:
        """The trace ready to draw: its weights, or (``follow_measure`` and the switch on) its contributions."""
        measure = self.measure if follow_measure else "weight"
        return trace_shown(trace, self.hidden, self.hide_special, self.key_hidden, measure)

    def patterns(self, text: str | None = None, follow_measure: bool = False) -> np.ndarray:
        """Every layer's pattern for ``text`` (the sidebar's by default): weights, or (``follow_measure`` and the
        switch on) contribution shares. Shapes: [L, H, n_q, n_k]."""
        measure = self.measure if follow_measure else "weight"
        return get_all_patterns(self.sel.with_text(text) if text else self.sel, measure)

    def measure_note(self) -> None:
        """Say what is drawn when the contribution switch is on."""
        if self.measure == "contribution":
            st.caption(
                "Drawn: contributions ‖α_ij · v_j W_O^h‖ (what key j actually sends to query i through the head, "
                "after W^O; Kobayashi et al. 2020, “Attention is Not Only a Weight”), each row divided by its sum. "
                "Turn the switch off in the sidebar for the weights α."
            )


def needs_pretrained(ctx: Ctx, self_attention: bool = True) -> bool:
    """Say why a view that compares the tokens of one text has nothing to show on cross-attention (and return
    True). Own weights pass: a view that cannot run on them says why through its registry entry (unmet)."""
    if self_attention and ctx.part == "cross":
        st.info(
            "This view compares tokens of one text with each other; choose encoder or decoder self-attention in the "
            "sidebar (cross-attention relates two different texts)."
        )
        return True
    return False


def unmet(view: View, ctx: Ctx) -> bool:
    """Say why ``view`` cannot run on this model and part (its registry needs), and return True; else False."""
    if "pretrained" in view.needs and ctx.base.own:
        st.info(f"{view.name} {view.own}. Pick the bundled model or a Hugging Face one in the sidebar.")
        return True
    return needs_pretrained(ctx, self_attention="self-attention" in view.needs)
