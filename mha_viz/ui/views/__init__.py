"""One module per dashboard tab, each with its view function (listed, with its group and needs, in ui/registry.py)."""

from mha_viz.ui.views.ablation import ablation_view
from mha_viz.ui.views.compare import compare_view
from mha_viz.ui.views.head_count import headcount_view
from mha_viz.ui.views.heads import heads_view
from mha_viz.ui.views.overview import overview_view
from mha_viz.ui.views.roles import roles_view
from mha_viz.ui.views.rollout import rollout_view
from mha_viz.ui.views.step_by_step import step_view
from mha_viz.ui.views.two_sentences import two_view
from mha_viz.ui.views.where import where_view
from mha_viz.ui.views.wo import wo_view

__all__ = [
    "ablation_view",
    "compare_view",
    "headcount_view",
    "heads_view",
    "overview_view",
    "roles_view",
    "rollout_view",
    "step_view",
    "two_view",
    "where_view",
    "wo_view",
]
