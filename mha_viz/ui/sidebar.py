"""Sidebar controls. Every control has a key and is bound to the URL, so a view can be shared."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st

from mha_viz.attention import available_devices, resolve_device
from mha_viz.config import (
    DEFAULT_MODEL,
    EMBEDDINGS,
    MAX_D_MODEL,
    MAX_HEADS,
    MAX_SEED,
    MAX_TEXT_CHARS,
    MAX_UPLOAD_BYTES,
    OWN,
    PART_NAMES,
    TOKENS,
    Config,
)
from mha_viz.models.sources import allowed_models
from mha_viz.own import INITS
from mha_viz.own_variants import GATES, VARIANT_NAMES, VARIANTS
from mha_viz.trace import MhaVizError
from mha_viz.ui.cache import get_own_weights, get_weights_file
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
from mha_viz.ui.placement import placement_controls
from mha_viz.ui.registry import GROUP_OF, VIEW_GROUPS, VIEWS  # noqa: F401 (re-exported: the navigation)

log = logging.getLogger("mha_viz")

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
    "smollm2": "Decoder (LLaMA): 30 layers × 9 query heads sharing 3 K/V heads, rotary positions, d_model 576.",
}
OWN_TOKENS = {"pieces": "word pieces (bundled tokenizer)", "words": "words (split on spaces)"}  # labels go in URLs
DEFAULT_TARGET = "Das Tier überquerte die Straße nicht, weil es zu müde war"
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


def _own_controls() -> dict:
    sb = st.sidebar
    sb.caption("Own weights: one attention layer; X from the text's tokens (word pieces or words).")
    binds = {
        "d_model": check_int("d_model", 1, MAX_D_MODEL, 512),
        "own_heads": check_int("own_heads", 1, MAX_HEADS, 8),
        "seed": check_int("seed", 0, MAX_SEED, 0),
    }  # None where the link's value is ignored: Streamlit must not read it either
    check_choice("init", INITS, INITS[0])
    check_choice("emb", EMBEDDINGS, EMBEDDINGS[0])
    check_choice("own_tokens", [OWN_TOKENS[t] for t in TOKENS], OWN_TOKENS[TOKENS[0]])
    check_bool("pos", False)
    shape_slot = sb.container()  # d_model, heads and init: drawn once the upload (which overrides them) is read
    seed = sb.number_input("Seed", 0, MAX_SEED, 0, key="seed", bind=binds["seed"])
    tokens = sb.radio(
        "Tokens", TOKENS, format_func=OWN_TOKENS.get, key="own_tokens", bind="query-params",
        help="words: the text split on spaces, no [CLS]/[SEP] (seed 000's 'humpty dumpty sat on' is 4 tokens)",
    )  # fmt: skip
    emb = sb.selectbox(
        "Embeddings (X)",
        EMBEDDINGS,
        key="emb",
        bind="query-params",
        help=f"random: seeded per token (per word: a sha256 of the word); model: {DEFAULT_MODEL}'s token "
        "embeddings (d_model 384; a word gets the mean of its word pieces' embeddings)",
    )
    pos = sb.checkbox("Add position embeddings", False, key="pos", bind="query-params")
    data, shape = _uploaded_weights()
    by_file = "Set by your weights file while it is loaded (remove the file to use this box)." if shape else None
    d_model = shape_slot.number_input(
        "d_model", 1, MAX_D_MODEL, 512, key="d_model", bind=binds["d_model"], disabled=bool(shape), help=by_file
    )
    heads = shape_slot.number_input(
        "Number of heads", 1, MAX_HEADS, 8, key="own_heads", bind=binds["own_heads"], disabled=bool(shape), help=by_file
    )
    init = shape_slot.selectbox(
        "Init", INITS, key="init", bind="query-params", disabled=bool(shape),
        help=by_file or "xavier: as torch.nn.MultiheadAttention; identity: attention = embedding similarity",
    )  # fmt: skip
    d_model, heads = shape or (int(d_model), int(heads))
    variant = _variant_controls(int(heads))
    return {
        **variant,
        "d_model": d_model,
        "n_heads": heads,
        "seed": int(seed),
        "init": init,
        "embeddings": emb,
        "tokens": tokens,
        "positions": bool(pos),
        "weights_file": data,
    }


def _uploaded_weights() -> tuple[bytes | None, tuple[int, int] | None]:
    """The upload box: (the file's bytes, its (d_model, n_heads) read from the file) — (bytes, None) when the
    file cannot be read (the page says why), (None, None) without a usable file (the sidebar says why)."""
    sb = st.sidebar
    upload = sb.file_uploader("Load weights (.safetensors)", type=["safetensors"], key="upload")
    if upload is None:
        return None, None
    if upload.size > MAX_UPLOAD_BYTES:
        sb.error(f"That file is over {MAX_UPLOAD_BYTES // 2**20} MB; choose a smaller .safetensors file.")
        return None, None
    if upload.size == 0:
        sb.error(
            "That file is empty (0 bytes), so nothing was loaded: the weights shown are made from the settings "
            "above. Choose a .safetensors file with weights in it."
        )
        return None, None
    data = upload.getvalue()
    try:
        weights = get_own_weights(Config(model=OWN, weights_file=data))
    except MhaVizError:  # the page says what is wrong with the file
        return data, None
    h, d = weights.n_heads, weights.d_model
    sb.info(
        f"Your file: {h} head{'s' if h != 1 else ''} × d_model {d} (d_k {weights.d_head}). The d_model, "
        "number of heads and init boxes above do not apply while it is loaded."
    )
    return data, (d, h)


def _variant_controls(heads: int) -> dict:
    """Own weights as another layer (mha_viz.own_variants): the variant and its one setting, in the link."""
    sb = st.sidebar
    check_choice("ovar", [VARIANT_NAMES[v] for v in VARIANTS], VARIANT_NAMES["mha"])
    variant = sb.selectbox(
        "Layer variant", VARIANTS, format_func=VARIANT_NAMES.get, key="ovar", bind="query-params",
        help="Step by step and the Lesson add the variant's own steps (the other views show plain MHA)",
    )  # fmt: skip
    out: dict = {"variant": variant}
    if variant == "gqa":
        bind = check_int("ovar_g", 1, MAX_HEADS, min(2, heads))
        out["variant_groups"] = int(
            sb.number_input("K/V groups g (divides the heads)", 1, MAX_HEADS, min(2, heads), key="ovar_g", bind=bind)
        )
    elif variant == "mohsa":
        bind = check_int("ovar_w", 0, MAX_D_MODEL, 4)
        out["variant_width"] = int(sb.number_input("Overlap w (columns each side)", 0, MAX_D_MODEL, 4, key="ovar_w",
                                                   bind=bind))  # fmt: skip
    elif variant == "moh":
        bind = check_int("ovar_k", 1, MAX_HEADS, min(2, heads))
        out["variant_top_k"] = int(
            sb.number_input("Heads per token (top-k)", 1, MAX_HEADS, min(2, heads), key="ovar_k", bind=bind)
        )
        check_choice("ovar_gates", GATES, GATES[0])
        out["variant_gates"] = sb.radio(
            "Gates", GATES, key="ovar_gates", bind="query-params", horizontal=True,
            help="router: the router's softmax score; equal: 1 per chosen head",
        )  # fmt: skip
    elif variant == "dcmha":
        bind = check_int("ovar_r", 0, MAX_HEADS, min(2, heads))
        out["variant_rank"] = int(
            sb.number_input("Mixing rank r", 0, MAX_HEADS, min(2, heads), key="ovar_r", bind=bind)
        )
    return out


def weights_download(config: Config) -> None:
    """Offer the current own weights as a .safetensors download; any failure is a sidebar message (the page
    itself keeps working)."""
    size = 4 * (4 * config.d_model * config.d_model + (4 * config.d_model if config.bias else 0))
    if not config.weights_file and size > MAX_UPLOAD_BYTES:
        st.sidebar.caption(
            f"These weights are {size / 2**20:.0f} MB: the download is offered up to {MAX_UPLOAD_BYTES // 2**20} MB "
            "(the upload limit). The command line saves any size: python -m mha_viz trace --model own --full ..."
        )
        return
    try:
        data = get_weights_file(config)
    except MhaVizError as exc:  # the view says what is wrong with these settings or this file
        log.info("no weights download: %s", exc)
        return
    except Exception as exc:
        log.exception("building the weights download failed")
        st.sidebar.error(
            plain(
                f"Could not build the weights download ({type(exc).__name__}). Try other own-weights settings or "
                "reload the page; the views still work."
            )
        )
        return
    st.sidebar.download_button(
        "Download these weights (.safetensors)",
        data,
        file_name="mha-viz-weights.safetensors",
        mime="application/octet-stream",
        key="download_weights",
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
        "'smollm2' for the optional offline SmolLM2 extra. Press Enter.",
    )


def sidebar() -> Controls:
    sb = st.sidebar
    sb.header("mha-viz")
    check_choice("src", list(SOURCES.values()), SOURCES["bundled"], "the models are")
    for key, used in (("causal", False), ("scaled", True), ("hide_special", False), ("contrib", False)):
        check_bool(key, used)
    check_choice("img", ["png", "svg"], "png")
    check_text("text", MAX_TEXT_CHARS)
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
        own = _own_controls()
    layer_slot = sb.container()
    text = sb.text_area(
        TEXT_LABEL, DEFAULT_TEXT, key="text", bind="query-params", max_chars=MAX_TEXT_CHARS, height=120,
        help="Paste a text of any length: one longer than the model takes is cut to its limit, with a notice "
        "saying what was left out. Ctrl+Enter (⌘+Enter on a Mac) or clicking outside the box applies it.",
    )  # fmt: skip
    sb.selectbox("Examples", EXAMPLES, index=None, key="example", on_change=_use_example, placeholder="pick an example")
    devices = available_devices()
    check_choice("device", ["auto", *devices], "auto", "this machine offers")
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
        "Scale scores by 1/√d_k", True, key="scaled", bind="query-params", help="Turn off to see the softmax saturate."
    )
    fmt = sb.radio("Figure download format", ["png", "svg"], horizontal=True, key="img", bind="query-params")
    model = {"own": OWN, "hub": model_id, "smollm2": "smollm2"}.get(kind, "")
    config = Config(model=model, device=str(resolve_device(device)), scaled=bool(scaled), placement=spread, **own)
    if kind == "own":
        weights_download(config)
    return Controls(config, kind, text, layer_slot, False, bool(scaled), False, fmt, mask_slot)


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
            "Hide the first token (attention sink)", False, key="hide_special", bind="query-params",
            help="Decoders park much of their attention on the first token. Hiding it drops that column and "
            "renormalises each row to sum to 1 over the remaining tokens.",
        )  # fmt: skip
    else:
        causal = slot.toggle(
            "Causal mask", False, key="causal", bind="query-params", help="Token t sees only tokens ≤ t."
        )
        hide = slot.toggle("Hide special tokens ([CLS], [SEP])", False, key="hide_special", bind="query-params")
        slot.button(
            "Seed 000 worked example", on_click=load_seed_example, help="own weights, d_model 512, 8 heads, word tokens"
        )
    contrib = slot.toggle(
        "Show contributions ‖α·v·W_O‖, not weights", False, key="contrib", bind="query-params",
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


def layer_control(controls: Controls, n_layers: int, default: Callable[[], int] | None = None) -> int:
    """The layer picker, drawn in its slot once the model (and so its layer count) is known. ``default`` gives
    the first layer shown when neither the session nor the link names a layer or a head (called only then)."""
    value = url_value("layer")
    bad = value is not None and value not in [str(i) for i in range(max(n_layers, 1))]
    first = 0
    if "layer" not in st.session_state and (value is None or bad) and "head" not in st.query_params and default:
        first = default() if n_layers > 1 else 0
        first = first if 0 <= first < n_layers else 0
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
