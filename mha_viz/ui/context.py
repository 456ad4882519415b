"""What every view is handed (Ctx), and the small helpers the views share about widgets and clicks."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import streamlit as st
from streamlit.errors import StreamlitAPIException

from mha_viz.config import PART_NAMES, Config
from mha_viz.trace import AttentionTrace
from mha_viz.ui.cache import Base, get_all_patterns, get_trace
from mha_viz.ui.common import Shown, trace_shown
from mha_viz.ui.found import Found, found_head
from mha_viz.ui.registry import View
from mha_viz.ui.sidebar import IGNORED, SOURCES, Controls, note_ignored, plain, summarize, url_value


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


# How choice widgets show their options (and so write them into the URL), where not str(option).
_URL_LABELS: dict[str, Callable[[object], str]] = {
    "head": lambda i: f"head {i}",
    "step_head": lambda j: f"head {j}",
    "lesson_head": lambda j: f"head {j}",
    "circ_head": lambda j: f"head {j}",
    "scale_head": lambda j: f"head {j}",
    "ablate": lambda j: f"head {j}",
}


def set_linked(**values: object) -> None:
    """Set URL-bound widgets' values from a callback (a click), in the session and in the link.

    Streamlit writes a programmatic value into the URL itself only when the widget was drawn in the run before;
    a widget of another tab (the Heads tab's "Open head" after a click in Overview) would open with the value
    but leave it out of the link. So the link gets it here; a parameter whose widget is drawn (bound) may not
    be written directly, and Streamlit keeps that one in step. A head goes with its layer: a link that names a
    head but no layer opens layer 0 (sidebar.layer_control), while the layer first shown (the found head's)
    is not in the link until it is set."""
    if "head" in values and "layer" not in values and "layer" in st.session_state:
        values = {"layer": st.session_state["layer"], **values}
    if "focus" in values:
        st.session_state[_FOCUS] = values["focus"]
    for key, value in values.items():
        st.session_state[key] = value
        with contextlib.suppress(StreamlitAPIException):  # bound to a drawn widget: Streamlit writes that one
            st.query_params[key] = _URL_LABELS.get(key, str)(value)


def keep_layer() -> None:
    """An on_change for the Heads tab's "Open head" picker: the link gets the layer along with the head (see
    set_linked). The picker is in a fragment, whose rerun does not draw the sidebar's layer picker (and so
    does not write its value into the link): while the link has no layer, the whole page reruns."""
    layer = st.session_state.get("layer")
    if layer and "layer" not in st.query_params:
        set_linked(layer=layer)
        st.rerun()


def open_head(layer: int, head: int, view: str | None = "Heads") -> None:
    """Open a head in the Heads tab (or, with ``view`` None, only choose the layer and head), link included."""
    values: dict[str, object] = {"layer": int(layer), "head": int(head)}
    if view is not None:
        values["view"] = view
    set_linked(**values)


# The opened head, shared by every view: the layer is the sidebar's "layer", the head is the Heads tab's "head" (bound
# to the URL as head=head N; Streamlit keeps a bound widget's value while its tab is closed), and the focus token is
# its "focus". A view with its own head picker follows it (follow_head); its choice becomes the opened head.
_SYNCED = "_opened_synced_"  # + a picker's key: the (layer, head) that picker last took from the opened head
_MODEL = "_opened_model"  # the model whose head is opened: a new one opens its own found head (follow_model)
_FOCUS = "_opened_focus"  # the focus token last chosen (a grid click, a focus picker), which other views follow


def opened_head(ctx: Ctx, n_heads: int, default: int | None = None) -> int:
    """The opened head: the one chosen or opened anywhere in this session, else the link's head=, else ``default``
    (a view's own first choice), else the found head ("it" → "animal") on its layer and head 0 on the others."""
    value = st.session_state.get("head")
    if isinstance(value, int) and 0 <= value < n_heads:
        return value
    link = st.query_params.get("head")
    labels = [_URL_LABELS["head"](i) for i in range(n_heads)]
    if link in labels:
        return labels.index(link)
    if default is not None:
        return default
    found = found_head(ctx.config, ctx.c.text, ctx.target, ctx.part)
    return found.head if found is not None and found.layer == ctx.layer and found.head < n_heads else 0


def follow_head(ctx: Ctx, key: str, n_heads: int, layer_key: str | None = None, many: bool = False,
                default: int | None = None) -> Callable[[], None]:  # fmt: skip
    """Before a view draws its own head picker ``key``: give it the opened head whenever that changed since the
    picker last took it (and on its first draw), so a head opened anywhere is the head every view shows next.
    ``layer_key``: the view's own layer picker, which takes the opened layer the same way; ``many``: a multiselect
    (it gets [head], [layer]); ``default``: see opened_head. A link that names the picker's own key (an older link:
    ?step_head=head 3) wins on the picker's first draw, and a single head from it becomes the opened head. Returns
    the picker's on_change, which makes its choice the opened head (and layer)."""
    mark = _SYNCED + key
    head = opened_head(ctx, n_heads, default)
    wrap = (lambda v: [v]) if many else (lambda v: v)
    options, label = list(range(n_heads)), _URL_LABELS.get(key, str)
    if key in st.query_params and key not in st.session_state and mark not in st.session_state:  # the link's own
        given = [v for v in st.query_params.get_all(key) if v in [label(i) for i in options]]
        good = [options[[label(i) for i in options].index(v)] for v in (given if many else given[-1:])]
        _check(key, options, [head] if many else head, many)  # what is not a head is reported
        if not good:
            st.session_state[key] = wrap(head)
        elif len(good) == 1 and good[0] != head and (layer_key is None or _link_layer(layer_key) in (None, ctx.layer)):
            head = good[0]  # the opened head from now on (not set_linked: the sidebar's layer is drawn in this run)
            st.session_state["head"] = head
            with contextlib.suppress(StreamlitAPIException):  # bound: the Heads tab's picker is open
                st.query_params["head"] = _URL_LABELS["head"](head)
        st.session_state[mark] = (ctx.layer, head)
    elif st.session_state.get(mark) != (ctx.layer, head):
        st.session_state[key] = wrap(head)
        if layer_key is not None:
            st.session_state[layer_key] = wrap(ctx.layer)
        st.session_state[mark] = (ctx.layer, head)
    _check(key, options, [head] if many else head, many)
    if "head" in st.session_state and st.query_params.get("head") != _URL_LABELS["head"](head):
        with contextlib.suppress(StreamlitAPIException):  # still bound to the Heads tab's picker (the run after it)
            st.query_params["head"] = _URL_LABELS["head"](head)  # the link names the opened head in every view
    _link(key, label, many)
    if layer_key is not None:
        _check(layer_key, list(range(ctx.base.n_layers)), wrap(ctx.layer), many)
        _link(layer_key, _URL_LABELS.get(layer_key, str), many)
    return lambda: _take_head(key, layer_key, many)


def _link(key: str, label: Callable[[object], str], many: bool) -> None:
    """Put a picker's value into the link before its first draw: Streamlit leaves a value given through the session
    out of the link there (and in the run after the Heads tab, head= cannot be written yet: the picker's own key
    carries the opened head, read by follow_head as an older link is)."""
    value = st.session_state.get(key)
    if value is None or (many and not value):
        return
    labels = [label(v) for v in value] if many else [label(value)]
    if st.query_params.get_all(key) != labels:
        with contextlib.suppress(StreamlitAPIException):  # bound (drawn in the run before): Streamlit writes it
            st.query_params[key] = labels if many else labels[0]


def take_focus() -> None:
    """An on_change for the Heads tab's "Focus token" picker: the choice is the focus other views follow."""
    st.session_state[_FOCUS] = st.session_state.get("focus")


def follow_focus(key: str, tokens: list[str]) -> Callable[[], None]:
    """Before a view draws its own focus-token picker ``key``: a focus token chosen elsewhere since the picker last
    looked (a click on the Heads grid, the Heads tab's picker) becomes its value. Returns the picker's on_change,
    which makes its choice (one of ``tokens``) the focus everywhere."""
    mark = _SYNCED + key
    chosen = st.session_state.get(_FOCUS)
    if chosen is not None and st.session_state.get(mark) != chosen and chosen in tokens:
        st.session_state[key] = chosen
    st.session_state[mark] = chosen
    return lambda: _take_focus(key, tokens)


def _take_focus(key: str, tokens: list[str]) -> None:
    value = st.session_state.get(key)
    if value in tokens:
        set_linked(focus=value)
        st.session_state[_SYNCED + key] = value


def _check(key: str, options: list, default: object, many: bool) -> None:
    """valid_choice or valid_choices, once: a view that checked the link's value itself has said so already."""
    if key in st.session_state.get(IGNORED, {}):
        return
    (valid_choices if many else valid_choice)(key, options, default)  # type: ignore[arg-type]


def follow_model(c: Controls, model_name: str, n_layers: int, find: Callable[[], Found | None]) -> None:
    """Before the sidebar's layer picker is drawn: when the model changed since the last run (the Model radio, the
    model id, the seed 000 button), open the new model's own found head (``find``; layer 0, head 0 where it has
    none) with a notice, never the layer and head of the model before."""
    model = (c.kind, c.config.model)
    before = st.session_state.get(_MODEL)
    st.session_state[_MODEL] = model
    if before is None or before == model:  # the first run keeps the link's layer and head
        return
    found = find()  # None for own weights
    layer, head = (found.layer, found.head) if found is not None and found.layer < n_layers else (0, 0)
    st.session_state["layer"] = layer
    st.session_state["head"] = head
    for key, value in (("layer", str(layer)), ("head", _URL_LABELS["head"](head))):
        with contextlib.suppress(StreamlitAPIException):  # bound to a drawn widget: Streamlit writes that one
            st.query_params[key] = value
    if found is not None:
        model_name = SOURCES[c.kind].removesuffix(" (bundled)") if c.kind in ("bundled", "smollm2") else model_name
        st.info(plain(f"Opened layer {layer}, head {head} of {model_name}: {found.why()}."))


def _link_layer(key: str) -> int | None:
    """The layer a link gives a view's own layer picker (its last value), if a whole number."""
    values = st.query_params.get_all(key)
    return int(values[-1]) if values and values[-1].isdigit() else None


def _take_head(key: str, layer_key: str | None, many: bool) -> None:
    """A view's head picker changed: its head (one head, for a multiselect) is the opened head from now on."""
    heads = st.session_state.get(key)
    heads = heads if many else [heads]
    if not heads or len(heads) != 1 or heads[0] is None:
        return
    values: dict[str, object] = {"head": int(heads[0])}
    if layer_key is not None:
        layers = st.session_state.get(layer_key)
        layers = layers if many else [layers]
        if layers and len(layers) == 1 and layers[0] is not None:
            values["layer"] = int(layers[0])
    set_linked(**values)
    st.session_state[_SYNCED + key] = (int(st.session_state.get("layer") or 0), values["head"])
    keep_layer()


def valid_choice(key: str, options: list, default, label: Callable[[object], str] | None = None) -> None:
    """Reset a keyed widget's stored value when it is not among the current options. A value the URL will
    give the widget is checked against the options' labels (``label``, or how _URL_LABELS shows them): one that
    is not among them is reported at the top of the page (and the widget shows ``default``)."""
    if key in st.session_state:
        if st.session_state[key] not in options:
            st.session_state[key] = default
        return
    value = url_value(key)
    if value is None:
        st.session_state[key] = default
        return
    label = label or _URL_LABELS.get(key, str)
    labels = [label(o) for o in options]
    if value not in labels:
        what = "this text's tokens are" if all(isinstance(o, str) for o in options) else "the choices are"
        note_ignored(key, value, f"{what} {summarize(labels)}; showing {label(default)}")
        st.session_state[key] = default


def valid_choices(key: str, options: list, default: list) -> None:  # default: the multiselect's own
    """valid_choice for a multiselect: stored values that are no longer options are dropped; the link's values
    (the parameter repeated, one per choice) that are not options are reported (Streamlit drops them itself, and
    shows ``default`` when none is left)."""
    if key in st.session_state:
        kept = [o for o in st.session_state[key] if o in options]
        if kept != st.session_state[key]:  # (only then: the widget's own default stays its default)
            st.session_state[key] = kept
        return
    if url_value(key) is None:
        return
    label = _URL_LABELS.get(key, str)
    labels = [label(o) for o in options]
    given = [v for v in st.query_params.get_all(key) if v != ""]  # "ablate=" alone: none chosen
    bad = [v for v in given if v not in labels]
    if bad:
        good = [v for v in given if v in labels] or [label(o) for o in default]
        why = f"the choices are {summarize(labels)}; showing {', '.join(good) or 'none'}"
        note_ignored(key, ", ".join(bad), why, drop=False)  # Streamlit drops them from the link


def clicked_points(chart_key: str) -> list[tuple[dict, list]]:
    """The points of a chart's selection event, each with its customdata as a plain list.

    Typed-array customdata arrives from the browser as {"0": a, "1": b}; lists stay lists.
    """
    sel = st.session_state.get(chart_key)
    points = getattr(getattr(sel, "selection", None), "points", None) or []
    out = []
    for p in points:
        custom = p.get("customdata")
        if isinstance(custom, dict):
            custom = [custom[k] for k in sorted(custom, key=lambda k: int(k))]
        out.append((p, list(custom) if isinstance(custom, list | tuple) else []))
    return out


def map_click(chart_key: str, show: Callable[[int, int], None]) -> Callable[[], None]:
    """A click callback for a layer × head map (customdata (layer, head, value)): ``show(layer, head)``."""

    def on_click() -> None:
        for _, custom in clicked_points(chart_key):
            if len(custom) >= 2:
                show(int(custom[0]), int(custom[1]))
                return

    return on_click


def forget(keys: tuple[str, ...]) -> None:
    """Let choice widgets fall back to their defaults (from a callback): each value becomes None, which no
    option is, so the view's valid_choice puts its default back before the widget is drawn, and Streamlit
    follows in the URL. A parameter bound to a drawn widget cannot be deleted directly (Streamlit raises)."""
    for key in keys:
        st.session_state[key] = None
        if key in st.query_params:
            with contextlib.suppress(StreamlitAPIException):  # bound: the widget's new value updates it
                del st.query_params[key]


def needs_pretrained(ctx: Ctx, self_attention: bool = True) -> bool:
    """Say why a view that looks across a pretrained model's layers has nothing to show here (and return True)."""
    if ctx.base.own:
        st.info(
            "This view looks across the layers of a pretrained model; pick the bundled model or a Hugging Face one."
        )
        return True
    if self_attention and ctx.part == "cross":
        st.info(
            "This view compares tokens of one text with each other; choose encoder or decoder self-attention in the "
            "sidebar (cross-attention relates two different texts)."
        )
        return True
    return False


def unmet(view: View, ctx: Ctx) -> bool:
    """Say why ``view`` cannot run on this model and part (its registry needs), and return True; else False."""
    if "pretrained" not in view.needs:
        return False
    return needs_pretrained(ctx, self_attention="self-attention" in view.needs)
