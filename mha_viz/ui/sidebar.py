"""Sidebar controls. Every control has a key and is bound to the URL, so a view can be shared."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from mha_viz.attention import available_devices, resolve_device
from mha_viz.config import DEFAULT_MODEL, EMBEDDINGS, OWN, PART_NAMES, Config
from mha_viz.own import INITS, MAX_D_MODEL
from mha_viz.trace import MhaVizError
from mha_viz.ui.cache import get_weights_file

DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"
EXAMPLES = (
    DEFAULT_TEXT,
    "The animal didn't cross the street because it was too wide",
    "humpty dumpty sat on",
    "The cat sat on the mat and the cat slept",
    "She gave him the book because he had asked for it",
)
SOURCES = {"bundled": f"{DEFAULT_MODEL} (bundled)", "hub": "Hugging Face", "own": "Own weights"}  # labels go in URLs
MAX_UPLOAD_BYTES = 16 * 1024 * 1024
DEFAULT_TARGET = "Das Tier überquerte die Straße nicht, weil es zu müde war"
VIEWS = (
    "Heads",
    "Compare heads",
    "Head roles",
    "Where does it look?",
    "Two sentences",
    "Head count",
    "W^O",
    "Ablation",
    "Rollout",
    "Step by step",
    "Overview",
)


@dataclass(frozen=True)
class Controls:
    config: Config
    kind: str  # "bundled" | "hub" | "own"
    text: str
    layer_slot: object  # sidebar container where the layer picker goes once the model is known
    causal: bool
    scaled: bool
    hide_special: bool
    image_format: str


def _use_example() -> None:
    st.session_state["text"] = st.session_state["example"]


def load_seed_example() -> None:
    """Seed 000's worked example: own weights, d_model 512, 8 heads (d_k 64), "humpty dumpty sat on"."""
    st.session_state.update(
        src="own",
        d_model=512,
        own_heads=8,
        seed=0,
        init="xavier",
        emb="random",
        text="humpty dumpty sat on",
        view="Step by step",
    )


def _own_controls() -> dict:
    st.sidebar.caption("Own weights: one attention layer; X from the bundled tokenizer's tokens.")
    d_model = st.sidebar.number_input("d_model", 1, MAX_D_MODEL, 512, key="d_model", bind="query-params")
    heads = st.sidebar.number_input("Number of heads", 1, 256, 8, key="own_heads", bind="query-params")
    seed = st.sidebar.number_input("Seed", 0, 2**31 - 1, 0, key="seed", bind="query-params")
    init = st.sidebar.selectbox(
        "Init",
        INITS,
        key="init",
        bind="query-params",
        help="xavier: as torch.nn.MultiheadAttention; identity: attention = embedding similarity",
    )
    emb = st.sidebar.selectbox(
        "Embeddings (X)",
        EMBEDDINGS,
        key="emb",
        bind="query-params",
        help=f"random: seeded per token; model: {DEFAULT_MODEL}'s token embeddings (d_model 384)",
    )
    pos = st.sidebar.checkbox("Add position embeddings", False, key="pos", bind="query-params")
    upload = st.sidebar.file_uploader("Load weights (.safetensors)", type=["safetensors"], key="upload")
    data = None
    if upload is not None:
        if upload.size > MAX_UPLOAD_BYTES:
            st.sidebar.error(f"That file is over {MAX_UPLOAD_BYTES // 2**20} MB; choose a smaller .safetensors file.")
        else:
            data = upload.getvalue()
    return {
        "d_model": int(d_model),
        "n_heads": int(heads),
        "seed": int(seed),
        "init": init,
        "embeddings": emb,
        "positions": bool(pos),
        "weights_file": data,
    }


def weights_download(config: Config) -> None:
    """Offer the current own weights as a .safetensors download."""
    try:
        data = get_weights_file(config)
    except MhaVizError:  # invalid sizes are reported by the view
        return
    st.sidebar.download_button(
        "Download these weights (.safetensors)",
        data,
        file_name="mha-viz-weights.safetensors",
        mime="application/octet-stream",
        key="download_weights",
    )


def sidebar() -> Controls:
    sb = st.sidebar
    sb.header("mha-viz")
    kind = sb.radio("Model", list(SOURCES), format_func=SOURCES.get, key="src", bind="query-params")
    model_id, own = "", {}
    if kind == "hub":
        model_id = sb.text_input(
            "Model id or folder",
            "",
            key="model_id",
            bind="query-params",
            max_chars=200,
            placeholder="e.g. bert-base-uncased, gpt2, Qwen/Qwen2.5-0.5B, t5-small, /path/to/folder",
            help="Any model whose attention goes through transformers' attention interface: BERT, RoBERTa, GPT-2, "
            "LLaMA, Mistral, Qwen, Gemma, Phi-3, BART, T5, ... (`python -m mha_viz models` lists them); "
            "'smollm2' for the optional offline SmolLM2 extra. Press Enter.",
        ).strip()
    elif kind == "own":
        own = _own_controls()
    layer_slot = sb.container()
    sb.button("Seed 000 worked example", on_click=load_seed_example, help="own weights, d_model 512, 8 heads")
    text = sb.text_input("Text (press Enter)", DEFAULT_TEXT, key="text", bind="query-params", max_chars=5000)
    sb.selectbox("Examples", EXAMPLES, index=None, key="example", on_change=_use_example, placeholder="pick an example")
    devices = available_devices()
    device = sb.selectbox(
        "Device",
        ["auto", *devices],
        key="device",
        bind="query-params",
        help="auto picks the best available. Available here: " + ", ".join(devices),
    )
    if "cuda" not in devices:
        sb.caption("No CUDA GPU on this machine: computing on the CPU.")
    causal = sb.toggle(
        "Causal mask",
        False,
        key="causal",
        bind="query-params",
        help="Token t sees only tokens ≤ t (decoders always have it).",
    )
    scaled = sb.toggle(
        "Scale scores by 1/√d_k", True, key="scaled", bind="query-params", help="Turn off to see the softmax saturate."
    )
    hide = sb.toggle("Hide special tokens ([CLS], [SEP])", False, key="hide_special", bind="query-params")
    fmt = sb.radio("Figure download format", ["png", "svg"], horizontal=True, key="img", bind="query-params")
    model = OWN if kind == "own" else (model_id if kind == "hub" else "")
    config = Config(model=model, device=str(resolve_device(device)), causal=bool(causal), scaled=bool(scaled), **own)
    if kind == "own":
        weights_download(config)
    return Controls(config, kind, text, layer_slot, bool(causal), bool(scaled), bool(hide), fmt)


def part_control(controls: Controls, parts: tuple[str, ...], encoder_decoder: bool) -> tuple[str, str | None]:
    """For encoder-decoder models: the decoder's text and which attention to show (drawn in the layer slot)."""
    if not encoder_decoder:
        return parts[0], None
    slot = controls.layer_slot
    target = slot.text_input(
        "Decoder text (press Enter)", DEFAULT_TARGET, key="target", bind="query-params", max_chars=5000,
        help="The decoder's input (teacher forcing): its start token, then this text's tokens.",
    )  # fmt: skip
    if st.session_state.get("part", parts[0]) not in parts:  # left from another model
        st.session_state["part"] = parts[0]
    part = slot.radio("Attention", list(parts), format_func=PART_NAMES.get, key="part", bind="query-params")
    return str(part), target


def layer_control(controls: Controls, n_layers: int) -> int:
    """The layer picker, drawn in its slot once the model (and so its layer count) is known."""
    if n_layers <= 1:
        return 0
    if st.session_state.get("layer", 0) >= n_layers:
        st.session_state["layer"] = 0
    return int(controls.layer_slot.selectbox("Layer", list(range(n_layers)), key="layer", bind="query-params"))
