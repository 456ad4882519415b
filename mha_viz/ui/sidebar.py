"""Sidebar controls. Every control has a key and is bound to the URL, so a view can be shared."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from mha_viz.attention import available_devices, resolve_device
from mha_viz.config import (
    DEFAULT_MODEL,
    MAX_LONG_TEXT_CHARS,
    MAX_TEXT_CHARS,
    OWN,
    PART_NAMES,
    Config,
    hosted,
)
from mha_viz.models.sources import SMOLLM2_ABOUT, allowed_models
from mha_viz.selection import Selection
from mha_viz.ui.links import (  # noqa: F401 (re-exported for the views)
    IGNORED,
    check_bool,
    check_choice,
    check_int,
    check_text,
    note_ignored,
    plain,
    show_ignored,
    summarize,
    url_value,
)
from mha_viz.ui.own_controls import own_controls, weights_download
from mha_viz.ui.placement import placement_controls
from mha_viz.ui.registry import GROUP_OF, VIEW_GROUPS, VIEWS  # noqa: F401 (re-exported: the navigation)

DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"
EXAMPLES = (
    DEFAULT_TEXT,
    "The animal didn't cross the street because it was too wide",
    "humpty dumpty sat on",
    "The cat sat on the mat and the cat slept",
    "She gave him the book because he had asked for it",
)
SOURCES = {  # labels go in URLs
    "bundled": f"{DEFAULT_MODEL} (bundled)",
    "smollm2": "SmolLM2-135M (bundled)",
    "hub": "Hugging Face",
    "own": "Own weights",
}
SOURCE_NOTES = {
    "bundled": "Encoder (BERT): 6 layers × 12 heads, d_model 384, offline.",
    "smollm2": f"{SMOLLM2_ABOUT}. Decoder (LLaMA): 30 layers × 9 query heads sharing 3 K/V heads, rotary positions, "
    "d_model 576, offline.",
}
DEFAULT_TARGET = "Das Tier überquerte die Straße nicht, weil es zu müde war"
# every toggle's value on a new page (the widgets below and default_controls read these; nothing else repeats them)
TOGGLES = {"causal": False, "scaled": True, "hide_special": False, "contrib": False}
DEFAULT_DEVICE, DEFAULT_IMAGE = "auto", "png"
# the navigation (VIEW_GROUPS, VIEWS, GROUP_OF) comes from the one registry of views: mha_viz/ui/registry.py


TEXT_LABEL = "Text (Ctrl+Enter to apply)"  # a text area: Enter makes a new line


@dataclass(frozen=True)
class Controls:
    config: Config
    kind: str  # "bundled" | "smollm2" | "hub" | "own"
    text: str
    layer_slot: object  # sidebar container where the layer picker goes once the model is known
    causal: bool
    scaled: bool
    hide_special: bool
    image_format: str
    mask_slot: object = None  # sidebar container for the mask toggles (see mask_controls)
    measure: str = "weight"  # "weight" | "contribution" (norms.MEASURES): what the pattern views draw


def _use_example() -> None:
    st.session_state["text"] = st.session_state["example"]


def load_seed_example() -> None:
    """Seed 000's worked example: own weights, d_model 512, 8 heads (d_k 64), "humpty dumpty sat on" as 4 words."""
    st.session_state.update(
        src="own",
        d_model=512,
        own_heads=8,
        seed=0,
        init="xavier",
        emb="random",
        own_tokens="words",
        text="humpty dumpty sat on",
        view="Step by step",
    )


def model_box_text() -> tuple[str, str, str]:
    """(label, placeholder, help) of the model box: in hosted mode, only what this server allows."""
    allowed = allowed_models()
    if allowed is not None:
        return (
            "Model id",
            "e.g. " + ", ".join(allowed[:4]),
            f"This server offers {DEFAULT_MODEL} (the first choice above) and: {', '.join(allowed)}. "
            "Type one of them and press Enter.",
        )
    return (
        "Model id or folder",
        "e.g. bert-base-uncased, gpt2, Qwen/Qwen2.5-0.5B, t5-small, /path/to/folder",
        "Any model whose attention goes through transformers' attention interface: BERT, RoBERTa, GPT-2, "
        "LLaMA, Mistral, Qwen, Gemma, Phi-3, BART, T5, ... (`python -m mha_viz models` lists them); "
        "'smollm2' for the bundled SmolLM2-135M-Instruct (dequantised from a 4-bit GGUF). Press Enter.",
    )


def sidebar() -> Controls:
    sb = st.sidebar
    sb.header("mha-viz")
    check_choice("src", list(SOURCES.values()), SOURCES["bundled"], "the models are")
    for key, used in TOGGLES.items():
        check_bool(key, used)
    check_choice("img", ["png", "svg"], DEFAULT_IMAGE)
    limit = MAX_TEXT_CHARS if hosted() else MAX_LONG_TEXT_CHARS  # local: SmolLM2's 8,192 tokens fit (in tiles)
    check_text("text", limit)
    kind = sb.radio("Model", list(SOURCES), format_func=SOURCES.get, key="src", bind="query-params")
    model_id, own = "", {}
    if kind in SOURCE_NOTES:
        sb.caption(SOURCE_NOTES[kind])
    if kind == "hub":
        label, placeholder, help_text = model_box_text()
        check_text("model_id", 200)
        model_id = sb.text_input(
            label, "", key="model_id", bind="query-params", max_chars=200, placeholder=placeholder, help=help_text
        ).strip()
    elif kind == "own":
        own = own_controls()
    layer_slot = sb.container()
    text = sb.text_area(
        TEXT_LABEL, DEFAULT_TEXT, key="text", bind="query-params", max_chars=limit, height=120,
        help="Paste a text of any length: one longer than the model takes is cut to its limit, with a notice "
        "saying what was left out. Ctrl+Enter (⌘+Enter on a Mac) or clicking outside the box applies it.",
    )  # fmt: skip
    sb.selectbox("Examples", EXAMPLES, index=None, key="example", on_change=_use_example, placeholder="pick an example")
    devices = available_devices()
    check_choice("device", ["auto", *devices], DEFAULT_DEVICE, "this machine offers")
    device = sb.selectbox(
        "Device",
        ["auto", *devices],
        key="device",
        bind="query-params",
        help="auto picks the best available. Available here: " + ", ".join(devices),
    )
    if "cuda" not in devices:
        sb.caption("No CUDA GPU on this machine: computing on the CPU.")
    spread = placement_controls(kind != "own")
    mask_slot = sb.container()  # the mask toggles and the example: drawn once the model is known
    scaled = sb.toggle(
        "Scale scores by 1/√d_k", TOGGLES["scaled"], key="scaled", bind="query-params",
        help="Turn off to see the softmax saturate.",
    )  # fmt: skip
    fmt = sb.radio("Figure download format", ["png", "svg"], horizontal=True, key="img", bind="query-params",
                   index=["png", "svg"].index(DEFAULT_IMAGE))  # fmt: skip
    model = {"own": OWN, "hub": model_id, "smollm2": "smollm2"}.get(kind, "")
    config = Config(model=model, device=str(resolve_device(device)), scaled=bool(scaled), placement=spread, **own)
    if kind == "own":
        weights_download(config)
    return Controls(config, kind, text, layer_slot, False, bool(scaled), False, fmt, mask_slot)


def default_controls() -> Controls:
    """What sidebar() and mask_controls() give a new page on the bundled model, nothing chosen (no widget drawn: the
    stored first page's recorder, serve/record.py, computes that page outside a page run)."""
    device = str(resolve_device(DEFAULT_DEVICE))
    config = Config(model="", device=device, scaled=TOGGLES["scaled"], causal=TOGGLES["causal"], placement="")
    return Controls(config=config, kind="bundled", text=DEFAULT_TEXT, layer_slot=None, causal=TOGGLES["causal"],
                    scaled=TOGGLES["scaled"], hide_special=TOGGLES["hide_special"], image_format=DEFAULT_IMAGE,
                    measure="contribution" if TOGGLES["contrib"] else "weight")  # fmt: skip


def mask_controls(controls: Controls, decoder: bool) -> Controls:
    """The causal mask and token hiding, as the model allows (drawn once it is loaded): a decoder's causal mask
    is part of the model, so it is shown on and fixed; decoders hide their first token instead of [CLS]/[SEP]."""
    slot = controls.mask_slot
    if decoder:
        slot.toggle(
            "Causal mask (part of this decoder)", True, key="causal_fixed", disabled=True,
            help="This model is a decoder: token t only ever sees tokens ≤ t, so the mask cannot be turned off.",
        )  # fmt: skip
        causal = True
        hide = slot.toggle(
            "Hide the first token (attention sink)", TOGGLES["hide_special"], key="hide_special", bind="query-params",
            help="Decoders park much of their attention on the first token. Hiding it drops that column and "
            "renormalises each row to sum to 1 over the remaining tokens.",
        )  # fmt: skip
    else:
        causal = slot.toggle(
            "Causal mask", TOGGLES["causal"], key="causal", bind="query-params", help="Token t sees only tokens ≤ t."
        )
        hide = slot.toggle("Hide special tokens ([CLS], [SEP])", TOGGLES["hide_special"], key="hide_special",
                           bind="query-params")  # fmt: skip
        slot.button(
            "Seed 000 worked example", on_click=load_seed_example, help="own weights, d_model 512, 8 heads, word tokens"
        )
    contrib = slot.toggle(
        "Show contributions ‖α·v·W_O‖, not weights", TOGGLES["contrib"], key="contrib", bind="query-params",
        help="Weight α_ij: how much token i looks at token j. Contribution: the length of what j actually sends to "
        "i through the head, ‖α_ij · v_j W_O^h‖ (Kobayashi et al. 2020), each row divided by its sum. Followed by "
        "Heads, Lines, Overview, Where does it look? and Rollout.",
    )  # fmt: skip
    config = controls.config.replace(causal=bool(causal) and not decoder)
    measure = "contribution" if contrib else "weight"
    return dataclasses.replace(controls, config=config, causal=bool(causal), hide_special=bool(hide), measure=measure)


def part_control(controls: Controls, parts: tuple[str, ...], encoder_decoder: bool) -> tuple[str, str | None]:
    """For encoder-decoder models: the decoder's text and which attention to show (drawn in the layer slot)."""
    labels = [PART_NAMES[p] for p in parts]
    if not encoder_decoder:
        value = url_value("part")
        if value is not None and value != labels[0]:
            note_ignored("part", value, f"this model has only {labels[0]}")
        return parts[0], None
    check_choice("part", labels, labels[0], "this model has")
    check_text("target", MAX_TEXT_CHARS)
    slot = controls.layer_slot
    target = slot.text_input(
        "Decoder text (press Enter)", DEFAULT_TARGET, key="target", bind="query-params", max_chars=MAX_TEXT_CHARS,
        help="The decoder's input (teacher forcing): its start token, then this text's tokens.",
    )  # fmt: skip
    if st.session_state.get("part", parts[0]) not in parts:  # left from another model
        st.session_state["part"] = parts[0]
    part = slot.radio("Attention", list(parts), format_func=PART_NAMES.get, key="part", bind="query-params")
    return str(part), target


def opening_layer(found: int, n_layers: int) -> int:
    """The layer a page opens on when neither the session nor the link names one: ``found`` (the found head's
    layer) when the model has it, else 0 (the stored first page records the same: serve/record.py)."""
    return found if n_layers > 1 and 0 <= found < n_layers else 0


def layer_control(controls: Controls, n_layers: int, default: Callable[[], int] | None = None) -> int:
    """The layer picker, drawn in its slot once the model (and so its layer count) is known. ``default`` gives
    the first layer shown when neither the session nor the link names a layer or a head (called only then)."""
    value = url_value("layer")
    bad = value is not None and value not in [str(i) for i in range(max(n_layers, 1))]
    first = 0
    if "layer" not in st.session_state and (value is None or bad) and "head" not in st.query_params and default:
        first = opening_layer(default(), n_layers) if n_layers > 1 else 0
    if bad:
        has = "one layer (0)" if n_layers <= 1 else f"layers 0-{n_layers - 1}"
        note_ignored("layer", value, f"this model has {has}; showing layer {first}")
    if n_layers <= 1:
        return 0
    if "layer" not in st.session_state and "layer" not in st.query_params:
        st.session_state["layer"] = first
    if st.session_state.get("layer", 0) >= n_layers:
        st.session_state["layer"] = 0
    return int(controls.layer_slot.selectbox("Layer", list(range(n_layers)), key="layer", bind="query-params"))


def selection(controls: Controls, part: str, target: str | None, layer: int | None = None) -> Selection:
    """The sidebar's one request value: its settings (masks included: mask_controls) and text, with the attention
    kind and decoder text (part_control) and the layer (layer_control; None before it is drawn: every layer)."""
    return Selection(controls.config, controls.text, target, part, layer)
