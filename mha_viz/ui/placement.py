"""The sidebar's "Model larger than one device" expander: transformers' device_map (through accelerate) for a
pretrained model, as `--device-map auto --max-memory ... --offload-folder ...` on the command line.

Hosted mode takes no offload folder (no disk path comes from a visitor); safetensors weights offloaded to disk are
read from the model's own files without one. Nothing here is bound to the link: a link never carries a path.
"""

from __future__ import annotations

import streamlit as st

from mha_viz.config import MAX_FOLDER_CHARS, hosted
from mha_viz.models.placement import MEMORY_MAP_SYNTAX, Placement, check, parse_max_memory
from mha_viz.trace import MhaVizError
from mha_viz.ui.links import plain


def placement_controls(pretrained: bool) -> str:
    """The placement asked for in the expander, encoded for Config.placement ("" when the model loads whole, or
    when what was typed is not valid: then an error says so in the expander)."""
    if not pretrained:
        return ""
    with st.sidebar.expander("Model larger than one device"):
        on = st.toggle(
            "Spread it with a device map", False, key="device_map",
            help="Load the model with transformers' device_map='auto' (accelerate): its layers go to the GPUs in "
            "order, then the CPU, then disk. Every layer is still recorded exactly, wherever it runs.",
        )  # fmt: skip
        memory = st.text_input(
            "Max memory per device", "", key="max_memory", max_chars=200, disabled=not on,
            placeholder="0=20GiB,cpu=30GiB", help=f"Optional: {MEMORY_MAP_SYNTAX}. What does not fit goes to disk.",
        )  # fmt: skip
        folder = ""
        if hosted():
            st.caption("This server takes no offload folder: layers offloaded to disk are read from the model's files.")
        else:
            folder = st.text_input(
                "Offload folder", "", key="offload_folder", max_chars=MAX_FOLDER_CHARS, disabled=not on,
                help="Optional: a folder for weights offloaded to disk that have to be converted first (safetensors "
                "weights are read from the model's own files).",
            )  # fmt: skip
        if not on:
            return ""
        try:
            placement = check(Placement("auto", parse_max_memory(memory), folder.strip()))
        except MhaVizError as exc:
            st.error(plain(f"{exc}. The model is loaded whole until this is fixed."))
            return ""
        st.caption(plain(f"Loading with {placement.describe()}."))
        return placement.encode()
