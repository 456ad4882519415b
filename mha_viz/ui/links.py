"""Link values that cannot be used: checked before a widget reads them, and said once at the top of the page.

Streamlit drops a bound widget's URL value silently when it is not a valid choice; here it is checked first and
reported ("Ignored from the link: layer=999 (...; showing layer 0)"), see mha_viz.ui.main.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Literal

import streamlit as st

from mha_viz.config import MAX_LINK_NUMBER_CHARS

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>$~:])")
IGNORED = "_url_ignored"  # session_state: {param: "param=value (why; what is used instead)"} for this run


def plain(text: object) -> str:
    """Text shown as typed: markdown characters escaped (messages may quote user input)."""
    return _MARKDOWN.sub(r"\\\1", str(text))


# --- URL values that cannot be used -------------------------------------------------------------------------
# Streamlit drops a bound widget's URL value silently when it is not a valid choice; we check first and say so
# (one warning at the top of the page, see mha_viz.ui.main).


def url_value(key: str) -> str | None:
    """The link's value for ``key`` while the widget has not taken a value yet (its first run), else None."""
    if key in st.session_state or key not in st.query_params:
        return None
    return st.query_params[key]


def _short(value: str, limit: int = 40) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


def note_ignored(key: str, value: str, why: str, drop: bool = True) -> None:
    """Record that the link's ``key=value`` was not used and why (with what is shown instead); by default
    also drop it from the URL so the widget falls back to its default and the note is made once."""
    st.session_state.setdefault(IGNORED, {})[key] = f"{key}={_short(value)} ({why})"
    if drop and key in st.query_params:
        del st.query_params[key]


def summarize(labels: Sequence[str]) -> str:
    """A short list of choices: all of them when few, else the first three and the last."""
    labels = [str(x) for x in labels]
    return ", ".join(labels) if len(labels) <= 6 else ", ".join([*labels[:3], "…", labels[-1]])


def check_choice(key: str, labels: Sequence[str], used: str, what: str = "") -> None:
    """A choice widget's link value must be one of its (formatted) labels."""
    value = url_value(key)
    if value is not None and value not in labels:
        note_ignored(key, value, f"{what or 'the choices are'} {summarize(labels)}; showing {used}")


_INT = re.compile(r"-?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
Bind = Literal["query-params"] | None


def parse_link_int(value: object, lo: int, hi: int) -> int | None:
    """A whole number from a link, or None: plain ASCII digits, a leading '-' only where lo < 0; no spaces, '_',
    '+', other scripts' digits, '3.0', '1e3' or 'inf'; at most MAX_LINK_NUMBER_CHARS characters (checked before
    converting); from lo to hi."""
    if not isinstance(value, str) or len(value) > MAX_LINK_NUMBER_CHARS or not _INT.fullmatch(value):
        return None
    if value.startswith("-") and lo >= 0:  # a '-' only where the range has negative numbers
        return None
    number = int(value)
    return number if lo <= number <= hi else None


def parse_link_float(value: object, lo: float, hi: float) -> float | None:
    """A number from a link, or None: plain decimal ('0.5', '2', '-1.25', '.5'; no exponent, 'inf', 'nan',
    spaces, '_' or other scripts' digits), at most MAX_LINK_NUMBER_CHARS characters, finite, from lo to hi."""
    if not isinstance(value, str) or len(value) > MAX_LINK_NUMBER_CHARS or not _DECIMAL.fullmatch(value):
        return None
    if value.startswith("-") and lo >= 0:
        return None
    number = float(value)
    return number if math.isfinite(number) and lo <= number <= hi else None


def _check_number(key: str, ok: Callable[[str], bool], says: str) -> Bind:
    """The bind option for a number widget whose link value is checked by ``ok``: "query-params", or None for
    this run when the value is ignored (``says`` why), so Streamlit does not read it either (it would use '3.0'
    truncated and fail on 'inf'); the value is also dropped from the link, so the next run binds again."""
    value = url_value(key)
    if value is None or ok(value):
        return "query-params"
    note_ignored(key, value, says)
    return None


def check_int(key: str, lo: int, hi: int, used: int) -> Bind:
    """A whole-number widget's link value must be a whole number from lo to hi (parse_link_int). Returns the
    widget's ``bind``: pass it on, so an ignored value is not read by Streamlit either."""
    return _check_number(
        key,
        lambda v: parse_link_int(v, lo, hi) is not None,
        f"must be a whole number from {lo} to {hi}; showing {used}",
    )


def check_float(key: str, lo: float, hi: float, used: float) -> Bind:
    """A slider's link value must be a plain decimal number from lo to hi (parse_link_float). Returns the
    widget's ``bind``, as check_int."""
    return _check_number(
        key,
        lambda v: parse_link_float(v, lo, hi) is not None,
        f"must be a number from {lo:g} to {hi:g}; showing {used:g}",
    )


def check_bool(key: str, used: bool) -> None:
    value = url_value(key)
    if value is not None and value.lower() not in ("true", "false"):
        note_ignored(key, value, f"must be true or false; showing {str(used).lower()}")


def check_text(key: str, max_chars: int) -> None:
    value = url_value(key)
    if value is not None and len(value) > max_chars:
        note_ignored(key, value, f"longer than {max_chars} characters; using its first {max_chars}", drop=False)


# --- a link Streamlit refuses whole ----------------------------------------------------------------------------
# Streamlit reads no part of a query string with more than 1,000 parameters or 512 Ki characters (it logs a
# warning and runs the page as if the link had none: `?p=1&...&view=Heads` with 2,000 p's opens the default
# view). Its check is wrapped so that such a link arrives as one marker parameter instead, which the page reports.
LINK_REFUSED = "_link_refused"  # the marker: the refused link's number of parameters


def _marking(sanitize: Callable[[str], str]) -> Callable[[str], str]:
    def sanitize_query_string(query_string: str) -> str:
        kept = sanitize(query_string)
        if query_string and not kept:  # refused whole
            return f"{LINK_REFUSED}={query_string.count('&') + 1}"
        return kept

    sanitize_query_string.__wrapped__ = sanitize  # type: ignore[attr-defined]
    return sanitize_query_string


def watch_refused_links() -> None:
    """Wrap Streamlit's query-string check (where the server reads a rerun's link, and where a run parses it),
    once per process, so a link it refuses whole is reported by check_refused_link instead of dropped silently."""
    from streamlit.runtime import app_session
    from streamlit.runtime.state import query_params

    for module in (app_session, query_params):
        current = getattr(module, "sanitize_query_string", None)
        if callable(current) and not hasattr(current, "__wrapped__"):
            module.sanitize_query_string = _marking(current)


def check_refused_link() -> None:
    """Report a link Streamlit refused whole (see watch_refused_links), and drop the marker from the URL."""
    if LINK_REFUSED not in st.query_params:
        return
    from streamlit.runtime.state import query_params

    fields = getattr(query_params, "CLIENT_STATE_QUERY_STRING_MAX_FIELDS", 1000)
    chars = getattr(query_params, "CLIENT_STATE_QUERY_STRING_MAX_LENGTH", 512 * 1024)
    count = parse_link_int(st.query_params[LINK_REFUSED], 1, 10**9)
    del st.query_params[LINK_REFUSED]
    st.session_state.setdefault(IGNORED, {})[LINK_REFUSED] = (
        f"the whole link{f' ({count:,} parameters)' if count else ''}: Streamlit reads none of a link with more "
        f"than {fields:,} parameters or {chars:,} characters, so the page shows its defaults, the view included. "
        "Shorten the link"
    )


watch_refused_links()  # at import: the server's preload imports this module before most visits


def show_ignored(slot: object) -> None:
    """One warning listing this run's link values that were not used (then forgotten)."""
    notes = st.session_state.pop(IGNORED, None)
    if notes:
        slot.warning(plain("Ignored from the link: " + "; ".join(notes.values())))
