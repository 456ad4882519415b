"""State that survives a share: the controls bound to the URL take their values from a link, reject bad ones
with the "Ignored from the link" notice, and a click that opens a head puts it into the link (AppTest, the
bundled MiniLM)."""

from __future__ import annotations

import json
import re

import numpy as np
from apptest_helpers import array, assert_clean, heatmaps, ignored_note, run_app
from references import found_head

from conftest import SENTENCE
from mha_viz.analysis.patterns import rollout
from mha_viz.config import Config
from mha_viz.pipeline.road import traces


def _qp(at, key: str) -> list[str]:
    """The link's values for ``key`` (AppTest keeps one value as a string, several as a list)."""
    value = at.query_params.get(key, [])
    return [value] if isinstance(value, str) else list(value)


def test_wo_seed_and_scale_come_from_the_link(minilm) -> None:
    at = run_app(view="W^O", wo_mode="random orthogonal", wo_seed="1234")
    assert_clean(at)
    assert at.number_input(key="wo_seed").value == 1234
    other = run_app(view="W^O", wo_mode="random orthogonal", wo_seed="99")
    assert other.number_input(key="wo_seed").value == 99
    at = run_app(view="W^O", wo_mode="scale a head", scale_head="head 7", scale_factor="0.5")
    assert_clean(at)
    assert at.selectbox(key="scale_head").value == 7
    assert at.slider(key="scale_factor").value == 0.5


def test_bad_wo_values_in_the_link_are_reported(minilm) -> None:
    at = run_app(view="W^O", wo_mode="random orthogonal", wo_seed="-5")
    assert_clean(at)
    assert "wo_seed=-5 (must be a whole number from 0 to 4294967295; showing 0)" in ignored_note(at)
    assert at.number_input(key="wo_seed").value == 0
    at = run_app(view="W^O", wo_mode="scale a head", scale_head="head 12", scale_factor="nan")
    assert_clean(at)
    note = ignored_note(at)
    assert "scale_head=head 12 (the choices are head 0" in note and "showing head 0" in note
    assert "scale_factor=nan (must be a number from 0 to 3; showing 2)" in note
    assert at.selectbox(key="scale_head").value == 0 and at.slider(key="scale_factor").value == 2.0


def test_ablate_multiselect_reads_repeated_params(minilm) -> None:
    at = run_app(view="W^O", wo_mode="ablate heads", ablate=["head 2", "head 5"])
    assert_clean(at)
    assert at.multiselect(key="ablate").value == [2, 5]
    assert ignored_note(at) == ""
    at = run_app(view="W^O", wo_mode="ablate heads", ablate=["head 3", "head 40", "bogus"])
    assert_clean(at)
    note = ignored_note(at)
    assert "ablate=head 40, bogus (the choices are head 0" in note and "showing head 3" in note
    assert at.multiselect(key="ablate").value == [3]
    at = run_app(view="W^O", wo_mode="ablate heads", ablate=["head 99"])  # nothing usable: the default
    assert_clean(at)
    assert "showing head 0" in ignored_note(at)
    assert at.multiselect(key="ablate").value == [0]


def test_ablation_tab_layers_and_heads_from_the_link(minilm) -> None:
    at = run_app(view="Ablation", abl_layers=["1", "4"], abl_heads=["0", "11"])
    assert_clean(at)
    assert at.multiselect(key="abl_layers").value == [1, 4]
    assert at.multiselect(key="abl_heads").value == [0, 11]
    at = run_app(view="Ablation", abl_layers=["2", "6"], abl_heads=["x"])
    assert_clean(at)
    note = ignored_note(at)
    assert "abl_layers=6 (the choices are 0, 1, 2, 3, 4, 5; showing 2)" in note
    assert "abl_heads=x (" in note
    assert at.multiselect(key="abl_layers").value == [2]
    assert at.multiselect(key="abl_heads").value == [found_head("")[1]]  # the opened head (the found one)


def test_rollout_layer_from_the_link_draws_that_rollout(minilm) -> None:
    at = run_app(view="Rollout", rollout_layer="2")
    assert_clean(at)
    assert at.slider(key="rollout_layer").value == 2
    spec = next(s for s in (json.loads(c.proto.spec) for c in at.get("plotly_chart")) if "Rollout" in json.dumps(s))
    assert "Rollout through layers 0–2" in json.dumps(spec["layout"]["title"], ensure_ascii=False)
    z = array(heatmaps(spec)[0]["z"])
    _, _, found = traces(Config(), SENTENCE, lm=minilm)
    want = rollout(np.stack([t.pattern.numpy() for t in found]))[2]  # [L, H, n, n] -> layers 0-2
    np.testing.assert_allclose(z, want, atol=1e-5)
    at = run_app(view="Rollout", rollout_layer="6")
    assert_clean(at)
    assert "rollout_layer=6 (must be a whole number from 0 to 5; showing 5)" in ignored_note(at)
    assert at.slider(key="rollout_layer").value == 5


def test_two_sentences_replace_words_from_the_link(minilm) -> None:
    at = run_app(view="Two sentences", two_old="street", two_new="road")
    assert_clean(at)
    assert at.text_input(key="two_old").value == "street"
    assert at.text_input(key="two_new").value == "road"
    at = run_app(view="Two sentences", two_old="x" * 150)
    assert "two_old=" in ignored_note(at) and "longer than 100 characters" in ignored_note(at)


def test_opening_a_head_from_another_tab_writes_it_into_the_link(minilm) -> None:
    """Where does it look? "Open": the Heads tab opens on that layer and head, and the link says so (before
    the fix the head was opened but head= was missing from the link, so a shared link opened another head)."""
    at = run_app(view="Where does it look?")
    assert_clean(at)
    assert "head" not in at.query_params
    second = at.pills(key="where_top").options[1]  # "2. layer L, head H: w", not the found head
    la, he = (int(x) for x in re.findall(r"\d+", second.split(":")[0])[1:])
    at.pills(key="where_top").set_value(1).run()  # shown below
    assert (at.selectbox(key="where_layer").value, at.selectbox(key="where_head").value) == (la, he)
    assert at.pills(key="where_top").value == 1  # its pill lit
    at.button(key="where_open").click().run()  # and opened in the Heads tab
    assert_clean(at)
    assert at.selectbox(key="layer").value == la and at.selectbox(key="head").value == he
    assert _qp(at, "head") == [f"head {he}"]
    assert _qp(at, "view") == ["Heads"]
    # the link opens the same head in a new session
    params = {k: _qp(at, k)[0] for k in at.query_params}
    again = run_app(**params)
    assert_clean(again)
    assert again.selectbox(key="layer").value == la and again.selectbox(key="head").value == he


def test_where_show_then_a_new_query_falls_back_without_an_error(minilm) -> None:
    """Show a head (its layer and head go into the link), then pick another query token: the shown head is the
    new pair's top head again (forget() used to delete the bound parameters directly, and Streamlit raised)."""
    at = run_app(view="Where does it look?")
    at.pills(key="where_top").set_value(3).run()
    fourth = at.pills(key="where_top").options[3]
    la, he = (int(x) for x in re.findall(r"\d+", fourth.split(":")[0])[1:])
    assert (at.selectbox(key="where_layer").value, at.selectbox(key="where_head").value) == (la, he)
    assert (_qp(at, "where_layer"), _qp(at, "where_head")) == ([str(la)], [str(he)])
    at.selectbox(key="where_q").set_value("the (1)").run()
    assert_clean(at)
    first = at.pills(key="where_top").options[0]
    top = tuple(int(x) for x in re.findall(r"\d+", first.split(":")[0])[1:])
    assert (at.selectbox(key="where_layer").value, at.selectbox(key="where_head").value) == top
    assert at.pills(key="where_top").value == 0


def test_circuits_head_from_the_link(minilm) -> None:
    """circ_head is written as "head 3" (its format_func); it used to be checked against "3" and dropped."""
    at = run_app(view="Circuits", circ_head="head 3")
    assert_clean(at)
    assert ignored_note(at) == "" and at.selectbox(key="circ_head").value == 3
    at = run_app(view="Circuits", circ_head="3")
    assert "circ_head=3 (the choices are head 0" in ignored_note(at)
    assert at.selectbox(key="circ_head").value == found_head("")[1]  # the opened (found) head, as every view shows


def test_next_token_position_and_target_from_the_link() -> None:
    smol = {"src": "SmolLM2-135M (bundled)", "view": "Next token"}
    at = run_app(**smol)
    assert_clean(at)
    labels = at.selectbox(key="nt_pos").options
    names = at.selectbox(key="dla_token").options  # "token (p = 0.123)": how the link names them
    at = run_app(**smol, nt_pos=labels[2])
    assert_clean(at)
    assert at.selectbox(key="nt_pos").value == labels[2] and ignored_note(at) == ""
    at = run_app(**smol, dla_token=names[1])
    assert_clean(at)
    assert at.selectbox(key="dla_token").index == 1 and ignored_note(at) == ""
    at = run_app(**smol, nt_pos="no such token", dla_token="1")
    assert_clean(at)
    note = ignored_note(at)
    assert "nt_pos=no such token (this text's tokens are" in note and "dla_token=1 (the choices are" in note
    assert at.selectbox(key="nt_pos").value == labels[-1] and at.selectbox(key="dla_token").index == 0
