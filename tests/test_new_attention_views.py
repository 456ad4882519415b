"""Latent attention (MLA: value heads of their own size), learned sinks (gpt-oss: a logit per head in each softmax's
denominator), a gate (Qwen3-Next) or a norm (BitNet) between the heads and W^O, in every view: no internal error;
the sink's share is drawn; the gate's output is what W^O reads (issue 23 §2, §3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from test_app import array, heatmaps, run_app, specs

from conftest import _zoo_dir
from mha_viz.ui.sidebar import SOURCES, VIEWS

TEXT = "The animal was tired"
TYPES = ("deepseek_v3", "gpt_oss", "qwen3_next", "bitnet")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    return {t: _zoo_dir(tmp_path_factory, t) for t in TYPES}


@pytest.mark.parametrize("model_type", TYPES)
@pytest.mark.parametrize("view", VIEWS)
def test_every_view_opens(view: str, model_type: str, folders: dict[str, str]) -> None:
    at = run_app(src=SOURCES["hub"], model_id=folders[model_type], text=TEXT, view=view)
    assert not at.exception, [e.value for e in at.exception]
    internal = [e.value for e in at.error if "Something went wrong" in e.value]
    assert not internal, internal  # a refusal may be a message; an internal error never


def test_gpt_oss_sink_share_is_drawn_as_the_model_computes_it(folders: dict[str, str]) -> None:
    folder = folders["gpt_oss"]
    at = run_app(src=SOURCES["hub"], model_id=folder, text=TEXT, view="Heads", layer="1")
    assert not at.exception and not at.error
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        attn = model(**tok(TEXT, return_tensors="pt"), output_attentions=True).attentions[1][0]  # [h, n, n]
    want = (1.0 - attn.sum(-1)).numpy()  # the sink's share of every query, per head
    assert want.max() > 0.01  # the sink takes a visible share: the figure is not trivially zero
    sink_maps = [
        array(h["z"]) for s in specs(at) if "Sink share" in str(s["layout"].get("title", "")) for h in heatmaps(s)
    ]
    assert len(sink_maps) == 1
    np.testing.assert_allclose(sink_maps[0].astype(float), want, atol=1e-5)


@pytest.mark.parametrize("model_type", ["qwen3_next", "bitnet"])
def test_the_step_before_wo_is_shown_and_is_what_wo_reads(model_type: str, folders: dict[str, str]) -> None:
    from mha_viz.analysis.steps import head_steps
    from mha_viz.config import Config
    from mha_viz.pipeline.road import layer_trace as trace_of
    from mha_viz.pipeline.road import load, record

    lm = load(Config(model=folders[model_type]))
    t = trace_of(lm, record(lm, TEXT), "decoder", lm.n_layers("decoder") - 1, Config(model=folders[model_type]))
    assert t.wo_input is not None and not torch.allclose(t.wo_input, t.concat)  # the model changes the heads
    titles = [s.title for s in head_steps(t, 0)]
    assert any("gate / norm" in title for title in titles), titles
    w = t.W_O.reshape(-1, t.W_O.shape[-1])
    want = t.wo_input @ w + (0 if t.b_O is None else t.b_O)
    torch.testing.assert_close(t.output, want)
    torch.testing.assert_close(t.head_out.sum(0) + (0 if t.b_O is None else t.b_O), t.output, atol=1e-5, rtol=0)
