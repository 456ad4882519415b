"""The views' data downloads: built when clicked (not on every rerun), and exactly the values the model computed."""

from __future__ import annotations

import csv
import io

import numpy as np
from test_app import assert_clean, run_app

from conftest import SENTENCE
from mha_viz.analysis.patterns import output_change
from mha_viz.config import Config
from mha_viz.pipeline.road import traces
from mha_viz.ui.common import npz_bytes, shown
from mha_viz.ui.views.heads import focus_csv
from mha_viz.ui.views.wo import change_csv


def test_download_buttons_build_their_files_on_click(minilm) -> None:
    for view in ("Heads", "W^O", "Head count"):
        at = run_app(view=view)
        assert_clean(at)
        data = [b.proto for b in at.get("download_button") if "(.npz)" in b.proto.label or "(.csv)" in b.proto.label]
        assert len(data) == 2, view
        for proto in data:  # a deferred file: no bytes in the page; a click does not rerun the script
            assert proto.HasField("deferred_file_id") and proto.ignore_rerun, (view, proto.label)


def test_the_files_hold_the_traces_values(minilm) -> None:
    _, _, (t,) = traces(Config(), SENTENCE, layers=[3], lm=minilm)
    special = [False] * t.n_tokens
    sh = shown(t.pattern.numpy(), t.tokens, special, hide=False)
    q = list(t.tokens).index("it")
    rows = list(csv.reader(io.StringIO(focus_csv(sh, q, "it").decode("utf-8"))))
    assert rows[0] == ["it → key", *t.tokens]
    got = np.array([[float(v) for v in r[1:]] for r in rows[1:]])  # [heads, keys]
    np.testing.assert_allclose(got, t.pattern[:, q].numpy(), rtol=1e-5, atol=1e-7)
    assert [r[0] for r in rows[1:]] == [f"head {i}" for i in range(t.n_heads)]
    other = t.output.numpy() * 1.5
    change = output_change(t.output.numpy(), other)
    rows = list(csv.reader(io.StringIO(change_csv(t.tokens, change).decode("utf-8"))))
    np.testing.assert_allclose([float(r[1]) for r in rows[1:]], change["relative"], rtol=1e-5)
    np.testing.assert_allclose([float(r[1]) for r in rows[1:]], 0.5, rtol=1e-5)  # |1.5 y - y| / |y|
    arrays = np.load(io.BytesIO(npz_bytes({"pattern": t.pattern.numpy(), "tokens": np.asarray(t.tokens)})))
    np.testing.assert_array_equal(arrays["pattern"], t.pattern.numpy())
    assert list(arrays["tokens"]) == list(t.tokens)
