"""A latent-attention (MLA) model in every view: value heads of their own size (d_v ≠ d_qk) must flow through
every view without an internal error (issue 23 §2: W^O was reshaped with the q/k head size)."""

from __future__ import annotations

import pytest
from test_app import run_app

from conftest import _zoo_dir
from mha_viz.ui.sidebar import SOURCES, VIEWS


@pytest.fixture(scope="module")
def mla_dir(tmp_path_factory) -> str:
    return _zoo_dir(tmp_path_factory, "deepseek_v3")


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_opens_on_a_latent_attention_model(view: str, mla_dir: str) -> None:
    at = run_app(src=SOURCES["hub"], model_id=mla_dir, text="The animal was tired", view=view)
    assert not at.exception, [e.value for e in at.exception]
    internal = [e.value for e in at.error if "Something went wrong" in e.value]
    assert not internal, internal  # a refusal may be a message; an internal error never
