"""Expanders whose content is drawn only while open, and one button that opens (or closes) them all.

Streamlit draws a collapsed expander's content anyway; a keyed expander with on_change reruns and says whether it
is ``.open``, so a view draws a step's figures only when the reader opens it. The open/closed state is kept apart
(in session_state[f"_{name}_opened"]) and handed to each expander before it is drawn: Streamlit identifies an
expander by its label too, and a label that names the head ("Q, K, V of head 5") would otherwise close when the
head changes."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st


class LazyBoxes:
    """The expanders ``keys`` of one view; ``first`` is open until the reader closes it, the others closed."""

    def __init__(self, name: str, keys: Sequence[str], first: str) -> None:
        self.state, self.keys, self.first = f"_{name}_opened", list(keys), first

    def is_open(self, key: str) -> bool:
        return st.session_state.get(self.state, {}).get(key, key == self.first)

    def all_open(self) -> bool:
        return all(self.is_open(k) for k in self.keys)

    def toggle_all(self) -> None:
        """Every expander open (or, when they all are, every one closed)."""
        st.session_state[self.state] = dict.fromkeys(self.keys, not self.all_open())

    def remember(self, key: str) -> None:
        st.session_state.setdefault(self.state, {})[key] = bool(st.session_state[key])

    def box(self, label: str, key: str):
        """The keyed expander ``key``: draw into it only ``if box.open``."""
        st.session_state[key] = self.is_open(key)
        return st.expander(label, key=key, on_change=self.remember, args=(key,))

    def button(self, container, key: str, help: str) -> None:
        """ "Open all steps" / "Close all steps" in ``container`` (a column, the page)."""
        label = "Close all steps" if self.all_open() else "Open all steps"
        container.button(label, key=key, on_click=self.toggle_all, help=help)
