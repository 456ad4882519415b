"""Circuits' choices as data: the notes on a head's circuits (rotary, what is not shown, how the token pairs are
read) and the tables of its token pairs. The view (ui/views/circuits.py) draws them. Pure (plain values in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ROTARY = (
    "This model rotates queries and keys by their positions (rotary embeddings) after W_Q and W_K. The QK circuit "
    "shown is W_Q·W_Kᵀ before rotation: the score a query and a key would get at the same position; at distance t the "
    "model turns it by position-dependent angles, so the real preference also depends on how far apart the tokens are."
)
OWN_PAIRS = (
    "Own weights: each token of the text is its row of X (the embeddings the sidebar chose), and what a head moves is "
    "read against the same rows. One layer, so the copying map below is one row."
)
MODEL_PAIRS = (
    "Token pairs use the raw token embeddings, leaving out the layer norms, positions and every earlier layer: they "
    "show what the weights lean towards, not what this text computes (the Heads tab shows that)."
)


@dataclass(frozen=True)
class CircuitNotes:
    rotary: str  # "" unless the model rotates Q and K
    not_shown: tuple[str, ...]  # each circuit that cannot be shown, and why (once each)
    pairs: str  # how the token pairs are read


def circuit_notes(rotary: bool, qk_note: str | None, ov_note: str | None, own: bool) -> CircuitNotes:
    """The notes around a head's circuits."""
    missing = tuple(f"Not shown: {n}." for n in dict.fromkeys(n for n in (qk_note, ov_note) if n))
    return CircuitNotes(ROTARY if rotary else "", missing, OWN_PAIRS if own else MODEL_PAIRS)


def pair_tables(
    ov: Sequence[tuple[str, Sequence[tuple[str, float]]]], qk: Sequence[tuple[str, str, float]]
) -> tuple[dict[str, list[str]] | None, dict[str, list[str]] | None]:
    """The OV table (each source token and its top destinations) and the QK table (the query → key pairs the circuit
    favours most), None for an empty one."""
    ov_table = {
        "source token": [s for s, _ in ov],
        "top destinations (score)": [", ".join(f"{t} ({v:.3g})" for t, v in dest) for _, dest in ov],
    } if ov else None  # fmt: skip
    qk_table = {
        "query": [a for a, _, _ in qk], "key": [b for _, b, _ in qk], "score": [f"{v:.3g}" for _, _, v in qk],
    } if qk else None  # fmt: skip
    return ov_table, qk_table
