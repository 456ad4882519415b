"""Head importance's choices as data: which texts are measured, whether the scan starts by itself, and the words and
rows of the most important heads and the pruning curve. The view (ui/views/importance.py) draws them. Pure numpy (the
importance and the curve are the study's numbers, passed in)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mha_viz.config import AUTO_SCAN_TOKENS

SKIPPED = ("humpty dumpty sat on",)  # an example text not measured with the set (a few tokens, no sentence)


def measured_texts(choice: str, text: str, examples: Sequence[str]) -> tuple[str, ...]:
    """The texts measured: the page's text alone ("this text"), or with the example sentences ("set")."""
    if choice == "this text":
        return (text,)
    return (text, *(t for t in examples if t not in (text, *SKIPPED)))


def starts_by_itself(n_heads: int, n_texts: int, tokens: int, auto_heads: int) -> bool:
    """Whether the per-head scan starts without the button: at most ``auto_heads`` heads × texts, a short text."""
    return n_heads * n_texts <= auto_heads and tokens <= AUTO_SCAN_TOKENS


def most_important(imp: np.ndarray, order: Sequence[tuple[int, int]], top: int = 5) -> str:
    """The ``top`` heads removed last in ``order`` (least important first), in words. Shapes: imp [L, H]."""
    return "Most important: " + ", ".join(f"layer {la} head {h} ({imp[la, h]:.4g})" for la, h in order[::-1][:top])


def importance_rows(imp: np.ndarray) -> list[list]:
    """The importance download's rows: layer, head, importance. Shapes: imp [L, H]."""
    L, H = imp.shape
    return [[la, h, f"{imp[la, h]:.6g}"] for la in range(L) for h in range(H)]


def curve_summary(curve: dict[str, np.ndarray], order: Sequence[tuple[int, int]], n: int) -> str:
    """The pruning curve at half the heads removed and at all removed, and the heads that survive longest.
    Shapes: curve["steps"] [s], curve["by_importance"] [s], curve["random"] [seeds, s]."""
    steps, by, rand = curve["steps"], curve["by_importance"], curve["random"]
    half = int(np.argmin(np.abs(steps / n - 0.5)))
    return (
        f"With {steps[half]} of {n} heads removed: {by[half]:.4g} least-important-first, "
        f"{rand[:, half].mean():.4g} in random order. All heads removed: {by[-1]:.4g}. "
        "The heads that survive longest (removed last): " + ", ".join(f"L{la} H{h}" for la, h in order[::-1][:10]) + "."
    )


def curve_rows(curve: dict[str, np.ndarray], n: int) -> list[list]:
    """The pruning download's rows: heads removed, share, by importance, random mean, min, max."""
    by, rand = curve["by_importance"], curve["random"]
    return [
        [int(k), f"{k / n:.6g}", f"{by[i]:.6g}", *(f"{v:.6g}" for v in (
            rand[:, i].mean(), rand[:, i].min(), rand[:, i].max()))]
        for i, k in enumerate(curve["steps"])
    ]  # fmt: skip
