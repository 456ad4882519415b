"""The session's minilm/smollm2 are never the dashboard's dropped models (CI: memo.dropped_alive() was 2 where a test
expected 1). ``loaded_once`` answers the app's load with the session fixture, so the app's model store held pytest's
own MiniLM; a later fourth model evicted it, pytest still held it, and the worker counted it as a dropped model still
alive from then on (every later page collecting the whole heap). conftest's autouse fixture takes the session models
out of the store after each test (let_go_of_session_models)."""

from __future__ import annotations

import pytest

from conftest import SESSION_MODELS, let_go_of_session_models

pytestmark = pytest.mark.usefixtures("loaded_once")


class _Other:
    """Stands for another model the app loads (weak references to it, as to a model, work)."""


def _held(store) -> list:
    """The session models the app's store holds (by identity; read without touching its order)."""
    with store._lock:
        return [lm for lm in store._models.values() if any(lm is ours for ours in SESSION_MODELS)]


def _dropped_session_models() -> list:
    """The session models among the app's dropped models."""
    from mha_viz.ui import memo

    with memo._GC_LOCK:
        return [r() for r in memo._DROPPED if any(r() is ours for ours in SESSION_MODELS)]


def _app_loads_the_session_minilm() -> None:
    """The app's store without a MiniLM an earlier test of the worker loaded for real (not through ``loaded_once``:
    get_model would answer with that one; failed in CI)."""
    from mha_viz.ui.cache_pass import MODELS

    MODELS.drop(("", "cpu"))


def test_an_evicted_session_model_is_not_counted_as_dropped(minilm) -> None:
    from mha_viz.ui import memo
    from mha_viz.ui.cache_pass import MODELS, get_model

    _app_loads_the_session_minilm()
    assert get_model("", "cpu") is minilm  # the app's own load path, answered by the session fixture
    before = memo.dropped_alive()
    keys = [("test_session_models", i) for i in range(MODELS.max_entries)]
    try:
        for key in keys:  # the store's next models evict MiniLM, which pytest still holds
            MODELS.get(key, _Other)
        assert memo.dropped_alive() == before + 1
        let_go_of_session_models()
        assert memo.dropped_alive() == before and _held(MODELS) == [] and _dropped_session_models() == []
    finally:
        for key in keys:
            MODELS.drop(key)


def test_a_page_loads_the_session_minilm_through_the_app(minilm) -> None:
    """As any AppTest under ``loaded_once`` does: the app's store now holds pytest's MiniLM (the next test checks
    that the autouse fixture took it out)."""
    from mha_viz.ui.cache_pass import MODELS, get_model

    _app_loads_the_session_minilm()
    assert get_model("", "cpu") is minilm and _held(MODELS) == [minilm]


def test_the_next_test_finds_no_session_model_in_the_app_store() -> None:
    """Run after the test above (a file runs in order): the store holds no session model and none counts as
    dropped, whatever the tests of this worker before it loaded."""
    from mha_viz.ui.cache_pass import MODELS

    assert _held(MODELS) == [] and _dropped_session_models() == []
