"""What every view is handed (Ctx), and what a view says when this model or part has nothing for it.

The one opened head every view follows is in opened.py; choice widgets checked against their options and chart
clicks in choices.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import streamlit as st

from mha_viz.config import PART_NAMES, Config
from mha_viz.trace import AttentionTrace
from mha_viz.ui.cache import Base, get_all_patterns, get_trace
from mha_viz.ui.common import Shown, trace_shown
from mha_viz.ui.registry import View
from mha_viz.ui.sidebar import Controls


@dataclass(frozen=True)
class Ctx:
    """Everything a view needs: the controls, the chosen attention kind and layer, and what they hold."""

    c: Controls
    layer: int
    part: str
    target: str | None
    base: Base

    @property
    def config(self) -> Config:
        return self.c.config

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
        config = dataclasses.replace(self.config, **edits) if edits else self.config
        return get_trace(config, self.c.text, self.target, self.part, self.layer if layer is None else layer, x)

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
        if self.c.hide_special:
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
        return trace_shown(trace, self.hidden, self.c.hide_special, self.key_hidden, measure)

    def patterns(self, text: str | None = None, follow_measure: bool = False) -> np.ndarray:
        """Every layer's pattern for ``text`` (the sidebar's by default): weights, or (``follow_measure`` and the
        switch on) contribution shares. Shapes: [L, H, n_q, n_k]."""
        measure = self.measure if follow_measure else "weight"
        return get_all_patterns(self.config, text or self.c.text, self.target, self.part, measure)

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
