"""The Lesson tab and the W^O picture: every matrix drawn is the trace's, the two claims hold and match
independent torch computations, the default head and the mask are named right, "learned" only when it is."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from apptest_helpers import array, assert_clean, heatmaps, new_app, open_all, run_app, specs

from conftest import SENTENCE, random_weights
from mha_viz.analysis.lesson import default_head, mask_kind, wo_origin
from mha_viz.analysis.opening import layer_opening
from mha_viz.attention import compute_trace, loop_attention
from mha_viz.config import Config
from mha_viz.pipeline.road import layer_input, layer_trace, layer_weights, record, traces
from mha_viz.studies.claims import identity_equivalence, loop_vs_batched
from mha_viz.ui.sidebar import VIEWS

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

STEP_TITLES = ("Step 1.", "Step 2.", "Step 3.", "Step 4.", "Step 5.", "Step 6.", "Step 7.")


def _z(spec: dict, k: int = 0) -> np.ndarray:
    return array(heatmaps(spec)[k]["z"]).astype(np.float64)


def _titles(at) -> list[str]:
    return [s["layout"]["title"]["text"] for s in specs(at)]


def _sdpa_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask=None) -> torch.Tensor:
    """torch's own attention, head by head. Shapes: q [h, n, dk]; k, v [h, nk, dk] -> [n, h*dk]."""
    out = [F.scaled_dot_product_attention(q[j], k[j], v[j], attn_mask=mask, scale=scale) for j in range(q.shape[0])]
    return torch.cat(out, dim=1)


# --- pure parts ------------------------------------------------------------------------------------------
def test_default_head_prefers_it_to_animal() -> None:
    pieces = ["[CLS]", "The", "animal", "was", "tired", "It", "[SEP]"]
    pattern = np.full((4, 7, 7), 1 / 7)
    pattern[2, 5, 2] = 0.6  # head 2: "It" -> "animal" (case ignored)
    pattern[1, 1, 2] = 0.9  # head 1: token 1 -> "animal" is larger, but "It" is the query
    head, why = default_head(pattern, pieces, pieces)
    assert head == 2 and "animal" in why
    no_it = [p if p != "It" else "she" for p in pieces]
    assert default_head(pattern, no_it, no_it)[0] == 2  # the app's pair: the last pronoun, the word after "the"
    no_animal = [p if p != "animal" else "cat" for p in pieces]
    head, why = default_head(pattern, no_animal, no_animal)
    assert head == 2 and "“cat”" in why
    no_pronoun = [p if p != "It" else "now" for p in pieces]
    assert default_head(pattern, no_pronoun, no_pronoun)[0] == 0


def test_default_head_is_the_apps_rule_not_the_largest_weight() -> None:
    """Issue 35 §3.2: one opening rule. A head where every token looks at "animal" has the largest weight from "it"
    but is not the head the app (analysis.opening) opens on; the Lesson and Lines opened it."""
    from mha_viz.figures import strongest_head

    pieces = ["[CLS]", "the", "animal", "was", "tired", "it", "[SEP]"]
    pattern = np.full((3, 7, 7), 0.1)
    pattern[0, :, 2] = 0.7  # head 0: every token looks at "animal" (the largest weight, 0.7, from "it" too)
    pattern[1, 5, 2] = 0.5  # head 1: only "it" does
    assert layer_opening(pattern, pieces, pieces) == 1
    assert default_head(pattern, pieces, pieces)[0] == strongest_head(pattern, pieces, pieces) == 1


def test_mask_kind_names_each_mask() -> None:
    n = 6
    ones = np.ones((n, n), dtype=bool)
    tril = np.tril(ones)
    assert mask_kind(ones)[0] == "none"
    assert mask_kind(tril)[0] == "causal"
    band = tril & ~np.tril(ones, -3)  # itself and 2 before
    kind, sentence = mask_kind(band)
    assert kind == "sliding" and "2 tokens before" in sentence
    pad = ones.copy()
    pad[:, 4:] = False
    assert mask_kind(pad)[0] == "padding"
    assert mask_kind(tril & pad)[0] == "causal + padding"
    odd = ones.copy()
    odd[2, 3] = False
    assert mask_kind(odd)[0] == "other"


@pytest.mark.parametrize("kv", [3, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_loop_vs_batched_from_weights(kv: int, causal: bool, tiny_x: torch.Tensor) -> None:
    w = random_weights(d_model=12, n_heads=3, seed=4)
    if kv == 1:  # grouped-query: one K/V head shared by the three query heads
        import dataclasses

        w = dataclasses.replace(w, W_K=w.W_K[:1], W_V=w.W_V[:1], b_K=w.b_K[:1], b_V=w.b_V[:1])
    t = compute_trace(w, tiny_x, causal=causal, device="cpu", dtype="float64")
    eq = loop_vs_batched(t, w, tiny_x)
    assert eq.max_diff < 1e-12
    allowed = torch.ones(5, 5, dtype=torch.bool).tril() if causal else None
    _, reference = loop_attention(w, tiny_x, allowed=allowed)  # the engine's own slow reference
    np.testing.assert_allclose(eq.left, reference.numpy(), atol=1e-12)
    np.testing.assert_allclose(eq.right, t.output.numpy(), atol=1e-12)
    from_qkv = loop_vs_batched(t, None, None)  # the non-plain road: from the recorded q, k, v
    assert from_qkv.max_diff < 1e-12 and "recorded" in from_qkv.note
    np.testing.assert_allclose(from_qkv.right, t.output.numpy(), atol=1e-12)
    other = loop_vs_batched(t, w, tiny_x * 1.01)  # another X: both forms move away from the trace's output
    assert np.abs(other.right - t.output.numpy()).max() > 1e-6 and other.max_diff < 1e-12


def test_identity_equivalence_is_torch_attention(tiny_x: torch.Tensor) -> None:
    w = random_weights(d_model=12, n_heads=3, seed=2)
    eq = identity_equivalence(w, tiny_x)
    assert eq.max_diff < 1e-12
    cat = [torch.cat(list(m), dim=1) for m in (w.W_Q, w.W_K, w.W_V)]  # [d, d] each: the heads side by side
    q, k, v = (tiny_x @ m + b.reshape(-1) for m, b in zip(cat, (w.b_Q, w.b_K, w.b_V), strict=True))
    expected = F.scaled_dot_product_attention(q, k, v)  # scale 1/sqrt(d_model)
    np.testing.assert_allclose(eq.right, expected.numpy(), atol=1e-12)
    np.testing.assert_allclose(eq.left, expected.numpy(), atol=1e-12)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    masked = identity_equivalence(w, tiny_x, allowed=causal)
    np.testing.assert_allclose(masked.right, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-12)
    assert masked.max_diff < 1e-12


def test_wo_origin_says_learned_only_for_trained_models() -> None:
    assert "learned" in wo_origin(False) and "not" not in wo_origin(False)
    assert "not learned" in wo_origin(True, "xavier", seed=3) and "xavier" in wo_origin(True, "xavier")
    assert "identity" in wo_origin(True, "identity") and "not learned" in wo_origin(True, "identity")
    assert "file" in wo_origin(True, loaded=True)


# --- the tab, on the bundled MiniLM ------------------------------------------------------------------------
def _minilm_layer(minilm, layer: int, config: Config | None = None):
    config = config or Config()
    rec = record(minilm, SENTENCE)
    return (layer_trace(minilm, rec, "encoder", layer, config), layer_weights(minilm, rec, "encoder", layer),
            layer_input(rec, "encoder", layer))  # fmt: skip


def test_lesson_steps_are_the_trace(minilm) -> None:
    at = run_app(view="Lesson", layer="2")
    assert_clean(at)
    assert at.tabs[0].label == "Lesson" and VIEWS[0] == "Lesson"
    labels = [e.label for e in at.expander]
    assert [lab[: len("Step 1.")] for lab in labels[:7]] == list(STEP_TITLES)  # 1..7, in order, all shown
    assert labels[7].startswith("(a) ") and labels[8].startswith("(b) ")  # the two claims
    _, _, (t,) = traces(Config(), SENTENCE, layers=[2], lm=minilm)
    labels = list(t.tokens)
    it, animal = labels.index("it"), labels.index("animal")
    head = int(np.argmax(t.pattern[:, it, animal].numpy()))  # the default: most weight from "it" to "animal"
    assert at.selectbox(key="lesson_head").value == head
    first, x = specs(at)  # the first screen: the head's attention beside the words, then step 1 (X) only
    np.testing.assert_allclose(_z(first), t.pattern[head].double().numpy(), rtol=1e-5, atol=1e-5)
    assert first["layout"]["title"]["text"].startswith(f"Head {head}: attention weights [15 × 15]")
    np.testing.assert_allclose(_z(x), t.x.double().numpy(), rtol=1e-5, atol=1e-5)
    assert len([c for c in at.caption if c.value.startswith("More: the ")]) == 1
    s = specs(open_all(at))[1:]  # after the first screen's
    assert len(s) == 13  # X; Q, K, V; QKᵀ; scaled; masked; softmax; z, concat, output; claims (a) and (b)
    qk = t.q[head].double() @ t.k[head].double().T  # [n, n]
    expected = [t.x, t.q[head], t.k[head], t.v[head], qk, qk * t.scale, t.scores[head], t.pattern[head],
                t.z[head], t.concat, t.output]  # fmt: skip
    n = t.n_tokens
    for spec, want in zip(s, expected, strict=False):
        want = want.double().numpy()
        np.testing.assert_allclose(_z(spec), want, rtol=1e-5, atol=1e-5, err_msg=spec["layout"]["title"]["text"])
        assert f"[{want.shape[0]} × {want.shape[1]}]" in spec["layout"]["title"]["text"]
        assert list(heatmaps(spec)[0]["y"]) == list(t.tokens)
    assert "+ b_Q[" in s[1]["layout"]["title"]["text"]  # MiniLM's projections have biases: named in the title
    assert n == 15 and np.isfinite(_z(s[6])).all()  # an encoder: nothing masked
    deeper = [c.value for c in at.caption if c.value.startswith("More: the ")]
    assert len(deeper) == 7
    assert all(any(f"the {v} tab" in c for v in VIEWS) for c in deeper)


def test_lesson_claims_match_torch(minilm) -> None:
    at = open_all(run_app(view="Lesson", layer="1"))
    t, w, x = _minilm_layer(minilm, 1)
    s = specs(at)
    claim_a, claim_b = s[-2], s[-1]
    xd = x.double()
    wd = w.to("cpu", torch.float64)

    def proj(m, b):  # [h, n, dk]
        return torch.einsum("nd,hdk->hnk", xd, m) + b[:, None, :]

    concat = _sdpa_heads(proj(wd.W_Q, wd.b_Q), proj(wd.W_K, wd.b_K), proj(wd.W_V, wd.b_V), wd.scale_factor)
    out = concat @ wd.W_O.reshape(-1, wd.d_model) + wd.b_O  # [n, d]: torch's attention, head by head
    for k in (0, 1):
        np.testing.assert_allclose(_z(claim_a, k), out.numpy(), atol=1e-5)
    np.testing.assert_allclose(_z(claim_a, 0), t.output.double().numpy(), atol=1e-4)  # and the model's output
    assert _z(claim_a, 2).max() < 1e-5
    cat = [torch.cat(list(m), dim=1) for m in (wd.W_Q, wd.W_K, wd.W_V)]
    q, k, v = (xd @ m + b.reshape(-1) for m, b in zip(cat, (wd.b_Q, wd.b_K, wd.b_V), strict=True))
    single = F.scaled_dot_product_attention(q, k, v)  # one head of width d_model, W^O = I: plain attention
    for j in (0, 1):
        np.testing.assert_allclose(_z(claim_b, j), single.numpy(), atol=1e-5)
    assert _z(claim_b, 2).max() < 1e-5
    assert not np.allclose(_z(claim_b, 0), _z(claim_a, 0), atol=1e-3)  # two different computations
    diffs = [
        a["text"]
        for spec in (claim_a, claim_b)
        for a in spec["layout"]["annotations"]
        if a["text"].startswith("|difference|")
    ]

    def worst(d: str) -> float:  # "|difference|, max 1.2e-07", or "|difference|: 0 everywhere (identical)"
        return 0.0 if "0 everywhere" in d else float(d.split("max ")[1])

    assert len(diffs) == 2 and all(worst(d) < 1e-5 for d in diffs)


def test_lesson_mask_hover_and_head_from_the_link(minilm) -> None:
    at = open_all(run_app(view="Lesson", causal="true", lesson_head="head 3", layer="0"))
    assert at.selectbox(key="lesson_head").value == 3
    assert any(lab.startswith("Step 5. Mask: causal") for lab in (e.label for e in at.expander))
    masked = next(spec for spec in specs(at) if spec["layout"]["title"]["text"].startswith("mask ("))
    z = _z(masked)
    n = z.shape[0]
    above = np.triu(np.ones((n, n), dtype=bool), 1)
    assert np.isnan(z[above]).all() and np.isfinite(z[~above]).all()
    text = np.asarray(heatmaps(masked)[0]["text"], dtype=object)
    assert (text[above] == "−∞ (masked)").all() and not any("nan" in str(v).lower() for v in text.ravel())
    _, _, (t,) = traces(Config(causal=True), SENTENCE, layers=[0], lm=minilm)
    np.testing.assert_allclose(_z(specs(at)[0]), t.pattern[3].numpy(), atol=1e-6)  # the first screen: head 3's
    np.testing.assert_allclose(_z(specs(at)[8]), t.pattern[3].numpy(), atol=1e-6)  # and step 6's softmax
    at.selectbox(key="lesson_head").set_value(5).run()
    assert_clean(at)
    assert len(specs(at)) == 14 and specs(at)[2]["layout"]["title"]["text"].startswith("Q_5")  # steps stay open
    at.button(key="lesson_open_all").click().run()  # "Close all steps"
    assert_clean(at)
    assert len(specs(at)) == 1 and at.button(key="lesson_open_all").label == "Open all steps"  # the first screen
    opened = dict(at.session_state["_lesson_opened"])  # every one closed
    at.session_state["_lesson_opened"] = opened | {"lesson_step_6": True}  # one opened (as a click on its header)
    at.run()
    first, softmax = specs(at)
    np.testing.assert_allclose(_z(softmax), t.pattern[5].numpy(), atol=1e-6)
    np.testing.assert_allclose(_z(first), t.pattern[5].numpy(), atol=1e-6)


def test_lesson_default_head_follows_the_layer(minilm) -> None:
    at = run_app(view="Lesson")
    at.selectbox(key="layer").set_value(4).run()
    assert_clean(at)
    _, _, (t,) = traces(Config(), SENTENCE, layers=[4], lm=minilm)
    labels = list(t.tokens)
    expected = layer_opening(t.pattern.numpy(), labels, labels)  # the one opening rule, inside layer 4
    assert expected == 11  # (the largest weight from "it" to "animal" is head 3's: not what the app opens)
    assert at.selectbox(key="lesson_head").value == expected


def test_every_surface_opens_on_the_same_head(minilm) -> None:
    """Issue 35 §3.2: the app's opened head (Heads), the Lesson, Lines and the notebook API agree (analysis.opening);
    the example notebook's head is checked in test_notebook."""
    from mha_viz import show

    layer, head, _ = show.found(SENTENCE)
    assert (layer, head) == (3, 1)
    at = run_app(view="Heads")
    assert_clean(at)
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (layer, head)
    lesson = run_app(view="Lesson")
    assert (lesson.selectbox(key="layer").value, lesson.selectbox(key="lesson_head").value) == (layer, head)
    lines = run_app(view="Lines")
    assert (lines.selectbox(key="layer").value, lines.multiselect(key="lines_heads").value) == (layer, [head])
    assert show.lines(SENTENCE, layer).layout.title.text.startswith(f"Layer {layer}, head {head}:")
    for other in range(6):  # inside any layer, the Lesson and Lines open the rule's head
        t = show.trace(SENTENCE, other)
        labels = list(t.tokens)
        want = layer_opening(t.pattern.numpy(), labels, labels)
        assert default_head(t.pattern.numpy(), labels, labels)[0] == want
        assert show.lines(SENTENCE, other).layout.title.text.startswith(f"Layer {other}, head {want}:")


# --- the W^O tab --------------------------------------------------------------------------------------
def test_wo_view_draws_wo_and_the_identity_check(minilm) -> None:
    at = new_app(view="W^O", layer="3")
    at.session_state["wo_identity_open"] = True  # the check's matrices: drawn only while its expander is open
    at.run()
    assert_clean(at)
    t, w, x = _minilm_layer(minilm, 3)
    wo = specs(at)[0]
    full = t.W_O.reshape(12 * 32, 384).double().numpy()  # [h·d_k, d_model] = 384 × 384 > MAX_WO_CELLS a side
    pooled = full.reshape(192, 2, 192, 2).mean((1, 3))  # 2 × 2 blocks: rows 2j, 2j+1 lie in one head (d_k = 32)
    np.testing.assert_allclose(_z(wo), pooled, atol=1e-6)
    assert not np.allclose(pooled, full[::2, ::2], atol=1e-4)  # means, not every other entry
    assert wo["layout"]["yaxis"]["ticktext"] == [f"head {j}" for j in range(12)]
    yrefs = [shape["yref"] for shape in wo["layout"]["shapes"]]
    assert yrefs.count("y") == 11 and yrefs.count("y2") == 11  # a line between each two heads, in each panel
    title = wo["layout"]["annotations"][0]["text"]  # the pair's panel titles (figures.wo_pair: one chart)
    assert "learned" in title and "2 × 2 block means" in title and "mean" in heatmaps(wo)[0]["hovertemplate"]
    assert any("384 × 384 entries" in c.value and "download has every entry" in c.value for c in at.caption)
    assert not at.metric  # the bare number is gone; the picture says it
    check = specs(at)[-1]
    single = identity_equivalence(w, x)
    np.testing.assert_allclose(_z(check, 1), single.right, atol=1e-5)
    assert _z(check, 2).max() < 1e-5


@pytest.mark.parametrize(
    ("mode", "pick", "expected"),
    [
        ("identity", {}, lambda wo: np.eye(384)),
        ("ablate", {"ablate": [1, 4]}, lambda wo: np.concatenate([wo[j] * (j not in (1, 4)) for j in range(12)])),
        (
            "scale",
            {"scale_head": 2, "scale_factor": 0.5},
            lambda wo: np.concatenate([wo[j] * (0.5 if j == 2 else 1) for j in range(12)]),
        ),
    ],
)
def test_wo_view_draws_the_wo_in_use_and_says_what_the_change_means(mode: str, pick: dict, expected, minilm) -> None:
    """Issue 35 §2.6: before, the W^O picture stayed the learned matrix whatever the mode; now the learned one is
    beside the W^O in use (pooled as the view pools it), and one line says what the output change means."""
    from mha_viz.figures.lesson import wo_heatmap

    at = run_app(view="W^O", layer="3")
    at.radio(key="wo_mode").set_value(mode).run()
    for key, value in pick.items():
        (at.multiselect if key == "ablate" else at.selectbox if key == "scale_head" else at.slider)(key=key).set_value(
            value
        ).run()
    assert_clean(at)
    t, _, _ = _minilm_layer(minilm, 3)
    pair = specs(at)[0]  # the learned W^O and the W^O in use, one chart of two panels (figures.wo_pair)
    want = expected(t.W_O.double().numpy()).reshape(12, 32, 384)
    np.testing.assert_allclose(_z(pair, 1), np.asarray(wo_heatmap(want, "")[0].data[0].z), atol=1e-6)
    np.testing.assert_allclose(_z(pair, 0), np.asarray(wo_heatmap(t.W_O.numpy(), "")[0].data[0].z), atol=1e-6)
    learned, in_use = (a["text"] for a in pair["layout"]["annotations"])
    assert "W^O in use" in in_use and "learned" in learned
    meaning = [c.value for c in at.caption if c.value.startswith("What the change means")]
    assert len(meaning) == 1 and "Relative change 0: the same output" in meaning[0]


def test_own_weights_are_not_called_learned() -> None:
    at = run_app(view="W^O", src="Own weights", d_model="64", own_heads="4", seed="7")
    assert_clean(at)
    intro = at.markdown[0].value
    assert "not learned" in intro and "xavier" in intro and "seed 7" in intro
    assert "the learned W^O decides" not in intro
    title = specs(at)[0]["layout"]["annotations"][0]["text"]  # the W^O pair's first panel
    assert "not learned" in title and "(learned)" not in title
    names = [a["text"] for a in specs(at)[1]["layout"]["annotations"]]
    assert any("original W^O" in nm for nm in names) and not any("learned" in nm for nm in names)
    at = open_all(run_app(view="Lesson", src="Own weights", d_model="64", own_heads="4", init="identity"))
    step7 = next(m.value for m in at.markdown if m.value.startswith("Head "))
    assert "not learned" in step7 and "identity init" in step7


# --- a decoder with rotary embeddings and grouped K/V (SmolLM2) ------------------------------------------
def test_lesson_on_smollm2_shows_q_k_v_as_used() -> None:
    from mha_viz.pipeline.road import load

    at = open_all(run_app(view="Lesson", src="SmolLM2-135M (bundled)", layer="2"))
    lm = load(Config(model="smollm2"))
    _, _, (t,) = traces(Config(model="smollm2"), SENTENCE, layers=[2], lm=lm)
    i = at.selectbox(key="lesson_head").value
    g = i // t.group
    s = specs(at)[1:]  # after the first screen's attention
    titles = _titles(at)[1:]
    assert titles[1].startswith(f"Q_{i} = X · W_Q[{i}], before rotation") and "rotated" in titles[3]
    want = [t.x, t.q_pre[i], t.k_pre[g], t.q[i], t.k[g], t.v[g]]  # as Step by step orders them
    for spec, m in zip(s, want, strict=False):
        np.testing.assert_allclose(_z(spec), m.double().numpy(), rtol=1e-5, atol=1e-5)
    assert any(e.label == "Step 5. Mask: causal" for e in at.expander)
    assert any("rotary" in m.value for m in at.markdown)
    claim_a = s[-1]
    q, k, v = t.q.double(), t.k.double().repeat_interleave(t.group, 0), t.v.double().repeat_interleave(t.group, 0)
    concat = _sdpa_heads(q, k, v, t.scale, mask=torch.ones(t.n_tokens, t.n_tokens, dtype=torch.bool).tril())
    loop = concat @ t.W_O.double().reshape(-1, t.W_O.shape[-1])
    np.testing.assert_allclose(_z(claim_a, 1), loop.numpy(), atol=1e-4)
    assert _z(claim_a, 2).max() < 1e-5
    assert any("not plain linear maps" in i.value for i in at.info)  # claim (b) says why it is not shown


def test_large_pictures_are_block_means_that_say_so() -> None:
    from mha_viz.figures import comparison, wo_heatmap

    rng = np.random.default_rng(0)
    w_o = rng.normal(size=(9, 64, 576)).astype(np.float32)  # SmolLM2's shape: 576 > MAX_WO_CELLS a side
    fig, note = wo_heatmap(w_o, "W^O")
    z = np.asarray(fig.data[0].z, dtype=np.float64)
    # at most 192 a side: rows pooled 4 by 4 (3 does not divide d_k = 64: a block would straddle two heads), columns 3
    expected = w_o.reshape(576, 576).reshape(144, 4, 192, 3).mean((1, 3))
    np.testing.assert_allclose(z, expected, atol=1e-5)
    assert "4 × 3 block" in note and list(fig.layout.yaxis.ticktext) == [f"head {j}" for j in range(9)]
    assert "4 × 3 block means" in fig.layout.title.text and "mean" in fig.data[0].hovertemplate
    fig, note = wo_heatmap(w_o[:3, :, :150], "W^O")  # 192 × 150: every entry, and nothing says "mean"
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), w_o[:3, :, :150].reshape(192, 150))
    assert note == "" and "mean" not in fig.layout.title.text + fig.data[0].hovertemplate
    left = rng.normal(size=(400, 384))
    right = left.copy()
    right[123, 45] += 1e-3  # one entry off: the printed max must see it even though the picture is pooled
    fig = comparison(left, right, ("a", "b"), [str(i) for i in range(400)], "claim")
    assert "block means" in fig.layout.title.text and fig.layout.annotations[2].text == "|difference|, max 1.00e-03"
    assert np.asarray(fig.data[0].z).shape == (200, 192)


def test_first_screen_map_is_the_largest_picture_and_names_the_head_it_draws(minilm) -> None:
    """Issue 35 §2.8 and §2.3: the first screen's map had two fifths of the width (about 145 px of plot at 1280 px)
    beside three fifths of words; and after switching to own weights the Lesson drew head 0 under "This layer's own
    first choice: head 2 …". Now the map's column is the wider one, and the caption names the head drawn."""
    at = run_app(view="Lesson")
    assert_clean(at)
    columns = list(at.columns)
    k = next(j for j, c in enumerate(columns) if c.get("plotly_chart"))  # the column that holds the first map
    words, first = columns[k - 1], columns[k]  # the intro's words beside it
    assert words.get("markdown") and first.proto.weight >= 0.6 > words.proto.weight
    assert specs(at)[0]["layout"]["height"] >= 440
    at.sidebar.radio(key="src").set_value("own").run()  # own weights: the opened head becomes head 0
    assert_clean(at)
    shown = at.selectbox(key="lesson_head").value
    caption = next(
        c.value.replace("\\", "") for c in at.caption if "Opened first" in c.value or c.value.startswith("Shown")
    )
    title = specs(at)[0]["layout"]["title"]["text"]
    assert title.startswith(f"Head {shown}:")
    if "Opened first" not in caption:  # the layer's own first choice is another head: said as such
        assert caption.startswith(f"Shown: head {shown}, the opened head") and "would be head" in caption
    else:
        assert f"head {shown}" in caption.split(":")[1]
