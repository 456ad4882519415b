"""Two sentences' defaults for a text without the seed example's words: the focus is a pronoun of the text, the
candidate referents the two words the pronoun attends to most (mean over every layer and head), function words and
special tokens set aside; each comes with a one-line reason. Pure numpy (no model, no Streamlit).

(Before: a long text without "animal" opened on "it (502)" → "old", the word after its first article.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mha_viz.analysis.referents import ARTICLES, PRONOUNS, bare, word

_FUNCTION = (
    "a about above after again against all am an and any are as at be because been before being below between both "
    "but by can could did didn do does doing don down during each few for from had has have having here how if in "
    "into is isn just me more most my no nor not now of off on once only or other our out over own same should so "
    "some such than that then there these this those through to too under until up very was wasn we were what when "
    "where which while who whom why will with would you your s t ll re ve d m"
)
FUNCTION_WORDS = frozenset(_FUNCTION.split())
SENTENCE_ENDS = frozenset({".", "!", "?"})


def content_word(label: str) -> bool:
    """Whether a token's label is a word that can be a referent: letters only (its punctuation set aside), at least
    two of them, not a word piece ("##ing"), a function word, an article or a pronoun."""
    w = bare(word(label))
    return w.isalpha() and len(w) >= 2 and w not in FUNCTION_WORDS | PRONOUNS | ARTICLES and not label.startswith("##")


def pronoun_focus(labels: Sequence[str], changed: int | None) -> tuple[int, str] | None:
    """The pronoun (it, he, she, they, ...) nearest before index ``changed`` (the first changed token; the last
    pronoun when none is before it or ``changed`` is None), and why; None when the text has none."""
    found = [i for i, label in enumerate(labels) if word(label) in PRONOUNS]
    if not found:
        return None
    before = [i for i in found if changed is not None and i < changed]
    q = before[-1] if before else found[-1]
    where = "the last one before the changed word" if before else "the text's last pronoun"
    return q, f"The focus is the pronoun “{labels[q]}” ({where}): the text has no “it” both sentences share."


def attended_candidates(
    weights: np.ndarray, labels: Sequence[str], focus: int, special: Sequence[bool], name: str | None = None
) -> tuple[int, int, str] | None:
    """The two candidate referents: the content words (content_word, not special, not the focus) the focus row
    gives most weight, among the words of its sentence and the one before, before it (a pronoun's referent comes
    shortly before it) when two are there, else among all the words before it, else among all; the first gets the
    most. Returns (first, second, why), or None with fewer than two such words. ``focus`` may be len(labels) (a
    query that is not among the keys, as in cross-attention: every word is before it); ``name``: its label.

    Shapes: weights [n] (the focus row, e.g. its mean over every layer and head); labels, special [n]."""
    w = np.asarray(weights, dtype=np.float64)
    words = [i for i, label in enumerate(labels) if i != focus and not special[i] and content_word(label)]
    ends = [i for i, label in enumerate(labels[:focus]) if word(label) in SENTENCE_ENDS]
    start = ends[-2] if len(ends) >= 2 else 0  # the focus token's sentence and the one before it
    near = [i for i in words if start < i < focus]
    before = [i for i in words if i < focus]
    pool, where = next(
        ((p, w_) for p, w_ in ((near, "in its sentence and the one before "), (before, "before it "), (words, ""))
         if len(p) >= 2),
        ([], ""),
    )  # fmt: skip
    if len(pool) < 2:
        return None
    first, second = sorted(pool, key=lambda i: (-w[i], i))[:2]
    why = (
        f"Candidates: the two words {where}that “{name or labels[focus]}” attends to most in the first sentence "
        f"(mean over every layer and head; function words and special tokens set aside): “{labels[first]}” "
        f"({w[first]:.3f}) and “{labels[second]}” ({w[second]:.3f})."
    )
    return first, second, why
