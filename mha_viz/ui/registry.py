"""Every dashboard view, once: its name (the tab's label and the link's ?view= value), its group in the navigation,
the function that draws it, and what it needs. The navigation (sidebar.VIEW_GROUPS, VIEWS, GROUP_OF), the link
checks, the view runner (ui._run_view: a view whose needs are not met says why instead of running), the HTML
export's names and the README's view table (tests/test_readme_lists.py) all come from REGISTRY.

Data only: the function is named by module and attribute and imported when the view first runs, so this module
imports nothing from the views (which import the sidebar, which imports this)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GROUPS = ("Learn", "Look", "Explain", "What if")  # what the user wants; then the view (every view in two clicks)
NEEDS = {
    "pretrained": "looks across the layers of a pretrained model",
    "self-attention": "compares the tokens of one text with each other",
}


@dataclass(frozen=True)
class View:
    name: str
    group: str  # one of GROUPS
    module: str  # mha_viz.ui.views.<module>
    function: str  # the view function there: f(ctx) -> None
    needs: frozenset[str] = frozenset()  # keys of NEEDS: checked before the view runs

    def run(self) -> Callable[[Any], None]:
        """The view's function (imported on first use)."""
        return getattr(importlib.import_module(f"mha_viz.ui.views.{self.module}"), self.function)


PRETRAINED = frozenset({"pretrained"})
SELF = frozenset({"pretrained", "self-attention"})
REGISTRY: tuple[View, ...] = (
    View("Lesson", "Learn", "lesson", "lesson_view"),
    View("Step by step", "Learn", "step_by_step", "step_view"),
    View("Masks", "Learn", "masks", "masks_view"),
    View("Heads", "Look", "heads", "heads_view"),
    View("Lines", "Look", "lines", "lines_view"),
    View("Overview", "Look", "overview", "overview_view"),
    View("Compare heads", "Look", "compare", "compare_view"),
    View("Where does it look?", "Look", "where", "where_view", PRETRAINED),
    View("Two sentences", "Look", "two_sentences", "two_view"),  # its needs depend on the model's parts: checked there
    View("Head roles", "Explain", "roles", "roles_view", SELF),
    View("Corpus", "Explain", "corpus", "corpus_view", SELF),
    View("Induction", "Explain", "induction", "induction_view"),  # a decoder: checked there, naming the model's kind
    View("Circuits", "Explain", "circuits", "circuits_view", SELF),
    View("Next token", "Explain", "next_token", "next_token_view"),  # a causal LM with its head: checked there
    View("Rollout", "Explain", "rollout", "rollout_view", SELF),
    View("Head count", "What if", "head_count", "headcount_view"),
    View("W^O", "What if", "wo", "wo_view"),
    View("Ablation", "What if", "ablation", "ablation_view", PRETRAINED),
    View("Head importance", "What if", "importance", "importance_view", PRETRAINED),
    View("Patching", "What if", "patching", "patching_view", PRETRAINED),  # what if one head had the other text's value
    View("Variants", "What if", "variants", "variants_view", PRETRAINED),
)
BY_NAME = {v.name: v for v in REGISTRY}
VIEW_GROUPS = {g: tuple(v.name for v in REGISTRY if v.group == g) for g in GROUPS}
VIEWS = tuple(v for views in VIEW_GROUPS.values() for v in views)  # the link's ?view= values; Lesson first
GROUP_OF = {v.name: v.group for v in REGISTRY}
