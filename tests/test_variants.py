"""Share keys and values (MHA → GQA → MQA, mha_viz/studies/variants.py): the conversion at the attention call against a
direct edit of a copy's weights on a tiny BERT and a tiny GQA LLaMA, the grouping rules, the cache formula, the
CLI's contract and the Variants view."""

from __future__ import annotations

import copy
import csv

import numpy as np
import pytest
import torch
from references import kv_names, kv_pooled_copy

from conftest import SENTENCE, _tiny_tokenizer, _zoo_dir, tiny_model
from mha_viz.cli.main import main
from mha_viz.models.load import prepare
from mha_viz.models.run import run_model
from mha_viz.pipeline.door import run as door_run
from mha_viz.studies import collab, importance, moh
from mha_viz.studies import variants as va

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

TEXT = "The animal was tired"


def _tiny(model_type: str):
    return tiny_model(model_type)


@pytest.fixture(scope="module", params=["bert", "llama"])
def tiny(request):
    return _tiny(request.param)


def _edited(lm, part: str, groups: tuple[tuple[int, ...], ...]):
    model = kv_pooled_copy(lm, part, groups)
    return prepare(model, lm.tokenizer, lm.name + "-edited")


def _run(lm, share=None):
    ids = torch.tensor([lm.tokenizer(TEXT)["input_ids"]])  # [1, pos]
    out = door_run(lm, ids, *va.conversion(share or {}), record=False)
    return out.logits if out.logits is not None else out.hidden


def test_mean_pooled_conversion_equals_a_direct_weight_edit(tiny) -> None:
    part = tiny.parts[0]
    assert all(kv_names(s) for s in tiny.sites)  # separate plain K and V projections to edit
    before = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    counts = va.kv_counts(tiny.n_kv_heads)[1:]  # BERT: 2 and 1 of 4; the GQA LLaMA: 1 of 2
    assert counts
    for g in counts:
        groups = va.consecutive_groups(tiny.n_kv_heads, g)
        plan = va.share_plan(part, (groups,) * tiny.n_layers(part))
        converted = _run(tiny, plan)
        expected = _run(_edited(tiny, part, groups))
        torch.testing.assert_close(converted, expected, atol=2e-5, rtol=1e-4)
        assert (converted - _run(tiny)).abs().max() > 1e-3  # the conversion changes the output: the test can fail
    after = tiny.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the shared model is never changed


def test_one_layer_converted_equals_a_weight_edit_of_that_layer() -> None:
    lm = _tiny("llama")
    groups = ((1,), (0,))  # not consecutive in order: still a partition; one group of two below
    assert va.share_plan("decoder", (groups,)) == {}
    groups = ((0, 1),)
    plan = {("decoder", 1): groups}  # one layer only
    model = copy.deepcopy(lm.model)
    for name in kv_names(lm.site("decoder", 1)):
        w = model.get_submodule(name).weight  # [n_kv * d_head, d_model]
        with torch.no_grad():
            w.copy_(w.view(2, -1, w.shape[1]).mean(0, keepdim=True).expand(2, -1, -1).reshape(w.shape))
    torch.testing.assert_close(_run(lm, plan), _run(prepare(model, lm.tokenizer, "e")), atol=2e-5, rtol=1e-4)


def test_own_kv_head_count_changes_nothing(tiny) -> None:
    part = tiny.parts[0]
    singles = va.consecutive_groups(tiny.n_kv_heads, tiny.n_kv_heads)
    plan = {(part, la): singles for la in range(tiny.n_layers(part))}
    assert (_run(tiny, plan) - _run(tiny)).abs().max() <= 1e-6
    found = va.study(tiny, [TEXT], groupings=("mean",))
    own = found.curve("mean")[0]
    assert own.kv_heads == tiny.n_kv_heads and own.change == 0.0
    assert all(p.change != 0.0 for p in found.curve("mean")[1:])


def test_kv_cache_formula() -> None:
    assert va.kv_cache_bytes(6, 12, 32, 10) == 2 * 6 * 12 * 32 * 10 * 4 == 184_320
    assert va.kv_cache_bytes(30, 3, 64, va.LONG_CONTEXT) == 1_509_949_440  # SmolLM2-135M at 32k tokens, float32
    lm = _tiny("llama")  # 2 layers, 2 K/V heads of 16
    texts = [TEXT, SENTENCE]
    found = va.study(lm, texts, groupings=("mean",))
    tokens = np.mean([len(lm.tokenizer(t)["input_ids"]) for t in texts])
    assert found.d_head == 16 and found.tokens == tokens
    for p in found.points:
        assert p.kv_cache_bytes == pytest.approx(2 * 2 * p.kv_heads * 16 * tokens * 4)
        assert p.long_cache_bytes == 2 * 2 * p.kv_heads * 16 * 32_768 * 4
    assert [p.kv_heads for p in found.points] == [2, 1]


def test_groupings() -> None:
    assert va.kv_counts(12) == [12, 6, 4, 3, 2, 1]
    assert va.consecutive_groups(6, 2) == ((0, 1, 2), (3, 4, 5))
    with pytest.raises(va.MhaVizError, match="do not divide"):
        va.consecutive_groups(6, 4)
    sim = np.eye(4)
    sim[0, 2] = sim[2, 0] = 0.9
    sim[1, 3] = sim[3, 1] = 0.8
    assert va.aligned_groups(sim, 2) == ((0, 2), (1, 3))
    assert va.aligned_groups(sim, 1) == ((0, 1, 2, 3),)
    assert va.aligned_groups(sim, 4) == ((0,), (1,), (2,), (3,))
    k = torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(0))
    s = va.similarity(torch.stack([k[0], k[1], 2 * k[0], -k[1]]), torch.stack([k[0], k[1], k[0], k[1]]))
    assert s[0, 2] == pytest.approx(1.0) and s[1, 3] == pytest.approx(0.0, abs=1e-12)


def test_a_latent_attention_model_is_refused(tmp_path_factory) -> None:
    from zoo import build

    lm = prepare(build("deepseek_v3"), _tiny_tokenizer(), "tiny-deepseek")
    with pytest.raises(va.MhaVizError, match="shared latent"):
        va.study(lm, [TEXT])


# --- the CLI ------------------------------------------------------------------------------------------------------


def test_cli_writes_one_row_per_grouping_and_count(tmp_path_factory, tmp_path, capsys) -> None:
    folder = _zoo_dir(tmp_path_factory, "llama")
    out = tmp_path / "v.csv"
    code = main(["variants", "--model", folder, "--text", TEXT, "--text", SENTENCE, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["grouping", "kv_heads", "kv_cache_bytes", "change"]
    assert [(r["grouping"], int(r["kv_heads"])) for r in rows] == [("mean", 2), ("mean", 1), ("aligned", 2),
                                                                   ("aligned", 1), ("orthogonal", 2),
                                                                   ("orthogonal", 1)]  # fmt: skip
    assert float(rows[4]["change"]) == 0.0
    assert float(rows[0]["change"]) == 0.0 and float(rows[1]["change"]) != 0.0
    assert float(rows[1]["change"]) == pytest.approx(float(rows[3]["change"]))  # one group: the same pooling
    tokens = np.mean([len(_tiny_tokenizer()(t)["input_ids"]) for t in (TEXT, SENTENCE)])
    assert float(rows[1]["kv_cache_bytes"]) == pytest.approx(2 * 2 * 1 * 16 * tokens * 4, rel=1e-5)
    assert "32,768 tokens" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "v.txt"], "--out must name a .csv file"),
        (["--model", "own", "--out", "v.csv"], "needs a pretrained model"),
    ],
)
def test_cli_errors_are_one_line(args: list[str], message: str, capsys) -> None:
    assert main(["variants", "--text", TEXT, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_refuses_a_latent_attention_model(tmp_path_factory, tmp_path, capsys) -> None:
    folder = _zoo_dir(tmp_path_factory, "deepseek_v3")
    assert main(["variants", "--model", folder, "--text", TEXT, "--out", str(tmp_path / "v.csv")]) == 2
    err = capsys.readouterr().err
    assert "shared latent" in err and err.count("\n") == 1


# --- the view -----------------------------------------------------------------------------------------------------


def test_variants_view_on_minilm(minilm) -> None:
    from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

    from mha_viz.config import Config
    from mha_viz.pipeline.road import traces
    from mha_viz.ui.views.variants import PARTS

    at = run_app(view="Variants", layer="2")
    assert_clean(at)
    grid, curve = specs(at)  # the first part alone: the others are drawn when their tab is opened
    maps = heatmaps(grid)
    _, _, (trace,) = traces(Config(), SENTENCE, layers=[2], lm=minilm)
    # at first the 4 heads whose patterns changed most, largest first: titles "head i before" / "...after: JS d"
    titles = [a["text"] for a in grid["layout"]["annotations"] if a["text"].startswith("head ")]
    assert len(maps) == 8 and len(titles) == 8
    shown = [int(t.split()[1]) for t in titles[::2]]
    js = [float(t.rsplit(" ", 1)[1]) for t in titles[1::2]]
    assert js == sorted(js, reverse=True) and len(set(shown)) == 4
    for k, h in enumerate(shown):
        np.testing.assert_allclose(array(maps[2 * k]["z"]), trace.pattern[h].numpy(), atol=1e-5)  # head h before
        assert not np.allclose(array(maps[2 * k + 1]["z"]), array(maps[2 * k]["z"]), atol=1e-3)  # after: changed
    at.toggle(key="var_every_head").set_value(True).run()
    maps = heatmaps(specs(at)[0])
    assert len(maps) == 24  # every head, before and after, in head order
    for h in range(12):
        np.testing.assert_allclose(array(maps[2 * h]["z"]), trace.pattern[h].numpy(), atol=1e-5)
    notes = specs(at)[0]["layout"]["annotations"]
    rest = [float(a["text"].rsplit(" ", 1)[1]) for a in notes if "after: JS" in a["text"]]
    assert sorted(rest, reverse=True)[:4] == js  # the four shown first are the four largest
    found = va.study(minilm, [SENTENCE])
    lines = {t["name"]: t for t in curve["data"]}
    for name in ("mean", "aligned", "orthogonal"):
        expected = [p.change for p in found.curve(name)]
        np.testing.assert_allclose(array(lines[va.GROUPINGS[name]]["y"]), expected, atol=1e-6)
        mib = [p.kv_cache_bytes / 2**20 for p in found.curve(name)]
        np.testing.assert_allclose(array(lines[va.GROUPINGS[name]]["x"]), mib, rtol=1e-6)
    star = next(t for t in curve["data"] if t["name"].startswith("this model"))
    assert "12 K/V heads" in star["name"] and array(star["y"]).tolist() == [0.0]
    page = " ".join(m.value for m in at.markdown)
    assert "2 · layers · kv_heads · d_head · tokens · 4 bytes" in page and "2 · 6 · g · 32 · tokens · 4" in page
    at.toggle(key="var_long").set_value(True).run()
    assert_clean(at)
    long_line = {t["name"]: t for t in specs(at)[1]["data"]}[va.GROUPINGS["mean"]]
    assert array(long_line["x"]).tolist() == [2 * 6 * g * 32 * 32_768 * 4 / 2**20 for g in (12, 6, 4, 3, 2, 1)]
    # collaborative heads: layer 2's concatenated W_Q (384 wide) against one head's (32 wide)
    at.session_state["var_part"] = PARTS["collab"]
    at.run()
    assert_clean(at)
    energy, rank = specs(at)
    names = [t["name"] for t in energy["data"]]
    assert names[0].startswith("all heads' W_Q (384 wide)") and "one head's W_Q (32 wide" in names[2]
    want = collab.energy_curve(want_sv(minilm, 2))
    np.testing.assert_allclose(array(energy["data"][0]["y"]), want * 100, rtol=1e-5)
    table = at.dataframe[0].value
    dims = collab.energy_dims(want_sv(minilm, 2))[1]
    assert len(table) == 6 and table.iloc[2]["W_Q 95%"].startswith(f"{dims} of 384")
    what_if = collab.rank_curve(minilm, SENTENCE, None, "encoder", 2)
    assert list(rank["data"][0]["x"])[-1] == "384 (100%)" and what_if.ranks_q == (48, 96, 128, 192, 256, 384)
    np.testing.assert_allclose(array(rank["data"][0]["y"]), what_if.change, atol=1e-6)
    assert abs(what_if.change[-1]) <= 1e-6 < what_if.change[0]
    # mixture of heads: layer 2's usage map at k = 6, then routed against static for every k
    at.session_state["var_part"] = PARTS["mixture"]
    at.run()
    assert_clean(at)
    (usage,) = specs(at)
    want_usage = moh.head_usage(minilm, SENTENCE, None, "encoder", 6)[2]  # [q, h]
    np.testing.assert_array_equal(array(usage["data"][0]["z"]), want_usage.astype(float))
    assert "‖z_h · W_O^h‖" in " ".join(m.value for m in at.markdown)
    at.toggle(key="moh_run").set_value(True).run()
    assert_clean(at)
    routed, static = specs(at)[-1]["data"]
    want = moh.moh_curve(
        minilm, [SENTENCE], importance=importance.head_importance(importance.Scorer(minilm, [SENTENCE]))
    )
    np.testing.assert_allclose(array(routed["y"]), want.routed, atol=1e-6)
    np.testing.assert_allclose(array(static["y"]), want.static, atol=1e-6)


# --- collaborative heads (Cordonnier et al. 2020) -----------------------------------------------------------------


def want_sv(lm, layer: int) -> np.ndarray:
    """The concatenated queries' singular values straight from the module: nn.Linear weight [h * d_head, d_model]."""
    return torch.linalg.svdvals(lm.model.get_submodule(lm.site(None, layer).qkv[0]).weight.double()).numpy()


def test_energy_dims() -> None:
    assert collab.energy_dims(np.array([3.0, 1.0])) == (1, 2, 2)  # 9/10 of the energy in the first
    assert collab.energy_dims(np.array([2.0, 1.0, 1.0])) == (3, 3, 3)  # 4/6, 5/6, 1
    assert collab.energy_dims(np.ones(100)) == (90, 95, 99)
    np.testing.assert_allclose(collab.energy_curve(np.array([3.0, 1.0])), [0.9, 1.0])


def test_spectra_of_the_concatenated_projections() -> None:
    from zoo import build

    model = build("bert")  # d_model 64, 4 heads of 16: W_Q is [64 × 64]
    lm = prepare(model, _tiny_tokenizer(), "tiny-bert")
    free = collab.spectra(lm)
    np.testing.assert_allclose(free[0].q / free[0].q[0], want_sv(lm, 0) / want_sv(lm, 0)[0], rtol=1e-6)
    assert free[0].width_q == 64 and free[0].dims_q[1] > 32  # random heads: 39 of 64 (independent directions)
    shared = copy.deepcopy(model)
    basis = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))  # every head's queries in 8 directions
    for layer in shared.bert.encoder.layer if hasattr(shared, "bert") else shared.encoder.layer:
        w = layer.attention.self.query.weight  # [h * d_head, d_model]
        with torch.no_grad():
            w.copy_(torch.randn(64, 8, generator=torch.Generator().manual_seed(1)) @ basis.T)
    found = collab.spectra(prepare(shared, _tiny_tokenizer(), "tiny-bert-shared"))
    assert all(s.dims_q[2] <= 8 for s in found) and all(s.dims_k == free[i].dims_k for i, s in enumerate(found))


def test_variants_view_on_smollm2() -> None:
    """SmolLM2-135M: 9 query heads share 3 K/V heads of 64 in 30 layers; the only conversion left is MQA (g = 1), where
    both groupings pool all three heads, so their changes are equal; the loss goes up."""
    from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

    from mha_viz.ui.views.variants import PARTS

    at = run_app(src="SmolLM2-135M (bundled)", view="Variants", layer="3")
    assert_clean(at)
    grid, curve = specs(at)
    assert len(heatmaps(grid)) == 8  # the 4 of 9 heads that changed most, before and after
    assert at.selectbox(key="var_g").options == ["1"]
    lines = {t["name"]: t for t in curve["data"]}
    mean, aligned = (array(lines[va.GROUPINGS[n]]["y"]) for n in ("mean", "aligned"))
    assert mean[0] == 0.0 and mean[1] > 0.1 and mean[1] == pytest.approx(aligned[1])
    tokens = len(heatmaps(grid)[0]["x"])
    mib = [2 * 30 * g * 64 * tokens * 4 / 2**20 for g in (3, 1)]
    np.testing.assert_allclose(array(lines[va.GROUPINGS["mean"]]["x"]), mib)
    page = " ".join(m.value for m in at.markdown)
    assert "2 · 30 · g · 64 · tokens · 4" in page and "query head h reads K/V head h // 3" in page
    at.session_state["var_part"] = PARTS["collab"]
    (energy,) = specs(at.run())
    assert energy["data"][0]["name"].startswith("all heads' W_Q (576 wide)")
    at.session_state["var_part"] = PARTS["mixture"]
    (usage,) = specs(at.run())
    assert_clean(at)
    assert array(usage["data"][0]["z"]).sum(-1).tolist() == [4.0] * len(heatmaps(grid)[0]["y"])  # k = 9 // 2


def test_shared_basis_what_if_equals_a_weight_edit() -> None:
    """Layer 1's queries and keys on the top-r right singular vectors of the concatenated W_Q, W_K (r = 16 of 64):
    the same as W ← W V_r V_rᵀ in a deep copy (nn.Linear weight [out, in] ← V_r V_rᵀ · weight, biases kept)."""
    from mha_viz.studies.importance import Scorer

    lm = _tiny("bert")
    scorer = Scorer(lm, [TEXT])
    plan = collab.rank_plan(lm, scorer, 1, 0.25)
    converted = door_run(lm, scorer.texts[0].ids, *plan, record=False).hidden
    model = copy.deepcopy(lm.model)
    for name in lm.site("encoder", 1).qkv[:2]:
        lin = model.get_submodule(name)
        v = torch.linalg.svd(lin.weight.double().T, full_matrices=False)[2][:16].T  # [64, 16]
        with torch.no_grad():
            lin.weight.copy_((v @ v.T @ lin.weight.double()).float())
    expected = run_model(prepare(model, lm.tokenizer, "e"), scorer.texts[0].ids, record=False).hidden
    torch.testing.assert_close(converted, expected, atol=2e-5, rtol=1e-4)
    assert (converted - run_model(lm, scorer.texts[0].ids, record=False).hidden).abs().max() > 1e-4  # ~4e-4
    curve = collab.rank_curve(lm, TEXT, None, "encoder", 1, (0.25, 1.0))
    assert curve.ranks_q == (16, 64) and curve.change[0] > 10 * abs(curve.change[1]) and abs(curve.change[1]) <= 1e-6
    assert curve.distance[1] <= 1e-6 < curve.distance[0]
    with pytest.raises(va.MhaVizError, match="plain query and key"):
        collab.rank_plan(_tiny("llama"), Scorer(_tiny("llama"), [TEXT]), 0, 0.5)
