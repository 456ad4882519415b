"""A new session's first page made cheaper for ten sessions at once (issue 36 §6; benchmarks/bench_sessions.py).

The Lesson's plain projections are the model's own weights, the same for every text: kept once per model, part and
layer (ui.cache_studies.get_plain_weights), not once per text. ui.memo.nbytes counts the strings and numbers of a
list or dict in one loop (the same sum). A short pass runs on one torch thread while other page runs of the process
are under way (ui.cache_pass._shared_cores), the values the same."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mha_viz.config import Config
from mha_viz.pipeline import road
from mha_viz.pipeline.pool_ahead import page_running
from mha_viz.selection import Selection
from mha_viz.ui import cache_pass, cache_studies, memo

pytestmark = [pytest.mark.usefixtures("loaded_once"), pytest.mark.model]  # the dashboard's model: the worker's MiniLM
TEXT = "The animal didn't cross the street because it was too tired."
OTHER = "Client 3 says the animal didn't cross the street because it was too wet."


def _uncached(sel: Selection):
    """The layer's plain weights straight from the model, on a recording of the selection's own text."""
    lm = cache_studies.model_of(sel.config)
    return road.layer_of(lm, road.record(lm, sel.text, None), sel).weights()


def _fields(w) -> dict[str, torch.Tensor]:
    return {k: v for k, v in vars(w).items() if isinstance(v, torch.Tensor)}


def test_plain_weights_are_the_models_own_kept_once_per_layer_not_per_text() -> None:
    cache_studies.PLAIN_WEIGHTS.clear()
    sel = Selection(Config(), TEXT, None, None, 2)
    kept = cache_studies.get_plain_weights(sel)
    fresh = _uncached(sel)
    assert set(_fields(kept)) == set(_fields(fresh)) >= {"W_Q", "W_K", "W_V", "W_O", "b_Q"}
    for name, t in _fields(fresh).items():
        assert torch.equal(_fields(kept)[name], t), name
    assert kept.scale == fresh.scale
    # another text, another session: the same entry (the weights are the model's, not the text's)
    assert cache_studies.get_plain_weights(sel.with_text(OTHER)) is kept
    assert cache_studies.get_plain_weights(sel.edited(heads=4)) is kept  # what-ifs are applied later, not here
    assert len(cache_studies.PLAIN_WEIGHTS._items) == 1
    # another layer: its own entry, with that layer's weights
    three = cache_studies.get_plain_weights(sel.at(layer=3))
    assert three is not kept and len(cache_studies.PLAIN_WEIGHTS._items) == 2
    assert torch.equal(three.W_Q, _uncached(sel.at(layer=3)).W_Q) and not torch.equal(three.W_Q, kept.W_Q)


def test_plain_weights_of_own_weights_follow_their_settings() -> None:
    own = Config(model="own", d_model=64, n_heads=4, seed=1)
    a = cache_studies.get_plain_weights(Selection(own, TEXT))
    assert a is cache_studies.get_plain_weights(Selection(own, OTHER))  # the text does not change them
    b = cache_studies.get_plain_weights(Selection(own.replace(seed=2), TEXT))
    assert a.W_Q.shape == b.W_Q.shape == (4, 64, 16) and not torch.equal(a.W_Q, b.W_Q)


def test_nbytes_counts_each_string_once_and_numbers_as_nothing() -> None:
    """The loop over a list's or dict's items gives what an independent walk gives: each distinct string object's
    characters once (an equal string that is another object counted again), arrays' and tensors' bytes, numbers 0."""
    word = "".join(["ani", "mal"])  # built at run time: not interned, so the copy below is another object
    again = "".join(["ani", "mal"])
    assert word == again and word is not again
    array, tensor = np.zeros((3, 4), np.float32), torch.zeros(5, dtype=torch.float64)
    value = {
        "labels": [word, word, again, "it"],
        "numbers": [1, 2.5, None, True, np.float32(3)],
        word: (array, tensor, array, [word, (again,)]),
        "nested": {"z": {"bdata": "QUJD" * 10}, "n": 7},
    }
    seen: set[int] = set()

    def walk(v: object) -> int:
        if isinstance(v, bool | int | float | np.generic) or v is None or id(v) in seen:
            return 0
        seen.add(id(v))
        if isinstance(v, str):
            return len(v)
        if isinstance(v, np.ndarray):
            return v.nbytes
        if isinstance(v, torch.Tensor):
            return v.element_size() * v.nelement()
        items = v.items() if isinstance(v, dict) else ((x, None) for x in v)
        return sum(walk(a) + walk(b) for a, b in items)

    expected = walk(value)
    assert memo.nbytes(value) == expected
    keys = sum(map(len, ("labels", "numbers", "nested", "z", "bdata", "n")))
    assert expected == len(word) + len(again) + len("it") + keys + 40 + array.nbytes + 5 * 8  # the walk itself


def test_a_short_pass_takes_one_thread_while_another_page_runs() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with page_running():
            with cache_pass._shared_cores(short=True):
                alone = torch.get_num_threads()
            with page_running(), cache_pass._shared_cores(short=True):
                shared = torch.get_num_threads()
            with page_running(), cache_pass._shared_cores(short=False):  # a long pass chose its threads itself
                long_pass = torch.get_num_threads()
            after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert (alone, shared, long_pass, after) == (2, 1, 2, 2)


def test_a_pass_on_one_thread_records_the_same_attention() -> None:
    lm = cache_studies.model_of(Config())
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = road.record(lm, TEXT)
        torch.set_num_threads(1)
        one = road.record(lm, TEXT)
    finally:
        torch.set_num_threads(before)
    assert one.run.calls.keys() == two.run.calls.keys()
    for key, call in two.run.calls.items():
        torch.testing.assert_close(one.run.calls[key].q, call.q, rtol=0, atol=1e-5)
        torch.testing.assert_close(one.run.calls[key].k, call.k, rtol=0, atol=1e-5)
