"""Cancel for a long text's recording (issue 38 §3): the Cancel button beside the layers' progress bar, and the page
after it. A click reruns the script, and Streamlit stops the running pass at its next progress call (the next
layer: ScriptRunner raises inside the callback, so the pass unwinds through its own ``with`` blocks and nothing is
cached); the rerun then finds the text marked cancelled and says so, with a button that records it after all,
instead of starting the pass again. Another text, model or a click on that button clears the mark."""

from __future__ import annotations

import hashlib

import streamlit as st

from mha_viz.config import Config

KEY = "long_cancelled"


def cancel_key(config: Config, text: str, target: str | None) -> str:
    """What a cancel is for: this model, device and text."""
    what = repr((config.model_name, config.model_device, text, target)).encode()
    return hashlib.blake2b(what, digest_size=8).hexdigest()


def _cancel(key: str) -> None:
    st.session_state[KEY] = key


def _resume() -> None:
    st.session_state.pop(KEY, None)


def cancel_button(where: st.delta_generator.DeltaGenerator, key: str, tag: str) -> None:
    """The Cancel button for the recording of ``key`` (cancel_key); ``tag`` tells a run's bars apart."""
    where.button("Cancel", key=f"long_cancel_{tag}", on_click=_cancel, args=(key,),
                 help="Stops the recording at its next layer; nothing is kept, the page stays usable.")  # fmt: skip


def cancelled(key: str) -> bool:
    """Whether this text's recording was cancelled (and not asked for again)."""
    return st.session_state.get(KEY) == key


def cancelled_notice(model_name: str) -> None:
    """What the page says after a cancel, and the way to record the text after all."""
    st.info(
        f"Recording {model_name} over this long text was cancelled: nothing was kept. Change the text (or the "
        "model) in the sidebar, or record it after all."
    )
    st.button("Record this text", key="long_resume", on_click=_resume, type="primary")
