"""A window of query rows for long texts: beyond ``size`` tokens an n × n (or n × d) figure shows ``size`` rows
the user moves (every column, every value exact), so its cost stops growing with n² (as the Lesson's)."""

from __future__ import annotations

import streamlit as st

from mha_viz.ui.choices import valid_choice


def window_starts(n: int, size: int) -> list[int]:
    """The window's possible first rows: every half window, and the last full window."""
    return sorted({*range(0, n - size + 1, size // 2), n - size})


def row_window(n: int, size: int, key: str, what: str, row: int = 0, where=st) -> slice:
    """All rows up to ``size`` tokens; beyond, a selectbox (``key``, bound to the URL; ``where``: a container)
    picking ``size`` rows of ``n`` (first: the window that holds ``row``) and a caption saying what ``what``
    (e.g. "each matrix") shows."""
    if n <= size:
        return slice(0, n)
    starts = window_starts(n, size)
    first = max([s for s in starts if s <= row < s + size] or starts[:1])

    def fmt(s: int) -> str:
        return f"tokens {s}–{s + size - 1}"

    valid_choice(key, starts, first, fmt)
    a = int(
        where.selectbox(f"Rows shown (a window of {size} of the {n} tokens)", starts, key=key, bind="query-params",
                        format_func=fmt)
    )  # fmt: skip
    where.caption(
        f"{n} tokens: {what} shows query rows {a}–{a + size - 1} (every key column, the exact values); all n × n "
        "cells would be too many to draw and read. Move the window above."
    )
    return slice(a, a + size)
