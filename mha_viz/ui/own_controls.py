"""The sidebar's own-weights part: the layer's shape, seed, init, tokens and embeddings, an uploaded .safetensors
file, the layer variant, and the weights as a download. Every control has a key and is bound to the URL."""

from __future__ import annotations

import logging

import streamlit as st

from mha_viz.config import (
    DEFAULT_MODEL,
    EMBEDDINGS,
    INITS,
    MAX_D_MODEL,
    MAX_HEADS,
    MAX_SEED,
    MAX_UPLOAD_BYTES,
    MAX_UPLOAD_MB,
    OWN,
    TOKENS,
    Config,
)
from mha_viz.own_variants import GATES, VARIANT_NAMES, VARIANTS
from mha_viz.trace import MhaVizError
from mha_viz.ui.cache import get_own_weights, get_weights_file
from mha_viz.ui.links import check_bool, check_choice, check_int, plain

log = logging.getLogger("mha_viz")
OWN_TOKENS = {"pieces": "word pieces (bundled tokenizer)", "words": "words (split on spaces)"}  # labels go in URLs


def own_controls() -> dict:
    """The own-weights settings in the sidebar (shape, seed, init, tokens, embeddings, an upload, the variant), as
    Config fields."""
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
    upload = sb.file_uploader(
        "Load weights (.safetensors)", type=["safetensors"], key="upload", max_upload_size=MAX_UPLOAD_MB
    )
    if upload is None:
        return None, None
    if upload.size > MAX_UPLOAD_BYTES:
        sb.error(f"That file is over {MAX_UPLOAD_MB} MB; choose a smaller .safetensors file.")
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
            f"These weights are {size / 10**6:.0f} MB: the download is offered up to {MAX_UPLOAD_MB} MB "
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
