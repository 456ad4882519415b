"""W^O's what-if choices as data: where this W^O comes from and the one in use, in words, the figures' titles and
what the output change means. The view (ui/views/wo.py) draws them. Pure (plain values in)."""

from __future__ import annotations

from dataclasses import dataclass


def in_use(edits: dict, own: str) -> str:
    """The W^O the what-if uses, in words (``own``: how the layer's own W^O came to be)."""
    if edits.get("wo") == "identity":
        return "identity (the heads only concatenated)"
    if edits.get("wo") == "random":
        return f"random orthogonal, seed {edits['wo_seed']}"
    if "ablate" in edits:
        heads = ", ".join(str(i) for i in edits["ablate"])
        return f"{own}, head{'s' if len(edits['ablate']) > 1 else ''} {heads} zeroed" if heads else f"{own}, as is"
    (head, factor), *_ = edits["head_scale"]
    return f"{own}, head {head} × {factor:g}"


MEANING = {
    "identity": "how much W^O's mixing of the heads changes each token's output",
    "random": "what this layer's own W^O adds over an arbitrary rotation of the concatenated heads",
    "ablate": "how much each token's output depends on the zeroed heads",
    "scale": "how much each token's output moves when one head is turned up or down",
}


def meaning(mode: str) -> str:
    """What the output change means for a what-if mode, with how to read its numbers."""
    return (
        f"What the change means: {MEANING.get(mode, MEANING['identity'])}. Relative change 0: the same output; "
        "1: a change as large as the output itself. Cosine 1: the same direction; 0: unrelated; −1: reversed."
    )


@dataclass(frozen=True)
class WoPlan:
    titles: tuple[str, str]  # the layer's W^O, the W^O in use
    cosine: str  # the cosine's name in the change figure


def wo_plan(where: str, own: bool, weights_file: bool, edits: dict, wo_shape: tuple[int, ...], routed: bool) -> WoPlan:
    """The two W^O figures' titles (shape [h · d_head × d_model], one band per head, or per head of each expert for a
    routed layer) and the cosine's name. ``own``: own weights (``weights_file``: loaded from a file)."""
    origin = "learned" if not own else "from your file" if weights_file else "initialised, not learned"
    bands = "head" if not routed else "head of each expert (each token uses those of its chosen experts)"
    size = f"[{wo_shape[0] * wo_shape[1]} × {wo_shape[2]}]"
    titles = (f"W^O of {where} ({origin})", f"W^O in use: {in_use(edits, origin)}")
    cosine = "cosine to the output with the " + ("learned" if not own else "original") + " W^O"
    return WoPlan((f"{titles[0]}   {size}, one band per {bands}", f"{titles[1]}   {size}, one band per {bands}"),
                  cosine)  # fmt: skip
