"""The head the app opens on: where "it"'s weight on "animal" stands out most from the other tokens' weight on
"animal" (analysis.opening: the rule the Lesson, Lines and the notebook API share), for pretrained self-attention;
None where there is no such default (own weights, cross-attention, a text without a pronoun and an article before
it, or a model too large to look at every layer). A head where every token gives "animal" much weight (MiniLM's
layer 5, head 11: 0.08–0.82) has the largest weight but says nothing about "it"; the caption names it and says so.
Only the referent's column of each layer is kept (ui.cache.get_focus_column), never every layer's whole
pattern."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from mha_viz.analysis.opening import opening_choice, opening_pair
from mha_viz.pipeline.road import encode
from mha_viz.selection import Selection
from mha_viz.trace import MhaVizError
from mha_viz.ui.cache import get_recording, is_recorded, model_of, provisional
from mha_viz.ui.cache_rows import get_focus_column
from mha_viz.ui.links import plain

log = logging.getLogger("mha_viz")
SAMPLE_ROWS = 256  # a text longer than this compares "it" with a sample of the other rows, not all of them


@dataclass(frozen=True)
class Found:
    layer: int
    head: int
    weight: float  # the model's own weight of query on key in that head
    query: str  # token labels
    key: str
    others: float = 0.0  # the other tokens' mean weight on key in that head
    others_max: float = 0.0
    strongest: tuple[int, int, float, float, float] | None = None  # (layer, head, weight, others' min, max) of the
    # head with the largest weight of query on key, where it is not this one

    def why(self) -> str:
        """What the head does, for the query and for the other tokens (plain text)."""
        q, k = self.query, self.key
        what = (
            f"the head where “{q}” attends to “{k}” ({self.weight:.2f}) most unlike the other tokens, which give "
            f"“{k}” {self.others:.2f} on average there (at most {self.others_max:.2f})"
        )
        if self.strongest is not None:
            la, h, w, lo, hi = self.strongest
            what += (f". Layer {la}, head {h} gives “{self.key}” more weight from “{self.query}” ({w:.2f}), but "
                     f"almost every token does there ({lo:.2f}–{hi:.2f})")  # fmt: skip
        return what

    def says(self, opened: bool) -> str:
        """A caption (markdown-escaped) naming the head and why."""
        if opened:
            return plain(f"Opened on layer {self.layer}, head {self.head}: {self.why()}.")
        return plain(f"Layer {self.layer}, head {self.head} is {self.why()}; choose that layer and head to see it.")


def found_head(sel: Selection) -> Found | None:
    """The default pair's head of the selection's text and part, whatever its layer (see the module docstring);
    never raises: a failure means no default."""
    if sel.config.own or sel.part == "cross" or provisional():  # a long text's first layer: every layer comes next
        return None
    try:
        lm = model_of(sel.config)
        part = lm.part(sel.part)
        if is_recorded(sel):  # its tokens (a long text's: tokenizing 8,192 tokens again took ~0.5 s of every page)
            rec = get_recording(*sel.recorded)
            tokens, target_tokens = rec.tokens, rec.target
        else:
            tokens, target_tokens = encode(lm, sel.text, sel.target)  # the recording's tokens, without recording
        labels = (tokens if part == "encoder" or target_tokens is None else target_tokens).labels
        pair = opening_pair(labels)  # the one opening rule (analysis.opening), as the Lesson, Lines and show use
        if pair is None:
            return None
        q, k = pair
        queries = None  # every row; a long text: the pronoun and an even sample of the others (bounded work)
        if len(labels) > SAMPLE_ROWS:
            sample = np.linspace(0, len(labels) - 1, SAMPLE_ROWS - 1).round().astype(int)
            queries = (q, *sorted(set(sample.tolist()) - {q}))
            q = 0
        column = get_focus_column(sel.at(part=part), k, queries)  # [L, H, rows] = patterns[:, :, rows, k]
        chosen = opening_choice(column[:, :, :, None], q, 0)  # the one rule, with the largest-weight head beside it
    except MhaVizError as exc:  # an empty text, a budget: the page says so elsewhere
        log.info("no found head: %s", exc)
        return None
    except Exception:
        log.exception("finding the default head failed")
        return None
    if chosen is None:  # e.g. a causal mask hides the key from the query
        return None
    c = chosen
    return Found(c.layer, c.head, c.weight, labels[pair[0]], labels[k], c.others, c.others_max, c.strongest)
