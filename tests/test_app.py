"""The dashboard with the real bundled model, through Streamlit's AppTest (no browser)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from apptest_helpers import array, assert_clean, heatmaps, ignored_note, new_app, panels, run_app, specs, step, upload

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.pipeline.road import encode, traces
from mha_viz.ui.sidebar import DEFAULT_DEVICE, SOURCES, VIEWS, default_controls


def test_default_page_heads_view(minilm) -> None:
    at = run_app(view="Heads", layer="0")
    assert_clean(at)
    assert at.sidebar.text_area(key="text").value == SENTENCE
    grid = specs(at)[0]
    maps = heatmaps(grid)
    assert len(maps) == 12
    labels = list(encode(minilm, SENTENCE)[0].labels)
    assert list(maps[0]["x"]) == labels and list(maps[0]["y"]) == labels
    assert "animal" in labels and len(set(labels)) == len(labels)
    _, _, (trace,) = traces(Config(), SENTENCE, layers=[0], lm=minilm)
    np.testing.assert_allclose(array(maps[5]["z"]), trace.pattern[5].numpy(), atol=1e-6)
    assert at.selectbox(key="focus").value == "it"
    titles = [a["text"] for a in grid["layout"]["annotations"]]  # the grid's titles carry the heads' roles
    assert titles[2] == "head 2 · previous token"  # MiniLM layer 0 head 2 attends to the previous token
    assert all(t.startswith("head ") and " · " in t for t in titles)
    d, sb = default_controls(), at.sidebar  # what the stored first page is recorded with (serve/record.py)
    assert (sb.radio(key="src").value, sb.selectbox(key="device").value, sb.radio(key="img").value) == (
        d.kind, DEFAULT_DEVICE, d.image_format)  # fmt: skip
    toggles = {k: sb.toggle(key=k).value for k in ("causal", "scaled", "hide_special", "contrib")}
    assert toggles == {"causal": d.causal, "scaled": d.scaled, "hide_special": d.hide_special,
                       "contrib": d.measure == "contribution"}  # fmt: skip
    assert d.config.scaled == d.scaled and d.config.causal == d.causal and d.text == SENTENCE


def test_controls_change_the_figures(minilm) -> None:
    at = run_app(view="Heads")
    first = array(heatmaps(specs(at)[0])[0]["z"])
    at.selectbox(key="layer").set_value(4).run()
    assert_clean(at)
    assert not np.allclose(array(heatmaps(specs(at)[0])[0]["z"]), first)
    at.sidebar.toggle(key="causal").set_value(True).run()
    z = array(heatmaps(specs(at)[0])[3]["z"])
    assert np.all(np.triu(z, 1) == 0)
    at.sidebar.text_area(key="text").set_value("humpty dumpty sat on").run()
    assert "dump" in heatmaps(specs(at)[0])[0]["x"]


@pytest.mark.parametrize(
    ("view", "n_charts"),
    [  # the other views' pages are opened (and their charts counted) by the tests below, each once
        ("Compare heads", 5),
        ("Step by step", 1),  # 11 matrices: five pairs and one alone, stacked in one chart (figures.stack)
    ],
)
def test_every_view_renders(view: str, n_charts: int, minilm) -> None:
    at = run_app(view=view)
    assert_clean(at)
    assert len(specs(at)) == n_charts


def test_head_count_view(minilm) -> None:
    at = run_app(view="Head count")
    assert_clean(at)
    assert len(specs(at)) == 2
    assert len(heatmaps(specs(at)[0])) == 12
    assert 5 not in at.selectbox(key="hc").options and 64 in [int(o) for o in at.selectbox(key="hc").options]
    at.selectbox(key="hc").set_value(4).run()
    assert_clean(at)
    maps = heatmaps(specs(at)[0])
    assert len(maps) == 4
    z = np.stack([array(m["z"]) for m in maps])
    np.testing.assert_allclose(z.sum(-1), 1.0, atol=1e-5)
    summary = specs(at)[1]
    assert [str(x) for x in summary["data"][0]["x"]][:6] == ["1", "2", "3", "4", "6", "8"]
    assert any("What-if" in w.value for w in at.warning)


def test_wo_view_identity_check_and_ablation(minilm) -> None:
    at = run_app(view="W^O")
    assert_clean(at)
    assert len(specs(at)) == 2  # W^O and the W^O in use as one chart; the change and the contributions as one
    (said,) = [c.value for c in at.caption if "Largest |difference|" in c.value]  # the check's result, no chart
    assert float(said.split("Largest |difference|: ")[1].split(" ")[0]) < 1e-6
    at = new_app(view="W^O")
    at.session_state["wo_identity_open"] = True  # the check's matrices are drawn only while its expander is open
    at.run()
    assert_clean(at)
    assert len(specs(at)) == 3
    check = specs(at)[-1]  # the one-head check, drawn (tests/test_lesson.py holds its matrices to torch)
    assert "single-head" in check["layout"]["title"]["text"] and array(heatmaps(check)[2]["z"]).max() < 1e-6
    rel = array(specs(at)[1]["data"][0]["y"])
    assert rel.shape == (15,) and np.all(rel > 0)  # identity W^O differs from the learned one
    at.radio(key="wo_mode").set_value("ablate").run()
    at.multiselect(key="ablate").set_value([0, 1, 2]).run()
    assert_clean(at)
    norms = array(heatmaps(specs(at)[1])[0]["z"])  # [heads, tokens]: the map under the change's bars
    assert np.all(norms[:3] == 0) and np.all(norms[3:] > 0)


def test_step_by_step_shapes_and_scaling(minilm) -> None:
    at = run_app(view="Step by step", step_head="head 0")  # (the opened head by default: the found one, 11)
    assert "[15 × 384]" in step(at, "1. X")[0] and "[15 × 32]" in step(at, "2a. Q_0")[0]
    title, weights = step(at, "6. softmax")
    assert "[15 × 15]" in title
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    scaled = step(at, "4. ")[1]
    at.sidebar.toggle(key="scaled").set_value(False).run()
    title, unscaled = step(at, "4. ")
    assert "scaling off" in title
    np.testing.assert_allclose(unscaled * 32**-0.5, scaled, rtol=1e-4, atol=1e-4)
    assert step(at, "6. softmax")[1].max(-1).mean() > weights.max(-1).mean()  # saturation


def test_url_restores_a_view(minilm) -> None:
    at = run_app(view="Head count", hc="6", layer="3", hide_special="true")
    assert_clean(at)
    assert at.selectbox(key="layer").value == 3 and at.selectbox(key="hc").value == 6
    maps = heatmaps(specs(at)[0])
    assert len(maps) == 6 and "[CLS]" not in maps[0]["x"]


def test_overview_shows_every_layer_and_head(minilm) -> None:
    at = run_app(view="Overview")
    assert_clean(at)
    (spec,) = specs(at)
    z = array(heatmaps(spec)[0]["z"])
    assert z.shape == (6 * 17 - 2, 12 * 17 - 2)  # 15-token tiles with 2-cell gaps
    tiles = array(spec["data"][1]["customdata"])  # (layer, head) per clickable tile
    assert tiles.shape == (72, 2) and tiles[-1].tolist() == [5, 11]


def test_bad_model_id_shows_error_and_app_keeps_running(minilm) -> None:
    at = run_app(src="Hugging Face", model_id="no-such-org/no-such-model", view="Heads")
    assert not at.exception
    assert at.error and "could not load model" in at.error[0].value
    at.sidebar.radio(key="src").set_value("bundled").run()
    assert_clean(at)
    assert len(heatmaps(specs(at)[0])) == 12


def test_empty_text_is_a_clear_error(minilm) -> None:
    at = run_app()
    at.sidebar.text_area(key="text").set_value("   ").run()
    assert not at.exception and "empty" in at.error[0].value
    at.sidebar.text_area(key="text").set_value(SENTENCE).run()
    assert_clean(at)


def test_own_weights_and_seed_example(minilm) -> None:
    at = run_app(src="Own weights", own_heads="4", d_model="64", view="Heads")
    assert_clean(at)
    assert len(heatmaps(specs(at)[0])) == 4
    at.sidebar.button[0].click().run()  # "Seed 000 worked example"
    assert_clean(at)
    assert at.sidebar.number_input(key="d_model").value == 512
    assert at.sidebar.text_area(key="text").value == "humpty dumpty sat on"
    # word tokens (humpty dumpty sat on): 4 tokens, as seed 000 has them; d_k = 512 / 8
    assert "[4 × 512]" in step(at, "1. X")[0] and "[4 × 64]" in step(at, "2a. Q_0")[0]
    at.sidebar.number_input(key="own_heads").set_value(7).run()
    assert not at.exception and "not divisible" in at.error[0].value


def test_roles_table_and_where_ranking(minilm) -> None:
    at = run_app(view="Head roles")
    assert_clean(at)
    table = at.dataframe[0].value
    assert len(table) == 72 and list(table.columns)[:3] == ["layer", "head", "label"]
    (role_map,) = specs(at)  # layer × head map coloured by label, one clickable marker per head
    assert array(heatmaps(role_map)[0]["z"]).shape == (6, 12)
    cells = [t for t in role_map["data"] if t["type"] == "scatter"]
    assert sorted(t["meta"] for t in cells) == sorted(set(table["label"]))
    found = np.concatenate([array(t["customdata"]).reshape(-1, 2 + 10)[:, :2] for t in cells])
    assert sorted(map(tuple, found.astype(int).tolist())) == [(la, h) for la in range(6) for h in range(12)]
    tick = role_map["data"][0]["colorbar"]["ticktext"]
    assert any(t.startswith("previous token (") for t in tick)
    at = run_app(view="Where does it look?")
    assert_clean(at)
    assert len(specs(at)) == 2
    z = array(heatmaps(specs(at)[0])[0]["z"])  # [layers, heads]: "it" → "animal"
    _, _, found = traces(Config(), SENTENCE, lm=minilm)
    q, k = found[0].tokens.index("it"), found[0].tokens.index("animal")
    expected = np.stack([t.pattern[:, q, k].numpy() for t in found])
    np.testing.assert_allclose(z, expected, atol=1e-6)
    best = np.unravel_index(int(np.argmax(expected)), expected.shape)
    assert at.pills(key="where_top").options[0].startswith(f"1. layer {best[0]}, head {best[1]}:")
    assert at.pills(key="where_top").value == 0  # the top head is the one shown, its pill lit
    at.button(key="where_open").click().run()  # jump to the shown head
    assert at.selectbox(key="layer").value == best[0] and at.selectbox(key="head").value == best[1]


def test_two_sentences_and_rollout_and_ablation(minilm) -> None:
    at = new_app(view="Two sentences")
    at.session_state["two_change_open"] = True  # the change map is drawn only while its expander is open
    at.run()
    assert_clean(at)
    assert len(specs(at)) == 4  # the moved map, the bars (weight went; shared keys), the patterns, the change
    change = array(heatmaps(specs(at)[-1])[0]["z"])  # the total variation map (last)
    assert change.shape == (6, 12) and np.all((change >= 0) & (change <= 1)) and change.max() > 0.3
    at = run_app(view="Rollout")
    assert_clean(at)
    (spec,) = specs(at)
    roll = array(heatmaps(spec)[0]["z"])
    np.testing.assert_allclose(roll.sum(-1), 1.0, atol=1e-5)
    at = run_app(view="Ablation")
    assert_clean(at)
    assert len(specs(at)) == 1
    cosine = float(at.metric[0].value)
    at.multiselect(key="abl_heads").set_value(list(range(12))).run()
    assert float(at.metric[0].value) < cosine < 1.0


def test_gqa_step_by_step_uses_the_kv_group(llama_dir: str) -> None:
    """9 query heads / 3 K/V heads bugs: every title and export uses K/V group i // group, never head i."""
    at = run_app(src="Hugging Face", model_id=llama_dir, view="Step by step")
    for head in (0, 1, 3):
        at.selectbox(key="step_head").set_value(head).run()
        assert_clean(at)
        titles = [title for title, _ in panels(at)]
        g = head // 2  # 4 query heads share 2 K/V heads: group of 2
        assert any(re.match(rf"2[a-e]\. K_{g} ", t) for t in titles)
        assert any(re.match(rf"2[a-e]\. V_{g} ", t) for t in titles)
        assert any(t.startswith(f"7a. head_{head} = weights · V_{g}") for t in titles), titles
        assert not any(f"K_{head} " in t for t in titles if head != g)
        assert [b for b in at.get("download_button") if ".npz" in b.proto.label], "the .npz download must stay"


def test_encoder_decoder_parts_in_the_app(t5_dir: str) -> None:
    kinds = ["encoder self-attention", "decoder self-attention", "cross-attention"]
    t5 = {"src": "Hugging Face", "model_id": t5_dir, "target": "The animal was tired", "part": "cross-attention"}
    at = run_app(view="Heads", **t5)
    assert_clean(at)
    assert at.sidebar.radio(key="part").options == kinds
    assert at.sidebar.radio(key="part").value == "cross"
    grid = heatmaps(specs(at)[0])[0]
    assert len(grid["y"]) != len(grid["x"])  # decoder tokens × source tokens
    at.sidebar.radio(key="part").set_value("decoder").run()
    assert_clean(at)
    z = array(heatmaps(specs(at)[0])[0]["z"])
    assert np.all(np.triu(z, 1) == 0)  # decoder self-attention is causal
    for view in ("Overview", "Step by step", "Where does it look?", "Head count", "W^O", "Ablation"):
        at = run_app(view=view, **t5)
        assert_clean(at)


# --- link values that cannot be used, hosted-mode wording, failures around own weights -------------------------


def test_out_of_range_layer_in_the_link_is_reported(minilm) -> None:
    at = run_app(layer="999", view="Heads")
    assert_clean(at)
    from mha_viz import show

    layer = show.found(SENTENCE, "it", "animal")[0]  # the default layer: the found "it" → "animal" head's
    assert f"Ignored from the link: layer=999 (this model has layers 0-5; showing layer {layer})" in ignored_note(at)
    assert at.selectbox(key="layer").value == layer and len(heatmaps(specs(at)[0])) == 12
    at.run()  # said once: the value is gone from the link
    assert ignored_note(at) == "" and "layer" not in at.query_params


def test_unknown_view_in_the_link_is_reported(minilm) -> None:
    at = run_app(view="nonexistent")
    assert_clean(at)
    note = ignored_note(at)
    listed = f"{VIEWS[0]}, {VIEWS[1]}, {VIEWS[2]}, …, {VIEWS[-1]}"
    assert "view=nonexistent" in note and listed in note and "showing Lesson" in note
    assert at.expander[0].label.startswith("Step 1.")  # the Lesson, the first tab, is what is shown


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"view": "Heads", "head": "99"}, ["head=99 (", "showing head 0"]),
        ({"view": "Heads", "focus": "notatoken"}, ["focus=notatoken (this text's tokens are [CLS]", "showing it"]),
        ({"src": "weird"}, ["src=weird (the models are", "Hugging Face, Own weights"]),
        ({"part": "nonsense", "layer": "-1"}, ["part=nonsense (this model has only encoder", "layer=-1 ("]),
        ({"src": "Own weights", "own_heads": "0", "d_model": "1e3", "seed": str(2**70)},
         ["own_heads=0 (must be a whole number from 1 to 256; showing 8)", "d_model=1e3 (", "seed=118059"]),
        ({"causal": "yes", "device": "tpu", "img": "gif"},
         ["causal=yes (must be true or false", "device=tpu (", "img=gif"]),
    ],
)  # fmt: skip
def test_unusable_link_values_are_named(params: dict, expected: list[str], minilm) -> None:
    at = run_app(**params)
    assert_clean(at)
    note = ignored_note(at)
    assert all(part in note for part in expected), note
    assert specs(at), "the page still shows its figures"


def test_valid_link_values_give_no_note(minilm) -> None:
    at = run_app(view="Heads", head="head 3", focus="animal", layer="2", causal="true", src=SOURCES["bundled"])
    assert_clean(at)
    assert ignored_note(at) == ""
    assert at.selectbox(key="head").value == 3 and at.selectbox(key="focus").value == "animal"
    assert at.selectbox(key="layer").value == 2


def test_unknown_part_of_an_encoder_decoder_model(t5_dir: str) -> None:
    at = run_app(src="Hugging Face", model_id=t5_dir, target="The animal was tired", part="nonsense")
    assert_clean(at)
    note = ignored_note(at)
    assert "part=nonsense (this model has encoder self-attention, decoder self-attention, cross-attention" in note
    assert at.sidebar.radio(key="part").value == "encoder"


@pytest.mark.parametrize("env", [{"MHA_VIZ_HOSTED": "1"}, {"MHA_VIZ_ALLOWED_MODELS": "gpt2,distilgpt2"}])
def test_hosted_mode_model_box_lists_what_is_allowed(env: dict, monkeypatch) -> None:
    from mha_viz.models.sources import allowed_models

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    allowed = allowed_models()
    assert allowed
    at = run_app(src="Hugging Face")
    assert_clean(at)
    box = at.sidebar.text_input(key="model_id")
    shown = f"{box.label} {box.placeholder} {box.help} {at.info[0].value}"
    assert "folder" not in shown.lower() and "/path" not in shown
    assert all(m in box.help for m in allowed) and box.placeholder.startswith(f"e.g. {allowed[0]}")
    assert all(m.replace("-", "\\-") in at.info[0].value for m in allowed)


def test_local_mode_model_box_mentions_folders(monkeypatch) -> None:
    monkeypatch.delenv("MHA_VIZ_HOSTED", raising=False)
    monkeypatch.delenv("MHA_VIZ_ALLOWED_MODELS", raising=False)
    at = run_app(src="Hugging Face")
    box = at.sidebar.text_input(key="model_id")
    assert "folder" in box.label and "/path/to/folder" in box.placeholder


def test_hostile_uploads_are_messages_and_the_page_recovers(minilm) -> None:
    import torch
    from safetensors.torch import save

    from mha_viz.own import init_weights

    at = run_app(src="Own weights", d_model="64", own_heads="4", view="Heads")
    assert_clean(at)
    nested = b"[" * 30_000 + b"]" * 30_000
    huge = dict(init_weights(64, 4).tensors(), W_Q=torch.full((4, 64, 16), 1e30))
    for data, message in (
        (len(nested).to_bytes(8, "little") + nested, "nested too deeply"),
        (save(huge), "tensor W_Q has values up to 1e+30; the limit is 10000"),
        (b"\x80\x04garbage", "not a valid safetensors file"),
    ):
        upload(at, data)
        assert not at.exception, [e.value for e in at.exception]
        side = [e.value.replace("\\", "") for e in at.sidebar.error]
        main = [e.value.replace("\\", "") for e in at.main.error]
        assert not side, side  # said once, in the page: the sidebar does not repeat it
        assert sum(message in e for e in main) == 1, main
        assert not specs(at)  # nothing drawn from a file that was refused
    upload(at, None)
    assert_clean(at)
    assert len(heatmaps(specs(at)[0])) == 4


def test_weights_download_failure_is_a_sidebar_message(monkeypatch, minilm) -> None:
    import importlib

    own_controls = importlib.import_module("mha_viz.ui.own_controls")

    def broken(_config):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(own_controls, "get_weights_file", broken)
    at = run_app(src="Own weights", d_model="64", own_heads="4", view="Heads")
    assert not at.exception, [e.value for e in at.exception]
    (message,) = [e.value.replace("\\", "") for e in at.sidebar.error]
    assert "Could not build the weights download (RuntimeError)" in message and "reload the page" in message
    assert not at.main.error and len(heatmaps(specs(at)[0])) == 4  # the page itself keeps working
    assert not at.get("download_button") or all(b.proto.label != "Download these weights (.safetensors)"
                                                 for b in at.get("download_button"))  # fmt: skip


def test_large_own_weights_offer_no_oversized_download(minilm) -> None:
    """Weights over the upload limit (d_model 2048: 64 MB) are not rebuilt as a download on every rerun."""
    at = run_app(src="Own weights", d_model="2048", own_heads="8", text="humpty dumpty sat on", view="Step by step")
    assert_clean(at)
    assert not [b for b in at.get("download_button") if "weights" in b.proto.label]
    assert any("the download is offered up to 16 MB" in c.value for c in at.sidebar.caption)
    at = run_app(src="Own weights", d_model="64", own_heads="4")
    assert [b for b in at.get("download_button") if "weights" in b.proto.label]


def test_bundled_decoder_reads_as_a_decoder() -> None:
    """SmolLM2, bundled: causal mask on and fixed, first-token hiding instead of [CLS]/[SEP], no seed-000 example,
    heads labelled with their shared K/V head."""
    at = run_app(src="SmolLM2-135M (bundled)", view="Heads")
    assert_clean(at)
    fixed = at.sidebar.toggle(key="causal_fixed")
    assert fixed.value is True and fixed.proto.disabled
    assert at.sidebar.toggle(key="hide_special").label.startswith("Hide the first token")
    assert not [b for b in at.sidebar.button if "Seed 000" in b.label]
    spec = specs(at)[0]
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert titles[0].startswith("head 0 · K/V 0") and titles[3].startswith("head 3 · K/V 1")
    z = array(heatmaps(spec)[0]["z"])
    assert np.all(np.triu(z, 1) == 0)  # causal
    n = z.shape[0]
    at.sidebar.toggle(key="hide_special").set_value(True).run()
    assert_clean(at)
    z2 = array(heatmaps(specs(at)[0])[0]["z"])
    assert z2.shape == (n - 1, n - 1)  # the first token hidden
    np.testing.assert_allclose(z2.sum(-1), 1.0, atol=1e-5)  # rows renormalised


def test_two_sentences_on_a_decoder_compares_what_can_change() -> None:
    at = new_app(src="SmolLM2-135M (bundled)", view="Two sentences")
    at.session_state["two_change_open"] = True  # the change map is drawn only while its expander is open
    at.run()
    assert_clean(at)
    assert any("Under a causal mask" in i.value for i in at.info)
    focus = at.selectbox(key="two_focus")
    assert focus.value == "the last token (each sentence's own)" and "it" not in focus.options
    change = array(heatmaps(specs(at)[-1])[0]["z"])  # the total variation map (last)
    assert change.shape == (30, 9) and change.max() > 0.05  # "tired" vs "wide": the last token's rows differ


def test_step_by_step_shows_the_rotary_step() -> None:
    at = run_app(src="SmolLM2-135M (bundled)", view="Step by step", step_head="head 0")
    assert_clean(at)
    titles = [title for title, _ in panels(at)]
    # a short text's key rows are its query rows: every matrix two to a row (the last one alone), in one chart
    assert len(titles) == 13 and len(specs(at)) == 1, titles
    assert any(t.startswith("2a. Q_0 = X · W_Q[0], before rotation") for t in titles), titles
    assert any(t.startswith("2b. K_0 = X · W_K[0], before rotation") for t in titles)
    assert any(t.startswith("2c. Q_0 rotated (rotary positions)") for t in titles)


def test_roles_map_click_opens_the_head(monkeypatch) -> None:
    """A click on the role map's cell (customdata layer, head, scores...) opens that head in the Heads view."""
    from types import SimpleNamespace

    import mha_viz.ui.choices as choices
    import mha_viz.ui.opened as opened
    import mha_viz.ui.views.roles as roles

    state = {
        "roles_map": SimpleNamespace(selection=SimpleNamespace(points=[{"customdata": {"0": 4, "1": 7, "2": 0.5}}]))
    }
    link: dict[str, str] = {}
    fake = SimpleNamespace(session_state=state, query_params=link)
    monkeypatch.setattr(choices, "st", fake)
    monkeypatch.setattr(opened, "st", fake)
    monkeypatch.setattr(roles, "st", fake)
    roles._on_cell_click()
    assert (state["layer"], state["head"], state["view"]) == (4, 7, "Heads")
    assert link == {"layer": "4", "head": "head 7", "view": "Heads"}  # the link opens it too


def test_induction_tab_in_the_app() -> None:
    at = run_app(view="Induction")
    assert_clean(at)
    assert any("decoder" in i.value for i in at.info)  # MiniLM is an encoder
    at = run_app(src="SmolLM2-135M (bundled)", view="Induction", ind_length="20")
    assert_clean(at)
    z = array(heatmaps(specs(at)[0])[0]["z"])
    assert z.shape == (30, 9) and z.max() > 0.5  # SmolLM2 has induction heads


def test_next_token_tab_in_the_app() -> None:
    at = run_app(view="Next token")
    assert_clean(at)
    assert any("decoder" in i.value.lower() for i in at.info)  # MiniLM has no next token to show
    at = run_app(src="SmolLM2-135M (bundled)", view="Next token")
    assert_clean(at)
    assert len(specs(at)) >= 2  # the logit lens and the attribution map
