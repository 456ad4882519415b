"""What the score split (studies/why.py) shows: the contrast of two keys, sources grouped (the embeddings, each
layer's heads, each MLP, the biases), the largest query-source × key-source terms, each side's totals, one sentence
naming the top pair, and the rows of the CSV. Pure numpy: no model runs here.

A split ``w`` has: labels, query, key, versus, q_sources and k_sources ((label, kind, layer, head) tuples), terms
[n_q, n_k], position, score, weight and, with a second key, terms_versus, position_versus, score_versus,
weight_versus; softcap (None or the cap the model applies after the split score)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BIAS_KINDS = frozenset({"attn_bias", "norm_bias", "proj_bias"})


def group_of(source: Sequence) -> str:
    """The group a source (label, kind, layer, head) is shown in: embeddings, "L3 heads", "L3 MLP", biases."""
    _label, kind, layer, _head = source
    if kind == "embed":
        return "embeddings"
    if kind == "head":
        return f"L{layer} heads"
    if kind == "mlp":
        return f"L{layer} MLP"
    return "biases"


def shown_terms(w: object, contrast: bool = True) -> tuple[np.ndarray, float, float]:
    """(terms [n_q, n_k], position term, the model's score) of the score, or of the contrast s_ij − s_ij' when the
    split has a second key and ``contrast``."""
    if contrast and w.versus is not None:
        return w.terms - w.terms_versus, w.position - w.position_versus, w.score - w.score_versus
    return w.terms, w.position, w.score


def grouped(terms: np.ndarray, q_sources: Sequence, k_sources: Sequence, expand: bool) -> tuple:
    """(row labels, column labels, [rows, cols] sums): each source alone (``expand``) or summed by group_of."""
    if expand:
        return [s[0] for s in q_sources], [s[0] for s in k_sources], np.asarray(terms, dtype=float)
    rows = list(dict.fromkeys(group_of(s) for s in q_sources))
    cols = list(dict.fromkeys(group_of(s) for s in k_sources))
    r = np.zeros((len(rows), len(q_sources)))
    r[[rows.index(group_of(s)) for s in q_sources], np.arange(len(q_sources))] = 1.0
    c = np.zeros((len(k_sources), len(cols)))
    c[np.arange(len(k_sources)), [cols.index(group_of(s)) for s in k_sources]] = 1.0
    return rows, cols, r @ np.asarray(terms, dtype=float) @ c


def crop(rows: list[str], cols: list[str], m: np.ndarray, n: int) -> tuple[list[str], list[str], np.ndarray]:
    """The ``n`` rows and ``n`` columns holding the largest |terms| (in their order): what a heatmap can show."""
    ri = np.sort(np.argsort(-np.abs(m).max(axis=1), kind="stable")[:n])
    ci = np.sort(np.argsort(-np.abs(m).max(axis=0), kind="stable")[:n])
    return [rows[i] for i in ri], [cols[i] for i in ci], m[np.ix_(ri, ci)]


def top_pairs(rows: Sequence[str], cols: Sequence[str], m: np.ndarray, n: int = 5) -> list[tuple[str, str, float]]:
    """The ``n`` (query source, key source, term) with the largest |term|, largest first."""
    flat = np.argsort(-np.abs(m), axis=None, kind="stable")[:n]
    return [(rows[r], cols[c], float(m[r, c])) for r, c in zip(*np.unravel_index(flat, m.shape), strict=True)]


def side_totals(rows: Sequence[str], cols: Sequence[str], m: np.ndarray) -> tuple[dict, dict]:
    """({query source: its row's sum}, {key source: its column's sum}): what each side's sources bring in all."""
    return dict(zip(rows, m.sum(axis=1).tolist(), strict=True)), dict(zip(cols, m.sum(axis=0).tolist(), strict=True))


def sentence(w: object, rows: Sequence[str], cols: Sequence[str], m: np.ndarray, contrast: bool = True) -> str:
    """One sentence naming the top pair: the largest term pushing the way the score (or the difference) went, and the
    largest pulling the other way, e.g. "'it' scores 'animal' more than 'street' (3.63 against 1.12) mostly because
    of L2 MLP in 'it' × L0 MLP in 'animal' (+0.40 of the +2.51 difference); most against: ... (−0.21)"."""
    _terms, _pos, score = shown_terms(w, contrast)
    q, k = w.labels[w.query], w.labels[w.key]
    if contrast and w.versus is not None:
        more, v = ("more" if score >= 0 else "less"), w.labels[w.versus]
        head = f"'{q}' scores '{k}' {more} than '{v}' ({w.score:.3g} against {w.score_versus:.3g})"
        whole, k = f"of the {score:+.3g} difference", f"{k}' vs '{v}"  # key-side terms: in the key minus in the other
    else:
        head, whole = f"'{q}' scores '{k}' {w.score:.3g}", "of the score"
    sign = 1.0 if score >= 0 else -1.0
    m = np.asarray(m, dtype=float)
    r, c = np.unravel_index(int(np.argmax(sign * m)), m.shape)  # the largest push the way the score went
    text = f"{head} mostly because of {rows[r]} in '{q}' × {cols[c]} in '{k}' ({m[r, c]:+.3g} {whole})"
    r2, c2 = np.unravel_index(int(np.argmin(sign * m)), m.shape)
    if sign * m[r2, c2] < 0:
        text += f"; most against: {rows[r2]} in '{q}' × {cols[c2]} in '{k}' ({m[r2, c2]:+.3g})"
    return text + "."


def csv_rows(w: object, contrast: bool = True) -> list[tuple[str, str, float]]:
    """(query_source, key_source, contribution) for every term, then the position/bias term and the model's score
    (before the soft-cap where the model caps): the rows of `mha-viz why --out`."""
    terms, pos, score = shown_terms(w, contrast)
    rows = [(qs[0], ks[0], float(terms[a, b])) for a, qs in enumerate(w.q_sources) for b, ks in enumerate(w.k_sources)]
    cap = " (before the soft-cap)" if w.softcap else ""
    return [*rows, ("position bias", "", float(pos)), (f"model score{cap}", "", float(score))]


def default_keys(
    row: np.ndarray, visible: np.ndarray | None = None, prefer: np.ndarray | None = None
) -> tuple[int, int | None]:
    """(the top key, the second key) of a query's weights ``row`` [k] among the ``visible`` keys (the mask's), and
    among those ``prefer`` (words other than the query itself, say) where any is: the view's first pair to contrast;
    the second is None when only one key is left."""
    row = np.asarray(row, dtype=float)
    seen = np.ones(row.shape, dtype=bool) if visible is None else np.asarray(visible, dtype=bool)
    if prefer is not None and (seen & np.asarray(prefer, dtype=bool)).any():
        seen = seen & np.asarray(prefer, dtype=bool)
    order = [int(i) for i in np.argsort(-np.where(seen, row, -np.inf), kind="stable") if seen[i]]
    order = order or [int(np.argmax(row))]  # nothing visible: the row's top key all the same
    return order[0], (order[1] if len(order) > 1 else None)


def plan(w: object, contrast: bool = True, expand: bool = False, top: int = 12) -> dict:
    """What the view draws: the heatmap's rows, cols and terms (the ``top`` rows and columns with the largest terms),
    the two sides' totals (every source or group), the sentence, the title and what the terms add up to."""
    terms, pos, score = shown_terms(w, contrast)
    rows, cols, m = grouped(terms, w.q_sources, w.k_sources, expand)
    q_tot, k_tot = side_totals(rows, cols, m)
    what = "s_ij − s_ij'" if contrast and w.versus is not None else "s_ij"
    shown_rows, shown_cols, shown = crop(rows, cols, m, top)
    q, k = w.labels[w.query], w.labels[w.key]
    pair = f"“{q}” → “{k}”" + (f" against “{w.labels[w.versus]}”" if contrast and w.versus is not None else "")
    left = "" if shown.size == m.size else f" (the {len(shown_rows)} × {len(shown_cols)} largest of {m.shape[0]} × " \
        f"{m.shape[1]})"  # fmt: skip
    return {
        "rows": shown_rows, "cols": shown_cols, "terms": shown, "q_totals": dict(crop_totals(q_tot, top)),
        "k_totals": dict(crop_totals(k_tot, top)), "sentence": sentence(w, rows, cols, m, contrast),
        "title": f"Layer {w.layer}, head {w.head}: {pair}, {what} = {score:+.3f} by source{left}", "unit": what,
        "position": pos, "score": score,
    }  # fmt: skip


def crop_totals(totals: dict, top: int) -> list[tuple[str, float]]:
    """The ``top`` totals with the largest |value|, largest first."""
    return sorted(totals.items(), key=lambda kv: -abs(kv[1]))[:top]


def head_sources(w: object, contrast: bool = True, top: int = 6) -> list[tuple[str, int, int, int, float]]:
    """The head sources with the largest totals (of the contrast where there is a second key), largest |total|
    first, for one step of a chain: (side "query" or "key", layer, head, the position it wrote into (the query; the
    key), total)."""
    terms, _, _ = shown_terms(w, contrast)  # [n_q, n_k]
    found = []
    for side, srcs, totals, token in (
        ("query", w.q_sources, terms.sum(1), w.query),
        ("key", w.k_sources, terms.sum(0), w.key),
    ):
        heads = [(s, t) for s, t in zip(srcs, totals, strict=True) if s[1] == "head"]
        found += [(side, int(s[2]), int(s[3]), int(token), float(t)) for s, t in heads]
    return sorted(found, key=lambda r: -abs(r[4]))[:top]
