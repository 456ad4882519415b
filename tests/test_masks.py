"""The padding mask on a real padded batch (mha_viz/studies/padding.py) and the Masks tab."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.figures.masks import PAD_ROW_NOTE
from mha_viz.models.tokens import word_tokens
from mha_viz.pipeline.own_road import own_input
from mha_viz.pipeline.road import encode
from mha_viz.studies.padding import own_padded_batch, pad_ids, padded_batch

SHORT = "The animal was tired"
LAYER = 3


@pytest.fixture(scope="module")
def batch(minilm):
    return padded_batch(minilm, SENTENCE, SHORT, LAYER)


@pytest.fixture(scope="module")
def eager(minilm):
    """A fresh, trusted load of the same bundled weights with transformers' own eager attention."""
    from transformers import AutoModel

    from mha_viz.models.sources import bundled_model_dir

    return AutoModel.from_pretrained(str(bundled_model_dir()), attn_implementation="eager").eval()


def test_pad_ids_right_padding() -> None:
    ids, mask = pad_ids(word_tokens("a b c"), word_tokens("d"), pad_id=7)
    assert ids.shape == mask.shape == (2, 3)
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    assert ids[1, 1:].tolist() == [7, 7] and ids[1, 0] != 7


def test_padded_keys_get_exactly_zero_weight(batch, minilm) -> None:
    la, lb = batch.lengths
    assert (la, lb) == (len(encode(minilm, SENTENCE)[0].ids), len(encode(minilm, SHORT)[0].ids)) and lb < la
    assert batch.shorter == 1 and batch.pattern.shape == (2, 12, la, la)
    padded = batch.pattern[1]  # [h, n, n]
    assert torch.all(padded[:, :, lb:] == 0)  # every query, padded or not, every head: exactly 0
    assert batch.pad_key_weight() == 0.0
    assert torch.all(padded[:, :, :lb].sum(-1) > 0.999)  # the weight goes to the real keys
    assert batch.labels[1][lb:] == tuple(f"[PAD] ({i})" for i in range(lb, la))
    assert batch.labels[1][:lb] == encode(minilm, SHORT)[0].labels


def test_real_block_equals_the_sentence_alone(batch) -> None:
    lb = batch.lengths[1]
    torch.testing.assert_close(batch.pattern[1, :, :lb, :lb], batch.single[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(batch.pattern[0], batch.single[0], atol=1e-5, rtol=0)  # the longer: no padding
    assert batch.max_diff() < 1e-5


def test_padded_batch_equals_transformers_eager_attention(batch, eager) -> None:
    with torch.no_grad():
        out = eager(input_ids=batch.ids, attention_mask=batch.mask.long(), output_attentions=True)
    ref = out.attentions[LAYER]  # [2, h, n, n]
    torch.testing.assert_close(batch.pattern, ref.float(), atol=1e-5, rtol=0)  # padded query rows included
    lb = batch.lengths[1]
    with torch.no_grad():
        alone = eager(input_ids=batch.ids[1:, :lb], output_attentions=True).attentions[LAYER][0]  # [h, lb, lb]
    torch.testing.assert_close(batch.single[1], alone, atol=1e-5, rtol=0)


def test_own_weights_padding_equals_torch_key_padding_mask(minilm) -> None:
    config = Config(model="own", tokens="words", d_model=64, n_heads=4, seed=5)
    pb = own_padded_batch(minilm, "humpty dumpty sat on the wall", "the cat", config)
    assert pb.lengths == (6, 2) and pb.shorter == 1
    assert torch.all(pb.pattern[1][:, :, 2:] == 0) and pb.max_diff() < 1e-5
    torch.manual_seed(5)
    mha = torch.nn.MultiheadAttention(64, 4, bias=False)
    x = own_input(minilm, "the cat", config, 64)[1]  # [2, 64]
    padded = torch.cat([x, torch.zeros(4, 64)]).unsqueeze(1)  # [6, 1, 64]
    with torch.no_grad():
        _, weights = mha(padded, padded, padded, key_padding_mask=~pb.mask[1:], average_attn_weights=False)
    torch.testing.assert_close(pb.pattern[1], weights[0], atol=1e-6, rtol=0)


def test_masks_tab(minilm, batch) -> None:
    at = run_app(view="Masks", layer=str(LAYER), pad_head="head 5")
    assert_clean(at)
    pad_fig, causal_fig = specs(at)
    z = array(heatmaps(pad_fig)[0]["z"])
    la, lb = batch.lengths
    np.testing.assert_allclose(z, batch.pattern[1, 5].numpy(), atol=1e-6)
    assert np.all(z[:, lb:] == 0)
    assert [a["text"] for a in pad_fig["layout"]["annotations"]] == [PAD_ROW_NOTE]
    (shade,) = pad_fig["layout"]["shapes"]
    assert (shade["y0"], shade["y1"]) == (lb - 0.5, la - 0.5)  # exactly the padded query rows
    assert "head 5" in causal_fig["layout"]["title"]["text"]
    zc = array(heatmaps(causal_fig)[0]["z"])
    assert np.all(np.triu(zc, 1) == 0) and not np.all(np.triu(z[:lb, :lb], 1) == 0)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Largest weight on a padded key"] == "0"
    assert float(metrics["max |real block − sentence alone|"]) < 1e-5


def test_masks_tab_empty_second_sentence_is_a_message(minilm) -> None:
    at = run_app(view="Masks", pad_text="   ")
    assert not at.exception
    assert any("empty" in e.value for e in at.error)


def test_long_first_text_shows_the_short_block_and_a_few_pads(minilm) -> None:
    """A long first text pads the short sentence to its length: the figure keeps the real block and 8 pads."""
    from mha_viz.analysis.plans.masks import SHOWN_PADS

    long_text = " ".join([SENTENCE + "."] * 10)
    at = run_app(view="Masks", text=long_text, layer="0", pad_head="head 2")
    assert_clean(at)
    padded = specs(at)[0]
    n = len(encode(minilm, long_text)[0].ids)
    pb = padded_batch(minilm, long_text, "The animal was tired", 0)
    real = pb.lengths[pb.shorter]
    m = real + SHOWN_PADS
    assert f"[{n} × {n}, first {m} of {n} positions]" in padded["layout"]["title"]["text"]
    z = array(heatmaps(padded)[0]["z"])
    assert z.shape == (m, m)
    np.testing.assert_allclose(z, pb.pattern[pb.shorter, 2].numpy()[:m, :m], atol=1e-6)
    assert any(f"{m - real} of the {n - real} padding positions" in c.value for c in at.caption)


def test_masks_head_picker_reads_head_n_and_follows_the_opened_head(minilm) -> None:
    """Issue 35 §2.2: the picker reads "head 3" as every other view's does, and opens on the opened head."""
    at = run_app(view="Masks", layer=str(LAYER), head="head 3")
    assert_clean(at)
    picker = at.selectbox(key="pad_head")
    assert picker.value == 3 and picker.format_func(3) == "head 3"
    assert "head 3" in specs(at)[0]["layout"]["title"]["text"]
    picker.set_value(6).run()
    assert_clean(at)
    assert at.query_params.get("head") == "head 6"  # a choice here is the opened head
