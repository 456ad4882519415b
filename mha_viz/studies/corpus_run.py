"""The dashboard's corpus run (issue 26 §2): studies.corpus's engine (local, padded batches, the same running sums
as `mha-viz corpus`), plus what the dashboard draws besides the table:

- each head's most typical text for every score (the text whose score is closest to the head's mean): the
  per-text scores are kept (10 numbers per head and text, never a text's n × n patterns) and the nearest one
  found once the means are known;
- Clark et al. 2019's Figure 2: attention to [CLS], [SEP] and punctuation, summed per head over the texts.

Shapes: scores [n_texts, n_scores, L, H] float32; clark [3, L, H] float64 (sums; CLARK_KEYS order).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np

from mha_viz.analysis.corpus_stats import CLARK_KEYS, StatsTable, clark_scores
from mha_viz.analysis.roles import SCORE_KEYS
from mha_viz.config import CORPUS_BATCH
from mha_viz.pipeline import budget
from mha_viz.pipeline.road import LoadedModel, Tokens
from mha_viz.studies.corpus import Scorer, Sums
from mha_viz.studies.corpus_texts import batches, text_item

Progress = Callable[[float, str], None]


def bundled_texts() -> tuple[str, ...]:
    """The bundled example corpus (mha_viz/studies/corpus_examples.txt): one English sentence a line."""
    text = resources.files("mha_viz.studies").joinpath("corpus_examples.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def digest(texts: Sequence[str]) -> str:
    """A short fingerprint of a list of texts (the corpus's cache key)."""
    h = hashlib.blake2b(digest_size=12)
    for t in texts:
        h.update(t.encode("utf-8", "replace") + b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class CorpusRun:
    """What one run over a corpus gives: the engine's sums, each scored text's scores and Clark et al.'s sums."""

    sums: Sums
    texts: tuple[str, ...]  # the scored texts, in order (skipped ones left out)
    scores: np.ndarray  # [n_texts, n_scores, L, H] float32
    clark: np.ndarray  # [3, L, H] float64: Σ over texts (CLARK_KEYS)
    clark_texts: np.ndarray  # [3] int64: texts that had each target ([SEP]: 0 on a model without one)
    cls_name: str  # the token that stands for [CLS] ("[CLS]"; a model without special tokens: "first token")
    sep_name: str | None  # the token that stands for [SEP]; None when the model adds none

    def table(self) -> StatsTable:
        return StatsTable.from_rows(self.sums.table())

    def typical(self, key: str) -> np.ndarray:
        """Per head, the index (in ``texts``) of the text whose ``key`` score is closest to the head's mean.
        Shapes: -> [L, H] int64."""
        k = SCORE_KEYS.index(key)
        count = np.maximum(self.sums.count, 1)  # [L, H]
        mean = self.sums.total[k] / count  # [L, H]
        return np.abs(self.scores[:, k].astype(np.float64) - mean[None]).argmin(0)

    def clark_by_layer(self) -> np.ndarray:
        """Mean attention to [CLS], [SEP] and punctuation per layer, averaged over heads and texts (NaN where no
        text had the target). Shapes: -> [3, L]."""
        n = self.clark_texts.astype(np.float64)[:, None]  # [3, 1]
        per_head = np.divide(self.clark.mean(-1), n, out=np.full(self.clark.shape[:2], np.nan), where=n > 0)
        return per_head


def run_corpus(
    lm: LoadedModel, model: str, device: str, part: str | None, texts: Sequence[str], progress: Progress | None = None
) -> CorpusRun:
    """Score every text on the loaded model (studies.corpus.Scorer, padded batches of CORPUS_BATCH texts), keeping each
    text's scores and Clark et al.'s attention sums; the request's deadline is checked between batches."""
    scorer = Scorer(model, part, device, lm=lm)
    n_layers, n_heads = scorer.shape
    sums = Sums.empty(n_layers, n_heads)
    clark = np.zeros((3, n_layers, n_heads))  # [3, L, H]
    clark_texts = np.zeros(3, dtype=np.int64)
    kept: list[np.ndarray] = []  # each [n_scores, L, H] float32
    scored: list[str] = []
    names: dict[str, str | None] = {}
    items = [text_item(i, t) for i, t in enumerate(texts)]

    def observe(_: int, tokens: Tokens, patterns: np.ndarray) -> None:
        one = clark_scores(tokens.special, tokens.pieces, patterns)  # [3, L, H]
        seen = np.isfinite(one[:, 0, 0])
        clark[seen] += one[seen]
        clark_texts[seen] += 1
        if not names:
            sp = [p for p, s in zip(tokens.pieces, tokens.special, strict=True) if s]
            names["cls"] = sp[0] if sp else "first token"
            names["sep"] = sp[-1] if len(sp) >= 2 else None

    done = 0
    for batch in batches(items, CORPUS_BATCH):
        budget.check_deadline()
        for item, found in zip(batch, scorer.tables(batch, observe), strict=True):
            if isinstance(found, str):
                sums.skip(found)
                continue
            rows, n_tokens = found
            sums.add(rows, n_tokens)
            one = np.empty((len(SCORE_KEYS), n_layers, n_heads), dtype=np.float32)  # [n_scores, L, H]
            for r in rows:
                one[:, r["layer"], r["head"]] = [r[k] for k in SCORE_KEYS]
            kept.append(one)
            scored.append(str(item.text))
        done += len(batch)
        if progress is not None:
            progress(done / max(len(items), 1), f"{done} of {len(items)} texts")
    shape = (0, len(SCORE_KEYS), n_layers, n_heads)
    scores = np.stack(kept) if kept else np.zeros(shape, dtype=np.float32)
    return CorpusRun(sums, tuple(scored), scores, clark, clark_texts, str(names.get("cls") or "first token"),
                     names.get("sep"))  # fmt: skip


__all__ = ["CLARK_KEYS", "CorpusRun", "bundled_texts", "digest", "run_corpus"]
