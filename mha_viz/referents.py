"""Who does "it" refer to? Finding the head that tells the story, and measuring how a word swap moves it.

The classic example (seed 003, 004): in "The animal didn't cross the street because it was too tired" one
head links "it" to "animal"; with "wide" instead of "tired", "it" should move towards "street". Pure numpy
on attention patterns (no model, no Streamlit).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

import numpy as np

PRONOUNS = frozenset({"it", "he", "she", "they", "him", "her", "them", "its", "his", "their"})
ARTICLES = frozenset({"the", "a", "an"})
_POSITION = re.compile(r"^(.*) \(\d+\)$")  # distinct labels: a repeated word gets " (position)"


def focus_head(patterns: np.ndarray, q: int, k: int) -> tuple[int, int, float]:
    """(layer, head, weight) of the head where query ``q`` puts the most weight on key ``k``.

    Ties go to the lowest layer, then the lowest head (row-major argmax). Shapes: patterns [L, H, n_q, n_k].
    """
    p = np.asarray(patterns)
    if p.ndim != 4 or not (0 <= q < p.shape[2] and 0 <= k < p.shape[3]):
        raise ValueError(f"need patterns [L, H, n_q, n_k] and q, k inside them; got {p.shape}, q={q}, k={k}")
    w = p[:, :, q, k]  # [L, H]
    if not np.all(np.isfinite(w)):
        raise ValueError("the patterns hold NaN or infinite weights")
    layer, head = np.unravel_index(int(np.argmax(w)), w.shape)  # first maximum in row-major order
    return int(layer), int(head), float(w[layer, head])


def word(label: str) -> str:
    """A label's word, lowercased: "the (5)" -> "the", "It" -> "it", "Ġit" stays as is (decoders' labels are
    already readable)."""
    m = _POSITION.match(label)
    return (m[1] if m else label).strip().lower()


def default_pair(labels: Sequence[str]) -> tuple[int, int] | None:
    """(query, key) indices the app looks at first: "it" → "animal" when the text has both (for a repeated text,
    the last "it" and the nearest "animal" before it).

    Otherwise: the query is the last pronoun (it, he, she, they, him, her, them, its, his, their) and the key
    the word right after the first article (the, a, an) before it, e.g. "She gave him the book because he had
    asked for it" → ("it", "book"). None when the text has no pronoun or no article before it.
    """
    words = [word(label) for label in labels]
    its = [i for i, w in enumerate(words) if w == "it"]
    if its and "animal" in words:  # repeated text: the last "it" and the nearest "animal" before it
        q = its[-1]
        before = [i for i in range(q) if words[i] == "animal"]
        return q, before[-1] if before else words.index("animal")
    pronouns = [i for i, w in enumerate(words) if w in PRONOUNS]
    if not pronouns:
        return None
    q = pronouns[-1]
    for i in range(q - 1):
        if words[i] in ARTICLES and words[i + 1] not in PRONOUNS | ARTICLES:
            return q, i + 1
    return None


def shared_weights(row: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A focus row renormalised over the shared keys only, and the mass it had there.

    Shapes: row [..., n]; keys [m] indices -> ([..., m], [...]). Where a row has no weight on the shared keys
    (mass 0) the renormalised row is 0, never NaN.
    """
    sub = np.asarray(row, dtype=np.float64)[..., keys]
    mass = sub.sum(-1)
    out = np.divide(sub, mass[..., None], out=np.zeros_like(sub), where=mass[..., None] > 0)
    return out, mass


def referent_shift(
    pa: np.ndarray,
    pb: np.ndarray,
    qa: int,
    qb: int,
    pairs: Sequence[tuple[int, int]],
    cands_a: tuple[int, int],
    cands_b: tuple[int, int],
) -> dict[str, np.ndarray]:
    """How much of the focus token's weight moves from candidate referent c1 to c2 between two sentences.

    Sentence a's focus token is ``qa``, sentence b's is ``qb``; ``pairs`` are the (i in a, j in b) tokens both
    sentences share; the candidates are c1 = (cands_a[0] in a, cands_b[0] in b) and c2 likewise, both shared.
    Each focus row is renormalised over the shared keys only, so weight on a word only one sentence has (the
    swapped "tired" / "wide" itself) does not count:
        w_s(c) = p_s[q_s, c] / Σ_{shared keys k} p_s[q_s, k]          (s = a, b)
        moved  = (w_b(c2) − w_a(c2)) − (w_b(c1) − w_a(c1))
    moved > 0: going from a to b the focus token turns from c1 towards c2 (the story for tired → wide with
    c1 = "animal", c2 = "street"); moved < 0: the other way. Range −2 … 2.

    Shapes: pa [L, H, na, na], pb [L, H, nb, nb] -> every value [L, H]: "moved", "a1", "a2", "b1", "b2"
    (the renormalised w_a(c1), w_a(c2), w_b(c1), w_b(c2)) and "shared_a", "shared_b" (the raw weight the
    focus row had on the shared keys, before renormalising).
    """
    pa, pb = np.asarray(pa), np.asarray(pb)
    if pa.ndim != 4 or pb.ndim != 4 or pa.shape[:2] != pb.shape[:2]:
        raise ValueError(f"need patterns [L, H, n, n] of the same model; got {pa.shape} and {pb.shape}")
    if not pairs:
        raise ValueError("the two sentences share no tokens")
    ia = np.asarray([i for i, _ in pairs], dtype=int)
    ib = np.asarray([j for _, j in pairs], dtype=int)
    where_a, where_b = {int(i): n for n, i in enumerate(ia)}, {int(j): n for n, j in enumerate(ib)}
    if len(cands_a) != 2 or len(cands_b) != 2:
        raise ValueError("need two candidate referents in each sentence")
    slots = []
    for ca, cb in zip(cands_a, cands_b, strict=True):
        if ca not in where_a or cb not in where_b or where_a[ca] != where_b[cb]:
            raise ValueError(f"candidate ({ca}, {cb}) is not a token both sentences share")
        slots.append(where_a[ca])
    wa, mass_a = shared_weights(pa[:, :, qa, :], ia)  # [L, H, m], [L, H]
    wb, mass_b = shared_weights(pb[:, :, qb, :], ib)
    a1, a2 = wa[..., slots[0]], wa[..., slots[1]]
    b1, b2 = wb[..., slots[0]], wb[..., slots[1]]
    return {
        "moved": (b2 - a2) - (b1 - a1),
        "a1": a1,
        "a2": a2,
        "b1": b1,
        "b2": b2,
        "shared_a": mass_a,
        "shared_b": mass_b,
    }


def rank_heads(values: np.ndarray, top: int = 10) -> list[tuple[int, int, float]]:
    """The ``top`` heads by |value|, largest first (ties: lowest layer, then head). Shapes: values [L, H]."""
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(-np.abs(v), axis=None, kind="stable")[:top]
    H = v.shape[1]
    return [(int(i // H), int(i % H), float(v.flat[i])) for i in order]


def differing_words(a: str, b: str) -> tuple[str, str] | None:
    """The one word that differs between two texts (split on spaces): ("tired", "wide"), else None."""
    wa, wb = a.split(), b.split()
    ops = [op for op in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return None
    _, i1, i2, j1, j2 = ops[0]
    if i2 - i1 != 1 or j2 - j1 != 1:
        return None
    return wa[i1], wb[j1]


def replace_word(text: str, old: str, new: str) -> str | None:
    """``text`` with its last whole word ``old`` replaced by ``new`` (spacing kept), or None when ``old`` is not
    one of its words. Punctuation stuck to a word counts as part of it ("tired." is not "tired")."""
    old, new = old.strip(), new.strip()
    if not old or not new or any(ch.isspace() for ch in old + new):
        return None
    parts = re.split(r"(\s+)", text)
    for n in range(len(parts) - 1, -1, -1):
        if parts[n] == old:
            parts[n] = new
            return "".join(parts)
    return None


def second_sentence(text: str, fallback: str) -> str:
    """The default second sentence: ``text`` with its last "tired" made "wide" (or "wide" made "tired"), so the
    two differ in one word whatever the first sentence is; ``fallback`` when it has neither word."""
    for old, new in (("tired", "wide"), ("tired.", "wide."), ("wide", "tired"), ("wide.", "tired.")):
        out = replace_word(text, old, new)
        if out is not None:
            return out
    return fallback


def default_candidates(labels: Sequence[str]) -> tuple[int, int] | None:
    """Two candidate referents among ``labels`` (the tokens both sentences share): "animal" and "street" when
    both are there, else the words right after the first two articles (the, a, an); None if there are not two."""
    labels = list(labels)
    if "animal" in labels and "street" in labels:
        return labels.index("animal"), labels.index("street")
    words = [word(label) for label in labels]
    after = [i + 1 for i in range(len(words) - 1) if words[i] in ARTICLES and words[i + 1] not in ARTICLES]
    return (after[0], after[1]) if len(after) >= 2 else None
