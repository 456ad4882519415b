"""Every dashboard view, once: its name (the tab's label and the link's ?view= value), its group in the navigation,
the function that draws it, and what it needs. The navigation (sidebar.VIEW_GROUPS, VIEWS, GROUP_OF), the link
checks, the view runner (ui._run_view: a view whose needs are not met says why instead of running), the HTML
export's names and the view table of docs/views.md (written by scripts/gen_docs.py, with each view's paragraph from
ui/about.py; tests/test_docs.py) all come from REGISTRY.

Data only: the function is named by module and attribute and imported when the view first runs, so this module
imports nothing from the views (which import the sidebar, which imports this)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GROUPS = ("Learn", "Look", "Explain", "What if")  # what the user wants; then the view (every view in two clicks)
NEEDS = {
    "pretrained": "measures a pretrained model (its output or its stack of layers)",  # View.own says how, per view
    "self-attention": "compares the tokens of one text with each other",
}
NO_OUTPUT = "own weights are one layer, with no model output to measure"


@dataclass(frozen=True)
class View:
    name: str
    group: str  # one of GROUPS
    module: str  # mha_viz.ui.views.<module>
    function: str  # the view function there: f(ctx) -> None
    needs: frozenset[str] = frozenset()  # keys of NEEDS: checked before the view runs
    own: str = ""  # with "pretrained": what the view does that own weights cannot give, said when they are chosen

    def run(self) -> Callable[[Any], None]:
        """The view's function (imported on first use)."""
        return getattr(importlib.import_module(f"mha_viz.ui.views.{self.module}"), self.function)


PRETRAINED = frozenset({"pretrained"})
SELF = frozenset({"pretrained", "self-attention"})
ONE_TEXT = frozenset({"self-attention"})  # runs on own weights too (their one layer), not on cross-attention
REGISTRY: tuple[View, ...] = (
    View("Lesson", "Learn", "lesson", "lesson_view"),
    View("Step by step", "Learn", "step_by_step", "step_view"),
    View("Masks", "Learn", "masks", "masks_view"),
    View(
        "Rollout",
        "Learn",  # how attention composes across layers; Explain and What if hold six tabs each (tab strip at 1280 px)
        "rollout",
        "rollout_view",
        SELF,
        "multiplies the attention of a stack of layers (attention rollout); own weights are a single layer, whose "
        "rollout would only be its own pattern averaged with the identity",
    ),
    View("Head count", "Learn", "head_count", "headcount_view"),  # the seeds' question: what changes with h
    View("Heads", "Look", "heads", "heads_view"),
    View("Lines", "Look", "lines", "lines_view"),
    View("Overview", "Look", "overview", "overview_view"),
    View("Compare heads", "Look", "compare", "compare_view"),
    View("Where does it look?", "Look", "where", "where_view"),  # own weights: their one layer's heads
    View("Two sentences", "Look", "two_sentences", "two_view"),  # its needs depend on the model's parts: checked there
    View("Head roles", "Explain", "roles", "roles_view", ONE_TEXT),
    View(
        "Corpus",
        "Explain",
        "corpus",
        "corpus_view",
        SELF,
        "runs a pretrained model over many texts and sums its heads' role scores; own weights have no model to "
        "run a corpus through (Head roles scores their one layer on the sidebar's text)",
    ),
    View("Induction", "Explain", "induction", "induction_view"),  # a decoder: checked there, naming the model's kind
    View("Circuits", "Explain", "circuits", "circuits_view", ONE_TEXT),  # own weights: W_Q·W_Kᵀ, W_V·W_O too
    View("Next token", "Explain", "next_token", "next_token_view"),  # a causal LM with its head: checked there
    View(
        "Why?",
        "Explain",
        "why",
        "why_view",
        SELF,
        "splits a pretrained model's head score by the earlier heads, MLPs and embeddings that wrote its query and "
        "key; own weights are one layer, with nothing before it",
    ),
    View("W^O", "What if", "wo", "wo_view"),
    View(
        "Ablation",
        "What if",
        "ablation",
        "ablation_view",
        PRETRAINED,
        f"zeroes heads and measures how a pretrained model's output changes; {NO_OUTPUT} (the W^O tab zeroes this "
        "layer's heads and shows how its attention output changes)",
    ),
    View(
        "Head importance",
        "What if",
        "importance",
        "importance_view",
        PRETRAINED,
        f"scores each head by how much a pretrained model's output changes without it; {NO_OUTPUT}",
    ),
    View(
        "Patching",
        "What if",
        "patching",
        "patching_view",
        PRETRAINED,  # what if one head had the other text's value
        f"moves a head's output from one run of a pretrained model into another and measures the model's output; "
        f"{NO_OUTPUT}",
    ),
    View(
        "Variants",
        "What if",
        "variants",
        "variants_view",
        PRETRAINED,
        "converts a pretrained model's heads (grouped-query, MoH) and measures how its output changes; for own "
        "weights choose a layer variant in the sidebar instead (the Lesson and Step by step show its steps)",
    ),
    View(
        "KV cache",
        "What if",
        "kv_cache",
        "kv_view",
        PRETRAINED,  # a causal LM: checked there, naming the model's kind
        f"compresses a pretrained causal LM's key/value cache per head and measures its next-token loss; {NO_OUTPUT}",
    ),
)
BY_NAME = {v.name: v for v in REGISTRY}
VIEW_GROUPS = {g: tuple(v.name for v in REGISTRY if v.group == g) for g in GROUPS}
VIEWS = tuple(v for views in VIEW_GROUPS.values() for v in views)  # the link's ?view= values; Lesson first
GROUP_OF = {v.name: v.group for v in REGISTRY}
