"""Two sentences' choices as data: the tokens both texts share, the focus token's options and default (and why), the
candidate referents, the note on a repeated word, the measured shift and the verdict. The view
(ui/views/two_sentences.py) draws them. Pure (numpy on the focus rows; no model, no Streamlit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.moves import destinations, switched_weight, switches
from mha_viz.analysis.referent_pick import attended_candidates, pronoun_focus
from mha_viz.analysis.referents import (
    default_candidates,
    differing_words,
    focus_default,
    occurrences,
    referent_shift,
    shared_pairs,
    word,
)

SECOND_TEXT = "The animal didn't cross the street because it was too wide"  # the second sentence's fallback
LAST = "the last token (each sentence's own)"


@dataclass(frozen=True)
class TwoFocus:
    """The shared tokens and the focus token's choices. ``pairs``: (i in the first text, j in the second) of the
    tokens both share; ``shared``: their labels in the first text; ``choices``: (option, (qa, qb)) in order."""

    pairs: tuple[tuple[int, int], ...]
    shared: tuple[str, ...]
    changed: int  # index into pairs of the first difference (len(pairs): none)
    first_change: int  # the first text's first changed token
    choices: tuple[tuple[str, tuple[int, int]], ...]
    default: str
    note: str  # said under the picker while it shows the default ("" for nothing)
    causal_note: str  # said above the picker under a causal mask ("" otherwise)
    cross: bool

    @property
    def options(self) -> list[str]:
        return [label for label, _ in self.choices]

    def rows(self, focus: str) -> tuple[int, int]:
        """(qa, qb): the focus token's query position in each text."""
        return dict(self.choices)[focus]

    def slot(self, label: str) -> tuple[int, int]:
        """A shared token's (i, j)."""
        return self.pairs[self.shared.index(label)]

    def near(self, focus: str) -> int | None:
        """The focus token's index in ``shared`` (None in cross-attention or when it is not shared)."""
        return None if self.cross or focus not in self.shared else self.shared.index(focus)


def two_focus(
    keys_a: Sequence[str], labels_a: Sequence[str], pieces_b: Sequence[str], queries: Sequence[str] | None,
    causal: bool,
) -> TwoFocus | None:  # fmt: skip
    """The focus plan: the tokens both texts share (pieces ``keys_a`` and ``pieces_b``; ``labels_a`` the first
    text's key labels), and the focus options. ``queries``: the decoder's labels in cross-attention (the same in both
    runs), else None. Self-attention: the "it" nearest before the first change, else a pronoun, else the first shared
    token; under a causal mask the last token of each sentence and the shared tokens at or after the change. None when
    the texts share no token."""
    a, b = list(keys_a), list(pieces_b)
    pairs = shared_pairs(a, b)
    if not pairs:
        return None
    shared = [labels_a[i] for i, _ in pairs]
    changed = next((n for n, p in enumerate(pairs) if p != (n, n)), len(pairs))  # tokens before it are the same
    first_change = pairs[changed - 1][0] + 1 if changed else 0
    at = None if changed == len(pairs) else changed
    if queries is not None:
        choices = {label: (i, i) for i, label in enumerate(queries)}
        found = focus_default(list(queries), None)
        default = queries[found[0]] if found else queries[-1]
        why = "" if found else "The decoder text has no “it”: the focus is its last token."
    else:
        choices = dict(zip(shared, pairs, strict=True))
        found = focus_default(shared, at) or pronoun_focus(shared, at)
        default = shared[found[0]] if found else shared[0]
        why = "" if found else f"The text has no pronoun both sentences share: the focus is “{shared[0]}”."
    causal_note = ""
    if causal and queries is None:
        causal_note = (
            "Under a causal mask a token sees only what comes before it, so a shared token before the first change "
            f"(here the first {changed} tokens, up to “{a[changed - 1] if changed else '–'}”) attends exactly the same "
            "way in both sentences. The comparison that can differ is at or after the changed word: by default the "
            "last token of each sentence (the one that predicts what comes next)."
        )
        choices = {LAST: (len(a) - 1, len(b) - 1), **{lb: p for lb, p in choices.items() if p[0] >= changed}}
        default, why, found = LAST, "", None
    note = why or (found[1] if found else "")
    return TwoFocus(tuple(pairs), tuple(shared), changed, first_change, tuple(choices.items()), default, note,
                    causal_note, queries is not None)  # fmt: skip


def repeat_note(text_a: str, text_b: str, first_change: int) -> str:
    """Which occurrence the second text changes, when the changed word occurs more than once ("" otherwise)."""
    diff = differing_words(text_a, text_b)
    if not diff or occurrences(text_a, diff[0]) <= 1:
        return ""
    return (
        f"“{diff[0]}” occurs {occurrences(text_a, diff[0])} times in the first text; the second text changes the one "
        f"at token {first_change} (“Make the second sentence” changes the first occurrence)."
    )


def seed_words(shared: Sequence[str]) -> bool:
    """Whether the shared tokens hold the seed example's "animal" and "street" (then the candidates need no weights)."""
    return {"animal", "street"} <= {word(label) for label in shared}


def two_candidates(
    plan: TwoFocus, focus: str, key_special: Sequence[bool], row: np.ndarray | None
) -> tuple[tuple[int, int], str]:
    """The default candidate referents (indices into ``plan.shared``) and why: "animal" and "street" when both are
    shared (``row`` may be None then), else the two words the focus token attends to most in the first sentence
    (referent_pick.attended_candidates on ``row``, its mean weight over every layer and head), else the words after
    the first two articles, else the first two shared words. Shapes: row [n_keys of the first text] or None."""
    shared, pairs, near = list(plan.shared), plan.pairs, plan.near(focus)
    found: tuple[int, int] | None
    why = ""
    if seed_words(shared) or row is None:
        found = default_candidates(shared, near)
    else:
        ia = [i for i, _ in pairs]
        special = [bool(key_special[i]) or i == 0 for i in ia]
        picked = attended_candidates(np.asarray(row)[ia], shared, len(shared) if near is None else near, special,
                                     focus)  # fmt: skip
        found, why = ((picked[0], picked[1]), picked[2]) if picked else (default_candidates(shared, near), "")
    if found is None:
        words = [n for n, (i, _) in enumerate(pairs) if not key_special[i] and shared[n] != focus]  # shared words
        found = (words[0], words[1]) if len(words) > 1 else (0, min(1, len(shared) - 1))
    return found, why


def two_shift(
    pa: np.ndarray, pb: np.ndarray, plan: TwoFocus, c1: str, c2: str, key_special: Sequence[bool]
) -> dict[str, np.ndarray]:
    """referents.referent_shift of the focus rows between candidates ``c1`` and ``c2``, with each sentence's
    destinations (moves.destinations: the sinks are special tokens and position 0), the switched weight and the
    referents' positions in the first text ("keys"). Shapes: pa [L, H, 1, na], pb [L, H, 1, nb] (the focus rows)."""
    pairs = list(plan.pairs)
    cands = (plan.slot(c1), plan.slot(c2))
    r = referent_shift(pa, pb, 0, 0, pairs, (cands[0][0], cands[1][0]), (cands[0][1], cands[1][1]))
    slot = {p: n for n, p in enumerate(pairs)}
    sinks = np.asarray([bool(key_special[i]) or i == 0 for i, _ in pairs])  # special tokens, position 0
    r["dest_a"], r["dest_b"] = destinations(pa[:, :, 0], pb[:, :, 0], pairs, (slot[cands[0]], slot[cands[1]]), sinks)
    r["switched"] = switched_weight(r["dest_a"], r["dest_b"])
    r["keys"] = np.asarray([cands[0][0], cands[1][0]])
    return r


def verdict(r: dict[str, np.ndarray], f: str, n1: str, n2: str) -> tuple[bool, str]:
    """(whether any head really switches the focus token from referent 1 to referent 2 (moves.switches), the
    sentence saying so); if none does, the head where referent 2 gained most and where that head's weight went."""
    a, b = r["dest_a"], r["dest_b"]
    found = np.argwhere(switches(a, b))
    if len(found):
        heads = ", ".join(f"layer {la}, head {he}" for la, he in found[:5]) + (" …" if len(found) > 5 else "")
        return True, f"{len(found)} head(s) switch “{f}” from “{n1}” to “{n2}”: {heads}."
    la, he = np.unravel_index(int(np.argmax(b[..., 1] - a[..., 1])), b.shape[:2])
    x, y = a[la, he], b[la, he]
    where = max(((y[2], "the sinks"), (y[3], "the other words"), (y[0], f"“{n1}”")))
    return False, (
        f"No head really switches “{f}” from “{n1}” to “{n2}”: in none does “{n2}” get more of its weight in the "
        f"second sentence than “{n1}”, the sinks together and the other words together. “{n2}” gains most in layer "
        f"{la}, head {he} ({x[1]:.2f} → {y[1]:.2f}), where most of the weight goes to {where[1]} ({where[0]:.2f})."
    )
