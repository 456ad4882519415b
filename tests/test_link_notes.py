"""Nothing a link or an upload asks for is dropped without a note (issue 21 §2.8): an unknown imp_texts, a text_b
over the Two sentences box's limit, a link Streamlit refuses whole (over 1,000 parameters), an empty upload, and
an upload whose head count differs from the sidebar's boxes (AppTest, the bundled MiniLM)."""

from __future__ import annotations

from apptest_helpers import assert_clean, heatmaps, ignored_note, run_app, specs, upload

from mha_viz.config import MAX_SECOND_TEXT_CHARS
from mha_viz.ui.links import LINK_REFUSED, watch_refused_links


def test_unknown_imp_texts_is_reported(minilm) -> None:
    at = run_app(view="Head importance", imp_texts="everything")
    assert_clean(at)
    assert (
        "imp_texts=everything (the choices are this text, this text and the example sentences; showing this text)"
        in (ignored_note(at))
    )
    assert at.radio(key="imp_texts").value == "this text"
    at = run_app(view="Head importance", imp_texts="this text and the example sentences")
    assert ignored_note(at) == "" and at.radio(key="imp_texts").value == "set"


def test_text_b_over_the_two_sentences_limit_is_reported(minilm) -> None:
    long = "word " * (MAX_SECOND_TEXT_CHARS // 5 + 10)  # over 5,000 characters, under the main text's 12,000
    at = run_app(view="Two sentences", text_b=long)
    assert not at.exception, [e.value for e in at.exception]
    note = ignored_note(at)
    assert f"longer than {MAX_SECOND_TEXT_CHARS} characters; using its first {MAX_SECOND_TEXT_CHARS}" in note
    assert note.startswith("Ignored from the link: text_b=word")


def test_a_link_streamlit_refuses_whole_is_reported(minilm) -> None:
    params = {f"p{i}": "1" for i in range(2000)}
    at = run_app(**params, view="Heads")
    assert_clean(at)
    note = ignored_note(at)
    assert "the whole link (2,001 parameters): Streamlit reads none of a link with more than 1,000 parameters" in note
    assert "the view included" in note
    assert LINK_REFUSED not in at.query_params
    at.run()  # said once
    assert ignored_note(at) == ""


def test_the_server_side_check_is_wrapped_too() -> None:
    """The real server checks a rerun's link in AppSession before the run parses it: both places are wrapped."""
    from streamlit.runtime import app_session
    from streamlit.runtime.state import query_params

    watch_refused_links()
    long = "&".join(f"p{i}=1" for i in range(1500))
    assert app_session.sanitize_query_string(long) == f"{LINK_REFUSED}=1500"
    assert query_params.sanitize_query_string(long) == f"{LINK_REFUSED}=1500"
    assert app_session.sanitize_query_string("view=Heads&layer=2") == "view=Heads&layer=2"
    assert app_session.sanitize_query_string("") == ""


def test_an_empty_upload_is_a_sidebar_error(minilm) -> None:
    at = run_app(src="Own weights", d_model="64", own_heads="4", view="Heads")
    upload(at, b"")
    assert not at.exception, [e.value for e in at.exception]
    side = [e.value.replace("\\", "") for e in at.sidebar.error]
    assert len(side) == 1 and "That file is empty (0 bytes), so nothing was loaded" in side[0], side
    assert len(heatmaps(specs(at)[0])) == 4  # the boxes' weights, as the message says


def test_an_upload_sets_the_heads_the_sidebar_shows(minilm) -> None:
    from mha_viz.own import init_weights, save_weights

    at = run_app(src="Own weights", view="Heads")  # the boxes say 8 heads × 512
    upload(at, save_weights(init_weights(512, 1, seed=3)))
    assert_clean(at)
    info = [i.value for i in at.sidebar.info]
    assert any(
        "Your file: 1 head × d_model 512 (d_k 512)" in i and "do not apply while it is loaded" in i for i in info
    )
    for key in ("d_model", "own_heads"):
        assert at.sidebar.number_input(key=key).proto.disabled
    assert at.sidebar.selectbox(key="init").proto.disabled
    assert len(heatmaps(specs(at)[0])) == 1  # the file's one head is what is drawn
    upload(at, None)  # the boxes apply again
    assert_clean(at)
    assert not at.sidebar.number_input(key="own_heads").proto.disabled
    assert len(heatmaps(specs(at)[0])) == 8
