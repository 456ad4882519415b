"""Why does this head look there? (issue 37): a head's score split into query-source × key-source terms sums to the
model's own score, on six kinds of architecture, and its contrast of two keys to the model's own log weight ratio
(from the model's eager attention with output_attentions); the norm linearisation against torch; refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import SENTENCE, tiny_model
from mha_viz.analysis.why_plan import crop, csv_rows, default_keys, grouped, sentence, shown_terms, top_pairs
from mha_viz.models.frozen_norm import freeze
from mha_viz.models.tokens import tokenize
from mha_viz.pipeline.door import run
from mha_viz.studies.why import Why, why, why_at
from mha_viz.trace import MhaVizError

REL = 1e-4  # the tolerance: the table sums to the model's score within 1e-4 relative


def _tiny(model_type: str):
    return tiny_model(model_type)


def _own_score(lm, w: Why, key: int) -> float:
    """The model's own pre-softmax score (scale · q·k + position bias) from a separate recorded pass."""
    ids = torch.tensor([tokenize(lm.tokenizer, SENTENCE, lm.max_tokens, lm.name).ids])
    dec = torch.tensor([[0, 5, 6]]) if lm.encoder_decoder else None
    call = run(lm, ids, only=(w.part, w.layer), decoder_ids=dec).calls[(w.part, w.layer)]
    group = call.q.shape[1] // call.k.shape[1]
    q, k = call.q[0, w.head, w.query].double(), call.k[0, w.head // group, key].double()
    bias = 0.0 if call.bias is None else float(call.bias[0, w.head % call.bias.shape[1], w.query, key])
    return call.scaling * float(q @ k) + bias


def _eager_weights(lm, w: Why) -> np.ndarray:
    """Row ``w.query`` of the head's weights from the model's own eager attention (output_attentions)."""
    ids = torch.tensor([tokenize(lm.tokenizer, SENTENCE, lm.max_tokens, lm.name).ids])
    extra = {"decoder_input_ids": torch.tensor([[0, 5, 6]])} if lm.encoder_decoder else {}
    lm.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = lm.model(input_ids=ids, output_attentions=True, **extra)
    finally:
        lm.model.set_attn_implementation("mha_viz")
    att = out.encoder_attentions if lm.encoder_decoder else out.attentions
    return att[w.layer][0, w.head, w.query].double().numpy()


def _check(lm, w: Why) -> None:
    total = float(w.terms.sum()) + w.position
    assert abs(total - _own_score(lm, w, w.key)) <= REL * abs(w.score)
    total_v = float(w.terms_versus.sum()) + w.position_versus
    assert abs(total_v - _own_score(lm, w, w.versus)) <= REL * abs(w.score_versus)
    row = _eager_weights(lm, w)
    assert w.weight == pytest.approx(row[w.key], rel=1e-4, abs=1e-6)
    cap = (lambda s: w.softcap * math.tanh(s / w.softcap)) if w.softcap else (lambda s: s)
    ratio = math.log(row[w.key] / row[w.versus])  # softmax only sees differences: the contrast is this
    assert cap(total) - cap(total_v) == pytest.approx(ratio, rel=1e-4, abs=1e-4)
    assert len(w.q_sources) == w.terms.shape[0] and len(w.k_sources) == w.terms.shape[1]


def test_post_norm_encoder_minilm(minilm) -> None:
    """BERT: every LayerNorm between layers frozen, its β a source; the opening head "it" → "animal" vs "street"."""
    w = why(minilm, SENTENCE, 3, 1, "it", "animal", "street")
    _check(minilm, w)
    assert w.weight > 0.6 and w.score > w.score_versus
    kinds = {s[1] for s in w.q_sources}
    assert {"embed", "head", "attn_bias", "mlp", "norm_bias"} <= kinds
    assert sum(s[1] == "head" for s in w.q_sources) == 3 * minilm.n_heads


@pytest.mark.parametrize(
    ("model_type", "positions"),
    [("gpt2", (10, 2, 4)), ("llama", (10, 2, 4)), ("qwen3", (10, 2, 4)), ("t5", (10, 2, 4)), ("gemma2", (6, 4, 5))],
)
def test_split_sums_to_the_models_score(model_type: str, positions: tuple[int, int, int]) -> None:
    """Learned positions (GPT-2), rotary GQA (LLaMA), QK-norm (Qwen3), relative position bias (T5), soft-capping and
    sandwich norms (Gemma 2, split before the cap; keys inside its sliding window of 4): the last layer."""
    lm = _tiny(model_type)
    tokens = tokenize(lm.tokenizer, SENTENCE, lm.max_tokens, lm.name)
    target = tokenize(lm.tokenizer, "x", lm.max_tokens, lm.name) if lm.encoder_decoder else None
    if target is not None:
        target = type(target)(ids=(0, 5, 6), pieces=("", "", ""), labels=("a", "b", "c"), special=(False,) * 3)
    w = why_at(lm, tokens, 1, 1, *positions, None, target)
    _check(lm, w)
    assert (w.softcap is not None) == (model_type == "gemma2")
    if model_type == "t5":
        assert w.position != 0.0  # T5's relative position bias is a term of its own


def test_rotary_gqa_smollm2(smollm2) -> None:
    w = why(smollm2, SENTENCE, 20, 3, "it", "animal", "street")
    _check(smollm2, w)
    assert sum(s[1] == "head" for s in w.k_sources) == 20 * smollm2.n_heads


def test_unsupported_layouts_are_refused() -> None:
    """Phi rotates half of each head outside apply_rotary_pos_emb; GPT-NeoX fuses Q|K|V per head: refused, not
    guessed."""
    for model_type in ("phi", "gpt_neox"):
        lm = _tiny(model_type)
        tokens = tokenize(lm.tokenizer, SENTENCE, lm.max_tokens, lm.name)
        with pytest.raises(MhaVizError, match="not supported"):
            why_at(lm, tokens, 1, 0, 8, 2, 4)


def test_bad_tokens_layers_heads(minilm) -> None:
    with pytest.raises(MhaVizError, match="not a token of the text"):
        why(minilm, SENTENCE, 3, 1, "it", "zebra")
    with pytest.raises(MhaVizError, match="layer 6 does not exist"):
        why(minilm, SENTENCE, 6, 1, "it", "animal")
    with pytest.raises(MhaVizError, match="head 12 does not exist"):
        why(minilm, SENTENCE, 3, 12, "it", "animal")


@pytest.mark.parametrize("centred", [True, False])
def test_frozen_norm_against_torch(centred: bool) -> None:
    """A LayerNorm / RMS norm frozen at its input's scale: the parts through it sum (with β) to torch's output."""
    g = torch.Generator().manual_seed(0)
    d = 7  # odd: the probe vectors' other branch
    norm = torch.nn.LayerNorm(d) if centred else torch.nn.RMSNorm(d, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(d, generator=g))
        if centred:
            norm.bias.copy_(torch.randn(d, generator=g))
    parts = torch.randn(4, 3, d, generator=g, dtype=torch.float64)  # 4 parts at 3 tokens
    x = parts.sum(0)
    out, beta = freeze(norm, x, None, parts, "test")
    want = norm(x.float()).double()
    assert torch.allclose(out.sum(0) + (0 if beta is None else beta), want, atol=1e-5)
    assert (beta is not None) == centred
    if centred:  # LayerNorm centres each part: a constant part maps to nothing
        const, _ = freeze(norm, x, None, torch.ones(1, 3, d, dtype=torch.float64), "test")
        assert float(const.abs().max()) < 1e-12


def _fake(terms: np.ndarray, versus: np.ndarray) -> Why:
    srcs = (("embeddings", "embed", -1, -1), ("L0H0", "head", 0, 0), ("L0H1", "head", 0, 1), ("L0 MLP", "mlp", 0, -1))
    return Why("m", "encoder", 1, 0, ("a", "it", "x", "y"), 1, 2, 3, srcs, srcs, terms, 0.5, float(terms.sum()) + 0.5,
               0.6, versus, 0.25, float(versus.sum()) + 0.25, 0.1)  # fmt: skip


def test_plan_groups_crops_and_names_the_top_pair() -> None:
    terms = np.arange(16, dtype=float).reshape(4, 4) - 5.0
    w = _fake(terms, np.ones((4, 4)))
    t, pos, score = shown_terms(w)
    assert np.allclose(t, terms - 1.0) and pos == 0.25 and score == pytest.approx(t.sum() + pos)
    rows, cols, m = grouped(t, w.q_sources, w.k_sources, expand=False)
    assert rows == cols == ["embeddings", "L0 heads", "L0 MLP"] and m.sum() == pytest.approx(t.sum())
    assert m[1, 1] == pytest.approx(t[1:3, 1:3].sum())
    (top,) = top_pairs(rows, cols, m, 1)
    assert top[:2] == ("L0 MLP", "L0 heads") and top[2] == pytest.approx(t[3, 1] + t[3, 2])  # 7 + 8 beats 9
    r, _c, small = crop(*grouped(t, w.q_sources, w.k_sources, expand=True), 2)
    assert r == ["embeddings", "L0 MLP"] and small.shape == (2, 2)
    text = sentence(w, rows, cols, m)
    assert "'it' scores 'x' more than 'y'" in text
    assert "because of L0 MLP in 'it' × L0 heads in 'x' vs 'y' (+15 " in text
    assert "most against: embeddings in 'it' × L0 heads in 'x' vs 'y' (-9)" in text
    last = csv_rows(w)
    assert last[-2] == ("position bias", "", 0.25) and last[-1][2] == pytest.approx(score)
    assert sum(v for *_, v in last[:-2]) + last[-2][2] == pytest.approx(last[-1][2])


def test_default_keys_prefer_words_the_mask_shows() -> None:
    row = np.array([0.5, 0.1, 0.3, 0.0, 0.1])  # [CLS], it, animal, (hidden), street
    assert default_keys(row) == (0, 2)
    words = np.array([False, False, True, True, True])
    assert default_keys(row, row > 0, words) == (2, 4)  # [CLS] and the query itself set aside; 3 is hidden
    assert default_keys(row, row > 0, np.zeros(5, dtype=bool)) == (0, 2)  # nothing preferred: every visible key
    assert default_keys(np.array([0.0, 1.0]), np.array([False, True])) == (1, None)
