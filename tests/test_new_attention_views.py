"""Latent attention (MLA: value heads of their own size), learned sinks (gpt-oss: a logit per head in each softmax's
denominator), a gate (Qwen3-Next) or a norm (BitNet) between the heads and W^O, in every view: no internal error;
the sink's share is drawn; the gate's output is what W^O reads (issue 23 §2, §3)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import transformers
from apptest_helpers import array, heatmaps, run_app, specs

from conftest import _zoo_dir
from mha_viz.config import Config
from mha_viz.ui.sidebar import SOURCES, VIEWS

TEXT = "The animal was tired"
TYPES = ("deepseek_v3", "gpt_oss", "qwen3_next", "bitnet")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    return {t: _zoo_dir(tmp_path_factory, t) for t in TYPES}


WHAT_IFS = (  # what the views ask of the road besides the plain trace: a trace, or a refusal in words
    Config(causal=True),  # Masks, the sidebar's causal toggle
    Config(scaled=False),  # the sidebar's scaling toggle
    Config(wo="identity"),  # W^O
    Config(wo="random", wo_seed=3),  # W^O
    Config(ablate=(0,)),  # W^O's ablation
    Config(head_scale=((1, 0.5),)),  # head factors
    Config(heads=2),  # Head count: the layer re-split
)


@pytest.mark.parametrize("model_type", TYPES)
def test_the_road_gives_every_view_what_it_draws(model_type: str, folders: dict[str, str]) -> None:
    """Road level, no AppTest (issue 36 §4: replaces the 84-case view × architecture AppTest matrix): every layer's
    trace is finite, its rows are weights (a sink takes the rest), its heads add up to the output W^O gives (the
    Lesson, Step by step, W^O); each what-if the views apply gives a finite trace or a refusal in words, never
    another error; the plain weights (Head count, the Lesson's claims) likewise; traces() gives every layer (the
    Overview, Rollout). That the default trace equals the model's own attention and W^O output is
    tests/test_models.py::test_zoo_model[<type>]; the sink share drawn is the test below."""
    from mha_viz.pipeline.road import layer_trace, layer_weights, load, record, traces
    from mha_viz.trace import AttentionTrace, MhaVizError

    config = Config(model=folders[model_type])
    lm = load(config)
    rec = record(lm, TEXT)
    sites = [(part, layer) for part in lm.parts for layer in range(lm.n_layers(part))]
    assert sites  # (Qwen3-Next: one of its two layers is linear attention, no pattern)
    refused: list[str] = []
    for part, layer in sites:
        t = layer_trace(lm, rec, part, layer, config)
        assert torch.isfinite(t.pattern).all() and torch.isfinite(t.output).all()
        rows = t.pattern.sum(-1)  # [h, q]
        assert (rows <= 1 + 1e-5).all() and (rows > 0).all()
        if model_type != "gpt_oss":  # without a sink every row is a distribution
            torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)
        if t.wo_input is None:  # heads through W^O add up to the output (else the gate/norm test below)
            torch.testing.assert_close(t.head_out.sum(0) + (0 if t.b_O is None else t.b_O), t.output, atol=1e-5, rtol=0)
        for what_if in WHAT_IFS:
            try:
                w = layer_trace(lm, rec, part, layer, dataclasses.replace(what_if, model=config.model))
            except MhaVizError as e:  # a refusal the view shows as a message
                assert str(e).strip()
                refused.append(f"{what_if}: {e}")
                continue
            assert isinstance(w, AttentionTrace)
            assert torch.isfinite(w.pattern).all() and torch.isfinite(w.output).all(), what_if
            if what_if.heads is not None:
                assert w.pattern.shape[0] == 2
            if what_if.ablate and w.pattern.shape == t.pattern.shape:
                assert not torch.allclose(w.output, t.output)  # head 0's share is gone
        try:
            weights = layer_weights(lm, rec, part, layer)
            assert weights.n_heads == lm.n_heads and all(torch.isfinite(m).all() for m in (weights.W_Q, weights.W_O))
        except MhaVizError as e:
            refused.append(f"plain weights: {e}")
    assert len(refused) < len(sites) * (len(WHAT_IFS) + 1)  # the road refuses what it cannot do, not everything
    _, _, every = traces(config, TEXT, lm=lm)
    assert len(every) == lm.n_layers(lm.part(None)) and all(torch.isfinite(t.pattern).all() for t in every)


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_opens_on_one_of_the_new_attention_kinds(view: str, folders: dict[str, str]) -> None:
    """One AppTest per view (issue 36 §4), the views dealt round the four kinds: each kind opens in five or six
    views, each view on one kind; a refusal may be a message, an internal error never. Heads opens gpt-oss's
    layer 1, where the sink share is drawn as the model computes it (below)."""
    model_type = "gpt_oss" if view == "Heads" else TYPES[VIEWS.index(view) % len(TYPES)]
    at = run_app(src=SOURCES["hub"], model_id=folders[model_type], text=TEXT, view=view,
                 **({"layer": "1"} if view == "Heads" else {}))  # fmt: skip
    assert not at.exception, [e.value for e in at.exception]
    internal = [e.value for e in at.error if "Something went wrong" in e.value]
    assert not internal, (model_type, internal)
    if view == "Heads":
        assert not at.error, [e.value for e in at.error]
        _gpt_oss_sink_share_is_drawn_as_the_model_computes_it(at, folders["gpt_oss"])


def _gpt_oss_sink_share_is_drawn_as_the_model_computes_it(at, folder: str) -> None:
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
