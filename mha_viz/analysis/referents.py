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
_PUNCT = ".,;:!?\"'()[]{}…“”‘’«»"  # set aside around a word when matching words ("tired." is "tired")


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


def specific_head(patterns: np.ndarray, q: int, k: int) -> tuple[int, int, float, float, float]:
    """(layer, head, weight, others' mean, others' max) of the head where query ``q``'s weight on key ``k`` stands
    out most from the other queries' weight on that key: the largest weight(q, k) − mean over the other queries
    that can see ``k`` (a key no head gives any weight from a row is masked for it). A head where every token
    gives ``k`` much weight (a sink, a "look at the subject" head) says nothing about ``q``; this one does.
    Ties go to the lowest layer, then the lowest head. Shapes: patterns [L, H, n_q, n_k]."""
    p = np.asarray(patterns)
    if p.ndim != 4 or not (0 <= q < p.shape[2] and 0 <= k < p.shape[3]):
        raise ValueError(f"need patterns [L, H, n_q, n_k] and q, k inside them; got {p.shape}, q={q}, k={k}")
    column = p[:, :, :, k]  # [L, H, n_q]
    if not np.all(np.isfinite(column)):
        raise ValueError("the patterns hold NaN or infinite weights")
    others = [i for i in range(p.shape[2]) if i != q and bool((column[:, :, i] > 0).any())]
    if not others:
        layer, head, weight = focus_head(p, q, k)
        return layer, head, weight, 0.0, 0.0
    rest = column[:, :, others]  # [L, H, n_others]
    lift = column[:, :, q] - rest.mean(-1)  # [L, H]
    layer, head = np.unravel_index(int(np.argmax(lift)), lift.shape)
    return (int(layer), int(head), float(column[layer, head, q]), float(rest[layer, head].mean()),
            float(rest[layer, head].max()))  # fmt: skip


def word(label: str) -> str:
    """A label's word, lowercased: "the (5)" -> "the", "It" -> "it", "Ġit" stays as is (decoders' labels are
    already readable)."""
    m = _POSITION.match(label)
    return (m[1] if m else label).strip().lower()


def default_pair(labels: Sequence[str]) -> tuple[int, int] | None:
    """(query, key) indices the app looks at first: "it" → "animal" when the text has both (for a repeated text,
    the last "it" and the nearest "animal" before it).

    Otherwise: the query is the last pronoun (it, he, she, they, him, her, them, its, his, their) and the key
    the word right after the first article (the, a, an) of the pronoun's own sentence, else of the sentence before
    it (a pronoun's referent comes shortly before it; in a long text the text's first article is hundreds of tokens
    away), else of the whole text before it, e.g. "She gave him the book because he had asked for it" → ("it",
    "book"). None when the text has no pronoun or no article before it.
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
    ends = [i for i in range(q) if words[i].strip()[-1:] in {".", "!", "?"}]  # "." or a word token "tired."
    starts = [e + 1 for e in ends[-1:-3:-1]]  # the pronoun's own sentence, then from the one before it
    for first in (*starts, 0):
        for i in range(first, q - 1):
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


def shared_pairs(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs (i in a, j in b) of the tokens two texts share, in order: their common start and end as they
    are, difflib's matching blocks between. (difflib alone can pair a repeated text shifted by one sentence: the
    longest block of "S S S" against "S' S S" is the first two S with the last two.)"""
    n = min(len(a), len(b))
    start = next((i for i in range(n) if a[i] != b[i]), n)
    end = next((k for k in range(n - start) if a[len(a) - 1 - k] != b[len(b) - 1 - k]), n - start)
    middle = difflib.SequenceMatcher(a=a[start : len(a) - end], b=b[start : len(b) - end], autojunk=False)
    pairs = [(i, i) for i in range(start)]
    for block in middle.get_matching_blocks():
        pairs.extend((start + block.a + k, start + block.b + k) for k in range(block.size))
    pairs.extend((len(a) - end + k, len(b) - end + k) for k in range(end))
    return pairs


def rank_heads(values: np.ndarray, top: int = 10) -> list[tuple[int, int, float]]:
    """The ``top`` heads by |value|, largest first (ties: lowest layer, then head). Shapes: values [L, H]."""
    v = np.asarray(values, dtype=np.float64)
    order = np.argsort(-np.abs(v), axis=None, kind="stable")[:top]
    H = v.shape[1]
    return [(int(i // H), int(i % H), float(v.flat[i])) for i in order]


def bare(token: str) -> str:
    """A whitespace-split word without the punctuation around it: "tired." -> "tired", "(it)" -> "it"."""
    return token.strip(_PUNCT) or token


def differing_words(a: str, b: str) -> tuple[str, str] | None:
    """The one word that differs between two texts (split on spaces), without the punctuation around it:
    ("tired", "wide") for "… too tired." and "… too wide."; else None."""
    wa, wb = a.split(), b.split()
    if len(wa) == len(wb):  # position by position: difflib aligns a repeated text shifted by one sentence
        at = [n for n, (x, y) in enumerate(zip(wa, wb, strict=True)) if x != y]
        return (bare(wa[at[0]]), bare(wb[at[0]])) if len(at) == 1 else None
    ops = [op for op in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(ops) != 1 or ops[0][0] != "replace":
        return None
    _, i1, i2, j1, j2 = ops[0]
    if i2 - i1 != 1 or j2 - j1 != 1:
        return None
    return bare(wa[i1]), bare(wb[j1])


def occurrences(text: str, word: str) -> int:
    """How many whitespace-split words of ``text`` are ``word`` once their punctuation is set aside."""
    return sum(bare(w) == word for w in text.split())


def replace_word(text: str, old: str, new: str, first: bool = False) -> str | None:
    """``text`` with its last (``first``: first) whole word ``old`` replaced by ``new`` (spacing and the
    punctuation around the word kept: "tired." -> "wide."), or None when ``old`` is not one of its words."""
    old, new = old.strip(), new.strip()
    if not old or not new or any(ch.isspace() for ch in old + new):
        return None
    parts = re.split(r"(\s+)", text)
    order = range(len(parts)) if first else range(len(parts) - 1, -1, -1)
    for n in order:
        if bare(parts[n]) == old or parts[n] == old:
            start = parts[n].find(old)
            parts[n] = parts[n][:start] + new + parts[n][start + len(old) :]
            return "".join(parts)
    return None


def second_sentence(text: str, fallback: str) -> str:
    """The default second sentence: ``text`` with its first "tired" made "wide" (or "wide" made "tired"),
    punctuation kept, so the two differ in one word whatever the first sentence is (in a long text, the word in
    its first sentence: the one the first "it" refers across); ``fallback`` when it has neither word."""
    for old, new in (("tired", "wide"), ("wide", "tired")):
        out = replace_word(text, old, new, first=True)
        if out is not None:
            return out
    return fallback


def default_candidates(labels: Sequence[str], near: int | None = None) -> tuple[int, int] | None:
    """Two candidate referents among ``labels`` (the tokens both sentences share): "animal" and "street" when
    both are there, else the words right after the first two articles (the, a, an); None if there are not two.
    A repeated word (labels "animal (14)") counts too: the occurrence nearest before index ``near`` (the focus
    token) when given, else the first."""
    words = [word(label) for label in labels]

    def pick(found: list[int]) -> int:
        before = [i for i in found if near is None or i < near]
        return before[-1] if before and near is not None else found[0]

    animals = [i for i, w in enumerate(words) if w == "animal"]
    streets = [i for i, w in enumerate(words) if w == "street"]
    if animals and streets:
        return pick(animals), pick(streets)
    after = [i + 1 for i in range(len(words) - 1) if words[i] in ARTICLES and words[i + 1] not in ARTICLES]
    return (after[0], after[1]) if len(after) >= 2 else None


def focus_default(labels: Sequence[str], changed: int | None) -> tuple[int, str] | None:
    """The focus token Two sentences opens on: the "it" nearest before the first changed token ``changed``
    (the first "it" when none is before it, or when ``changed`` is None), and a sentence saying which
    occurrence it is when the text has several; None when the text has no "it".

    E.g. a long text repeating "… because it was too tired." 37 times with its first "tired" changed:
    (index of the first "it", "“it” occurs 37 times: the focus is the 1st of 37 (token 8), ...")."""
    its = [i for i, label in enumerate(labels) if word(label) == "it"]
    if not its:
        return None
    before = [i for i in its if changed is None or i < changed]
    q = before[-1] if before and changed is not None else its[0]
    if len(its) == 1:
        return q, ""
    nth = its.index(q) + 1
    where = "" if changed is None else f", the last one before the changed word (token {changed})"
    return q, f"“it” occurs {len(its)} times: the focus is the {ordinal(nth)} of {len(its)} (token {q}){where}."


def ordinal(k: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"
