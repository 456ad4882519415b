"""The one opened head, shared by every view: its layer, head and focus token, in the session and in the link.

A head opened anywhere (a grid cell, a map, a ranking's Open, a view's own picker) is the head every view shows
next; a new model opens its own found head."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import streamlit as st
from streamlit.errors import StreamlitAPIException

from mha_viz.ui.choices import URL_LABELS, valid_choice, valid_choices
from mha_viz.ui.found import Found, found_head
from mha_viz.ui.sidebar import IGNORED, SOURCES, Controls, plain

if TYPE_CHECKING:
    from mha_viz.ui.context import Ctx


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
            st.query_params[key] = URL_LABELS.get(key, str)(value)


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
    labels = [URL_LABELS["head"](i) for i in range(n_heads)]
    if link in labels:
        return labels.index(link)
    if default is not None:
        return default
    found = found_head(ctx.sel)
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
    options, label = list(range(n_heads)), URL_LABELS.get(key, str)
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
                st.query_params["head"] = URL_LABELS["head"](head)
        st.session_state[mark] = (ctx.layer, head)
    elif st.session_state.get(mark) != (ctx.layer, head):
        st.session_state[key] = wrap(head)
        if layer_key is not None:
            st.session_state[layer_key] = wrap(ctx.layer)
        st.session_state[mark] = (ctx.layer, head)
    _check(key, options, [head] if many else head, many)
    if "head" in st.session_state and st.query_params.get("head") != URL_LABELS["head"](head):
        with contextlib.suppress(StreamlitAPIException):  # still bound to the Heads tab's picker (the run after it)
            st.query_params["head"] = URL_LABELS["head"](head)  # the link names the opened head in every view
    _link(key, label, many)
    if layer_key is not None:
        _check(layer_key, list(range(ctx.base.n_layers)), wrap(ctx.layer), many)
        _link(layer_key, URL_LABELS.get(layer_key, str), many)
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
    for key, value in (("layer", str(layer)), ("head", URL_LABELS["head"](head))):
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


WHY_KEYS = "_why_open_keys"  # session_state: the (key, second key) a "Why?" link asks the Why? tab for, once


def open_why(layer: int, head: int, query: str, key: str | None = None, versus: str | None = None) -> None:
    """Open the Why? tab on a head, its query token (the focus token) and a key against a second key (None: the
    tab's defaults, the row's top two keys), link included."""
    if key is not None:
        st.session_state[WHY_KEYS] = (key, versus)
    set_linked(layer=int(layer), head=int(head), focus=query, view="Why?")


def why_link(
    place: object, widget: str, layer: int, head: int, query: str, key: str, versus: str | None = None
) -> None:
    """A "Why?" button in ``place`` that opens the Why? tab on this head, query and key (and second key). The whole
    page reruns after the click: a button inside a fragment would otherwise redraw the fragment only."""
    says = f"why “{plain(query)}” looks at “{plain(key)}” here: its score split by where its query and key came from"
    if place.button("Why?", key=widget, help=says, on_click=open_why, args=(layer, head, query, key, versus)):
        st.rerun()
