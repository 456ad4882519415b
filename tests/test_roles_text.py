"""The role rules as the app writes them determine every score (issue 35 §1.4): an independent implementation that
follows the text the Head roles view shows, clause by clause, with plain loops (nothing from mha_viz.analysis),
gives the numbers of the view's table, on MiniLM (no mask) and SmolLM2 (causal)."""

from __future__ import annotations

import math
import unicodedata

import numpy as np
import pytest
from apptest_helpers import APP
from streamlit.testing.v1 import AppTest

from mha_viz import show
from mha_viz.ui.sidebar import SOURCES

TEXT = "The animal didn't cross the street because it was too tired. The animal was tired, so it slept."
# The clauses of the rules this implementation follows, as the view writes them (each must be there, word for word).
CLAUSES = (
    "is causal when every weight above the diagonal is 0: then query i sees keys 0 … i, else all n keys",
    "first = mean of p[i, 0] over the queries i = 1 … n−1",
    "entropy = mean over every query, query 0 included, of the row entropy −Σⱼ p[i, j] ln p[i, j] in nats",
    "m(i) = Σ over keys j ≥ 1 of p[i, j] is query i's non-sink weight",
    "a query that sees fewer than 2 keys j ≥ 1 is left out",
    "A share = Σ over its queries of their weight on its keys ÷ Σ over the same queries of m(i) (0 when that sum is 0)",
    "prev = key i − 1, over the queries that have a previous non-sink token (i ≥ 2)",
    "next = key i + 1, over the queries that have a next token (i ≤ n − 2)",
    "self = key i, over every query",
    "special / punct = the special / punctuation-only tokens at positions ≥ 1, over every query",
    "dup = the keys 1 ≤ j < i with the query's own token id, over the queries that have one",
    "induction = the keys 1 ≤ j < i right after an earlier copy of the query's token (id[j − 1] = id[i]), over "
    "the queries that have one",
    "spread = Σ m(i) · s(i) ÷ Σ m(i) over every query, weighted by its non-sink weight, where s(i) = the entropy of "
    "the row p[i, j ≥ 1] rescaled to sum to 1, ÷ ln(the number of keys j ≥ 1 query i sees)",
)


def entropy(row: list[float]) -> float:
    return -sum(w * math.log(w) for w in row if w > 0)


def literal_scores(p: np.ndarray, ids: list[int], special: list[bool], punct: list[bool]) -> dict[str, float]:
    """One head's scores, read off CLAUSES one by one. Shapes: p [n, n]."""
    n = p.shape[0]
    w = [[float(p[i, j]) for j in range(n)] for i in range(n)]
    causal = all(w[i][j] == 0 for i in range(n) for j in range(i + 1, n))
    sees = [list(range(i + 1)) if causal else list(range(n)) for i in range(n)]
    out = {"first": sum(w[i][0] for i in range(1, n)) / (n - 1)}
    out["entropy"] = sum(entropy(w[i]) for i in range(n)) / n
    m = [sum(w[i][j] for j in range(1, n)) for i in range(n)]
    counted = [i for i in range(1, n) if len([j for j in sees[i] if j >= 1]) >= 2]

    def share(queries: list[int], keys_of) -> float:
        queries = [i for i in queries if i in counted]
        den = sum(m[i] for i in queries)
        return sum(w[i][j] for i in queries for j in keys_of(i)) / den if den > 0 else 0.0

    out["prev"] = share([i for i in range(n) if i >= 2], lambda i: [i - 1])
    out["next"] = share([i for i in range(n) if i <= n - 2], lambda i: [i + 1])
    out["self"] = share(counted, lambda i: [i])
    out["special"] = share(counted, lambda i: [j for j in range(1, n) if special[j]])
    out["punct"] = share(counted, lambda i: [j for j in range(1, n) if punct[j]])
    dup = lambda i: [j for j in range(1, i) if ids[j] == ids[i]]
    ind = lambda i: [j for j in range(1, i) if ids[j - 1] == ids[i]]
    out["dup"] = share([i for i in counted if dup(i)], dup)
    out["induction"] = share([i for i in counted if ind(i)], ind)
    num = den = 0.0
    for i in counted:
        rest = [w[i][j] / m[i] if m[i] > 0 else 0.0 for j in sees[i] if j >= 1]
        num += m[i] * entropy(rest) / math.log(len(rest))
        den += m[i]
    out["spread"] = num / den if den > 0 else 0.0
    return out


def punctuation_only(piece: str) -> bool:
    text = piece[2:] if piece.startswith("##") and len(piece) > 2 else piece
    return bool(text) and all(unicodedata.category(ch).startswith("P") for ch in text)


@pytest.mark.parametrize("source, model", [("bundled", ""), ("smollm2", "smollm2")])
def test_the_written_rules_give_the_apps_numbers(minilm, source: str, model: str) -> None:
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in {"view": "Head roles", "text": TEXT, "src": SOURCES[source]}.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    (rules,) = [c.value for c in at.caption if "first rule that holds wins" in c.value]
    rules = rules.replace("\\", "")  # markdown escapes
    missing = [c for c in CLAUSES if c not in rules]
    assert not missing, missing
    (table,) = [d.value for d in at.dataframe]
    lm, recording = show._recording(TEXT, model, "cpu")
    tokens = recording.query_tokens(lm.part(None))
    ids, special = [int(i) for i in tokens.ids], [bool(s) for s in tokens.special]
    punct = [punctuation_only(piece) for piece in tokens.pieces]
    patterns = show.patterns(TEXT, model)  # [L, H, n, n]
    assert sum(ids[j] == ids[i] for i in range(len(ids)) for j in range(1, i)) >= 3  # dup and induction count
    for _, row in table.iterrows():
        want = literal_scores(np.asarray(patterns[row["layer"], row["head"]], dtype=np.float64), ids, special, punct)
        for key, value in want.items():
            assert row[key] == pytest.approx(value, abs=1e-5), (row["layer"], row["head"], key)
    assert len(table) == patterns.shape[0] * patterns.shape[1]
