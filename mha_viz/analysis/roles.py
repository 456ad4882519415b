"""Head roles (Clark et al. 2019, Voita et al. 2019, Olsson et al. 2022): scores per head and a label.

Most heads of most models park much of their weight on position 0 (the first-token "attention sink",
Xiao et al. 2023), whatever else they do. So every score but ``first`` and ``entropy`` is a share of the
attention that is left after position 0 is taken out, and a head is called a first-token sink only when
what is left does none of the other things. ROLE_RULES states every score exactly (which queries and keys each
one counts, how it is weighted), enough to recompute them; the app and the CLI give that text (docs/cli.md says where).

Shapes: a pattern stack is [n_heads, query_pos, key_pos] (self-attention, so query_pos == key_pos).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np

from mha_viz.analysis.patterns import EPS, row_entropy

ROLE_THRESHOLD = 0.5  # a role needs more than half of the (non-sink) attention on average
BROAD_THRESHOLD = 0.8  # "broad": non-sink rows spread over keys with more than 80% of the uniform entropy
SINK_THRESHOLD = 0.5  # first-token sink: more than half of the attention on position 0 (and no other role)
REPEAT_THRESHOLD = 3  # duplicate-token / induction labels need at least this many query tokens with a repeat
SCORE_KEYS = ("prev", "next", "self", "first", "dup", "induction", "special", "punct", "entropy", "spread")
FIRST_TOKEN_SINK = "first-token sink"
ROLE_RULES = (
    "each head's [n × n] pattern p (query i, key j, positions 0 … n−1) is causal when every weight above the "
    "diagonal is 0: then query i sees keys 0 … i, else all n keys. first = mean of p[i, 0] over the queries "
    "i = 1 … n−1 (position 0 is the sink). entropy = mean over every query, query 0 included, of the row "
    "entropy −Σⱼ p[i, j] ln p[i, j] in nats. Every other score leaves out query 0 and key 0: m(i) = Σ over keys "
    "j ≥ 1 of p[i, j] is query i's non-sink weight, and a query that sees fewer than 2 keys j ≥ 1 is left out "
    "(it has no choice; query 1 of a causal pattern). A share = Σ over its queries of their weight on its keys ÷ "
    "Σ over the same queries of m(i) (0 when that sum is 0), where: prev = key i − 1, over the queries that have "
    "a previous non-sink token (i ≥ 2); next = key i + 1, over the queries that have a next token (i ≤ n − 2); "
    "self = key i, over every query; special / punct = the special / punctuation-only tokens at positions ≥ 1, "
    "over every query; dup = the keys 1 ≤ j < i with the query's own token id, over the queries that have one; "
    "induction = the keys 1 ≤ j < i right after an earlier copy of the query's token (id[j − 1] = id[i]), over "
    "the queries that have one. spread = Σ m(i) · s(i) ÷ Σ m(i) over every query, weighted by its non-sink "
    "weight, where s(i) = the entropy of the row p[i, j ≥ 1] rescaled to sum to 1, ÷ ln(the number of keys "
    "j ≥ 1 query i sees). "
    f"Labels, first rule that holds wins: induction: induction > {ROLE_THRESHOLD}; duplicate token: dup > "
    f"{ROLE_THRESHOLD} (both need at least {REPEAT_THRESHOLD} queries with a repeat); previous token: prev > "
    f"{ROLE_THRESHOLD}; next token: next > {ROLE_THRESHOLD}; self: self > {ROLE_THRESHOLD}; <token> sink: "
    f"special > {ROLE_THRESHOLD} (named after the special token that gets most); punctuation: punct > "
    f"{ROLE_THRESHOLD}; {FIRST_TOKEN_SINK}: first > {SINK_THRESHOLD} (named after the token when position 0 is "
    f"a special one, e.g. [CLS] sink); broad: spread > {BROAD_THRESHOLD}; otherwise mixed"
)


def is_punctuation(piece: str) -> bool:
    """Whether a token's text is punctuation only (word-piece "##" markers ignored)."""
    text = piece[2:] if piece.startswith("##") and len(piece) > 2 else piece
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


def repeat_masks(ids: Sequence[int] | np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each query's earlier copies are, and the tokens right after them (never position 0, the sink).

    dup[i, j]: 1 <= j < i and ids[j] == ids[i]. induction[i, j]: 1 <= j < i and ids[j - 1] == ids[i].
    Shapes: ids [n] -> two [n, n] bool.
    """
    t = np.asarray(ids).reshape(-1)[:n]
    same = t[:, None] == t[None, :]  # [i, j]: same token id
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    earlier = (j >= 1) & (j < i)  # [n, n] by broadcasting
    after = np.zeros((n, n), dtype=bool)
    after[:, 1:] = same[:, :-1]  # key j follows a copy (at j - 1) of query i's token
    return same & earlier, after & earlier


def _is_causal(p: np.ndarray) -> bool:
    """Whether every weight above the diagonal is zero (row by row: no [h, n, n] copy). Shapes: p [h, n, n]."""
    n = p.shape[-1]
    return bool(p.shape[-2] == n and not any(p[:, i, i + 1 :].any() for i in range(n - 1)))


def _head_scores(
    p: np.ndarray, k: int, scores: dict[str, np.ndarray], per_special: np.ndarray, sp: np.ndarray, pu: np.ndarray,
    repeats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], causal: bool,
) -> None:  # fmt: skip
    """Head k's scores (see ROLE_RULES) into scores[key][k], and per_special[k]. Shapes: p [n, n] float64."""
    n = p.shape[0]
    scores["entropy"][k] = row_entropy(p).mean(-1)
    if n > 1:
        scores["first"][k] = p[1:, 0].mean()
    q = p[1:, :].copy()  # [n-1, n]: query tokens after the first (position 0 can only see itself in a decoder)
    q[:, 0] = 0.0  # the sink taken out; what is left is compared against its own total
    mass = q.sum(-1)  # [n-1]: non-sink weight of each row
    per_special[k] = q[:, sp].sum(0)
    if n <= 1:
        return
    r = np.arange(n - 1)  # row r is query i = r + 1
    seen = r + 1 if causal else np.full(n - 1, n - 1)  # non-sink keys each row can attend to
    choice = seen >= 2  # a row that sees one non-sink key only has no choice: it says nothing

    def share(num_rows: np.ndarray, elig: np.ndarray) -> float:
        """Σ over eligible rows of their weight on the chosen keys ÷ their non-sink weight."""
        elig = elig & choice
        den = mass[elig].sum()
        return float(num_rows[elig].sum() / den) if den > EPS else 0.0

    everyone = np.ones(n - 1, dtype=bool)
    prev = np.zeros(n - 1)
    prev[1:] = q[r[1:], r[1:]]  # key i - 1 (never position 0)
    scores["prev"][k] = share(prev, r >= 1)
    nxt = np.zeros(n - 1)
    nxt[: n - 2] = q[r[: n - 2], r[: n - 2] + 2]  # key i + 1
    scores["next"][k] = share(nxt, r <= n - 3)
    scores["self"][k] = share(q[r, r + 1], everyone)  # key i
    cols = np.arange(n) >= 1
    scores["special"][k] = share(q[:, sp & cols].sum(-1), everyone)
    scores["punct"][k] = share(q[:, pu & cols].sum(-1), everyone)
    for key, (rows, keys, has) in repeats.items():  # the repeat masks' cells (sparse), and the rows that have any
        scores[key][k] = share(np.bincount(rows, weights=q[rows, keys], minlength=n - 1), has)
    spread = np.divide(q, mass[:, None], out=np.zeros_like(q), where=mass[:, None] > EPS)  # rows summing to 1
    h_norm = row_entropy(spread) / np.log(np.maximum(seen, 2))  # [n-1]
    den = mass[choice].sum()
    scores["spread"][k] = float((mass * h_norm)[choice].sum() / den) if den > EPS else 0.0


def head_roles(
    pattern: np.ndarray,
    special: np.ndarray,
    punct: np.ndarray,
    special_names: list[str] | None = None,
    ids: Sequence[int] | np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Role scores per head (see ROLE_RULES), and a label from them.

    ``ids`` (token ids) give dup and induction; without them both are 0. A pattern whose strict upper
    triangle is zero everywhere is taken as causal (row i sees keys 0..i) for spread.
    Shapes: pattern [h, n, n]; special, punct, ids [n] -> each score [h] float and labels [h] (str).
    """
    p = np.asarray(pattern)
    h, n, _ = p.shape
    sp = np.asarray(special, dtype=bool)
    pu = np.asarray(punct, dtype=bool)
    names = list(special_names) if special_names else ["special"] * int(sp.sum())  # one per special token
    dup_mask, ind_mask = repeat_masks(ids, n) if ids is not None else (np.zeros((n, n), bool),) * 2
    scores = {k: np.zeros(h) for k in SCORE_KEYS}
    per_special = np.zeros((h, int(sp.sum())))  # non-sink weight each special token receives
    causal = _is_causal(p)
    repeats = {key: (*np.nonzero(m[1:]), m[1:].any(-1)) for key, m in (("dup", dup_mask), ("induction", ind_mask))}
    for k in range(h):  # one head at a time: [n, n] float64 temporaries, never [h, n, n] ones
        _head_scores(np.asarray(p[k], dtype=np.float64), k, scores, per_special, sp, pu, repeats, causal)
    n_dup = int(dup_mask.any(-1).sum())
    n_ind = int(ind_mask.any(-1).sum())
    first_name = f"{names[0]} sink" if n and sp[0] and names else FIRST_TOKEN_SINK
    t = ROLE_THRESHOLD
    labels = []
    for k in range(h):
        s = {key: v[k] for key, v in scores.items()}
        if n_ind >= REPEAT_THRESHOLD and s["induction"] > t:
            labels.append("induction")
        elif n_dup >= REPEAT_THRESHOLD and s["dup"] > t:
            labels.append("duplicate token")
        elif s["prev"] > t:
            labels.append("previous token")
        elif s["next"] > t:
            labels.append("next token")
        elif s["self"] > t:
            labels.append("self")
        elif s["special"] > t:
            labels.append(f"{names[int(per_special[k].argmax())]} sink")
        elif s["punct"] > t:
            labels.append("punctuation")
        elif s["first"] > SINK_THRESHOLD:
            labels.append(first_name)
        elif s["spread"] > BROAD_THRESHOLD:
            labels.append("broad")
        else:
            labels.append("mixed")
    scores["label"] = np.asarray(labels, dtype=object)
    return scores
