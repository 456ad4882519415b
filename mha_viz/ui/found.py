"""The head the app opens on: where "it" attends most to "animal" (referents.focus_head on every layer's
pattern), for pretrained self-attention; None where there is no such default (own weights, cross-attention,
a text without a pronoun and an article before it, or a model too large to look at every layer). Only the
pronoun's row of each layer is computed (ui.cache.get_focus_weights), never every layer's whole pattern."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mha_viz.config import Config
from mha_viz.pipeline import encode
from mha_viz.referents import default_pair, focus_head
from mha_viz.trace import MhaVizError
from mha_viz.ui.cache import get_focus_weights, model_of
from mha_viz.ui.links import plain

log = logging.getLogger("mha_viz")


@dataclass(frozen=True)
class Found:
    layer: int
    head: int
    weight: float  # the model's own weight of query on key in that head
    query: str  # token labels
    key: str

    def says(self, opened: bool) -> str:
        """A caption (markdown-escaped) naming the head and why."""
        what = f"the head where “{self.query}” attends most to “{self.key}” ({self.weight:.2f})"
        if opened:
            return plain(f"Opened on layer {self.layer}, head {self.head}: {what}.")
        return plain(f"Layer {self.layer}, head {self.head} is {what}; choose that layer and head to see it.")


def found_head(config: Config, text: str, target: str | None, part: str | None) -> Found | None:
    """The default pair's head (see the module docstring); never raises: a failure means no default."""
    if config.own or part == "cross":
        return None
    try:
        lm = model_of(config)
        part = lm.part(part)
        tokens, target_tokens = encode(lm, text, target)  # the recording's query tokens, without the recording
        labels = (tokens if part == "encoder" or target_tokens is None else target_tokens).labels
        pair = default_pair(labels)
        if pair is None:
            return None
        weights = get_focus_weights(config, text, target, part, *pair)  # [L, H] = patterns[:, :, q, k]
        layer, head, weight = focus_head(weights[:, :, None, None], 0, 0)
    except MhaVizError as exc:  # an empty text, a budget: the page says so elsewhere
        log.info("no found head: %s", exc)
        return None
    except Exception:
        log.exception("finding the default head failed")
        return None
    if not weight > 0:  # e.g. a causal mask hides the key from the query
        return None
    return Found(layer, head, weight, labels[pair[0]], labels[pair[1]])
