"""Head statistics over a corpus: every head's role scores (analysis.roles, exactly as `mha-viz roles` computes them
for one text) averaged over many texts, in bounded memory.

Texts stream from a file (one per line, JSONL, CSV or Parquet: corpus_texts.py); nothing n² per text is kept: only
running sums per head (float64 sums and sums of squares of each score, the count of texts, and how often each label
was given), so 1,000 texts or 10 million cost the same memory. The work is split into batches of texts; each batch
gives partial sums (Sums) that add up, in batch order, to the whole — on this process (engine "local") or on Ray
workers (studies.corpus_ray), with the same numbers. A checkpoint beside the output after each batch lets `--resume`
go on from the last completed batch.

Shapes: sums are [n_scores, n_layers, n_heads] float64; counts [n_layers, n_heads] int64.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from mha_viz.config import Config
from mha_viz.errors import MhaVizError
from mha_viz.studies.corpus_sums import (  # noqa: F401 (the sums, the table and the checkpoints: importable here)
    COLUMNS,
    Sums,
    added,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
    write_table,
)
from mha_viz.studies.corpus_texts import SKIP_REASONS, Item  # noqa: F401

if TYPE_CHECKING:
    from mha_viz.pipeline.road import LoadedModel, Recording, Tokens

Observer = Callable[[int, "Tokens", np.ndarray], None]  # (input's index in its batch, tokens, [L, H, q, k] patterns)


class Scorer:
    """One loaded model that scores batches of texts into partial Sums (a Ray worker holds one each).

    ``batched``: the batch's texts go through the model together, padded, in passes of similar lengths
    (batch_record.groups: at most a quarter of padding and 2²⁵ attention weights a pass); each text's recording is
    cut back to its own tokens, so it gets the scores it gets alone up to float32 rounding (measured: MiniLM 9e-7,
    SmolLM2 4e-6). False: one text per pass, exactly as `mha-viz roles` records it. ``side``: the padding side
    (None: the tokenizer's). ``placement``: a model spread over devices (models/placement.py; "" loads it whole).
    ``lm``: a model loaded already (the dashboard's shared one), used instead of loading ``model`` again.
    """

    def __init__(
        self, model: str, part: str | None, device: str, batched: bool = True, side: str | None = None,
        placement: str = "", lm: LoadedModel | None = None,
    ) -> None:  # fmt: skip
        from mha_viz.pipeline.road import load

        self.config = Config(model=model, device=device, placement=placement)
        self.lm = lm if lm is not None else load(self.config)
        if self.lm.encoder_decoder:  # each text is one pass of its own: there is no second (decoder) text
            raise MhaVizError(
                f"{self.lm.name} is an encoder-decoder model, which needs a decoder text beside each text; corpus "
                "statistics score one text at a time: choose an encoder or a decoder model"
            )
        self.part = self.lm.part(part)
        if self.part == "cross":
            raise MhaVizError("head roles compare a token with its neighbours; choose --part encoder or decoder")
        self.shape = (self.lm.n_layers(self.part), self.lm.n_heads)
        self.batched = batched
        self.side = side

    def score(self, batch: list[Item]) -> Sums:
        """The batch's partial sums: each text's roles table, exactly as `mha-viz roles` computes it, added in the
        batch's order."""
        sums = Sums.empty(*self.shape)
        for found in self.tables(batch):
            if isinstance(found, str):
                sums.skip(found)
            else:
                sums.add(*found)
        give_back_memory()
        return sums

    def tables(self, batch: list[Item], observe: Observer | None = None) -> list[str | tuple[list[dict], int]]:
        """Per input: why it is skipped (one of SKIP_REASONS), or its roles table and its number of tokens.
        ``observe`` also sees each scored input's tokens and patterns (the dashboard's per-text extras)."""
        from mha_viz.pipeline.batch import groups, record_batch
        from mha_viz.pipeline.road import encode, record

        out: list[str | tuple[list[dict], int]] = [item.problem or "malformed" for item in batch]
        texts: dict[int, Tokens | None] = {}  # None: recorded alone from the text (not batched)
        for i, item in enumerate(batch):
            if item.text is None:
                continue
            tokens = encode(self.lm, item.text)[0] if self.batched else None
            if tokens is not None and tokens.cut:
                out[i] = "over the model's limit"
            else:
                texts[i] = tokens
        order = list(texts)
        size = len(order) if self.batched else 1
        for group in groups([len(texts[i].ids) if self.batched else 0 for i in order], size, self.lm.n_heads):
            chosen = [order[g] for g in group]
            if len(chosen) > 1:
                recs = record_batch(self.lm, [texts[i] for i in chosen if texts[i] is not None], self.side)
            else:  # one text: recorded alone, as `mha-viz roles` records it
                recs = [record(self.lm, batch[chosen[0]].text, None)]
            for i, rec in zip(chosen, recs, strict=True):
                out[i] = self._table(rec, i, observe)
        return out

    def _table(self, rec: Recording, i: int = 0, observe: Observer | None = None) -> str | tuple[list[dict], int]:
        from mha_viz.studies.sweeps import all_patterns, roles_table

        if rec.tokens.cut:  # a text the model cannot take whole is not scored in part
            return "over the model's limit"
        tokens = rec.query_tokens(self.part)
        patterns = all_patterns(self.lm, rec, self.part, self.config)  # [L, H, q, k]
        if observe is not None:
            observe(i, tokens, patterns)
        return roles_table(tokens, patterns), len(tokens.ids)


def give_back_memory() -> None:
    """Return the heap's free memory to the system (glibc's malloc_trim; a no-op elsewhere). A batch's passes come in
    many shapes (each padded to its own length) and glibc keeps what they freed in a heap that fragments: without
    this the resident memory of a 5,000-text run crept up by 170 MB (447 -> 613 MB); with it, it stays flat."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def run_local(
    scorer: Scorer, work: Iterable[list[Item]], sums: Sums | None, done: Callable[[Sums], None]
) -> Sums | None:
    """Score the batches here, in order, adding each batch's partial sums (then ``done(sums)``: checkpoint,
    progress)."""
    for batch in work:
        sums = added(sums, scorer.score(batch))
        done(sums)
    return sums
