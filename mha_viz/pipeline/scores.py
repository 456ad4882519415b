"""A head's score split into its sources (issue 37), as studies reach it (issue 36 §1: studies reach models/ through
pipeline/): RecordSources, given to pipeline.run, records what a split needs in that pass (models/score_record.py:
the residual stream per component at a few tokens; ModelRun.records[it]), sides splits one
head's score into query-source × key-source terms, model_score reads the model's own score from a recorded call and
check_sum checks a split against it (models/score_split.py)."""

from __future__ import annotations

from mha_viz.models.score_record import RecordSources
from mha_viz.models.score_split import check_sum, model_score, sides

__all__ = ["RecordSources", "check_sum", "model_score", "sides"]
