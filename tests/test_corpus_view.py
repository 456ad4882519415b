"""The Corpus view (issue 26 §2) through AppTest on the bundled MiniLM: its maps are the corpus engine's means and
spreads, its Clark et al. Figure-2 analogue is the attention to [CLS], [SEP] and punctuation computed directly from
every layer's pattern, bad files are messages, and the hosted cap on texts holds."""

from __future__ import annotations

import numpy as np
import pytest
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs
from streamlit.testing.v1 import AppTest

from mha_viz.analysis.corpus_stats import STATS_COLUMNS, read_stats
from mha_viz.analysis.roles import SCORE_KEYS, is_punctuation
from mha_viz.config import MAX_CORPUS_TEXTS_HOSTED, Config
from mha_viz.errors import MhaVizError
from mha_viz.pipeline.road import record
from mha_viz.studies import corpus
from mha_viz.studies.corpus_run import bundled_texts, run_corpus
from mha_viz.studies.sweeps import all_patterns

N = 5  # texts the AppTests score (the first N bundled examples)


def _grid(rows: list[dict], key: str) -> np.ndarray:
    out = np.zeros((6, 12))
    for r in rows:
        out[r["layer"], r["head"]] = r[key]
    return out


def _titled(charts: list[dict], start: str) -> dict:
    (chart,) = [c for c in charts if start in c["layout"]["title"]["text"]]
    return chart


def test_bundled_corpus_is_varied_and_plain() -> None:
    texts = bundled_texts()
    assert 100 <= len(texts) <= 300 and len(set(texts)) == len(texts)
    assert sum("," in t for t in texts) > 20 and all(t.strip() == t for t in texts)


def test_maps_are_the_engine_means_and_clark_is_the_direct_attention(minilm) -> None:
    at = run_app(view="Corpus", corpus_n=str(N), corpus_score="self")
    assert_clean(at)
    charts = specs(at)
    assert len(charts) == 4, [c["layout"]["title"]["text"] for c in charts]
    texts = bundled_texts()[:N]
    # the engine alone, one text per pass (no padding): the per-text roles scores, summed
    sums = corpus.added(None, corpus.Scorer("", None, "cpu", batched=False).score(
        [corpus.Item(i, t) for i, t in enumerate(texts)]))  # fmt: skip
    rows = sums.table()
    mean, std, share = (array(heatmaps(_titled(charts, t))[0]["z"]) for t in ("Mean self", "Spread", "Label"))
    np.testing.assert_allclose(mean, _grid(rows, "self"), atol=2e-6)
    np.testing.assert_allclose(std, _grid(rows, "self_std"), atol=2e-5)
    np.testing.assert_allclose(share, _grid(rows, "label_share"), atol=1e-6)
    assert mean.std() > 0.01  # heads differ: a map of one value would pass the comparison above by chance
    # Figure 2: weight on [CLS] (position 0), [SEP] (the last token) and punctuation, by layer, from every pattern
    direct = np.zeros((3, 6))
    for text in texts:
        rec = record(minilm, text)
        p = all_patterns(minilm, rec, "encoder", Config())  # [L, H, n, n]
        tokens = rec.tokens
        assert tokens.pieces[0] == "[CLS]" and tokens.pieces[-1] == "[SEP]"
        punct = np.asarray([is_punctuation(t) and not s for t, s in zip(tokens.pieces, tokens.special, strict=True)])
        direct[0] += p[..., 0].mean(axis=(1, 2))
        direct[1] += p[..., -1].mean(axis=(1, 2))
        direct[2] += p[..., punct].sum(-1).mean(axis=(1, 2))
    direct /= N
    lines = {t["name"]: array(t["y"]) for t in _titled(charts, "punctuation by layer")["data"]}
    assert list(lines) == ["[CLS]", "[SEP]", "punctuation"]
    for j, name in enumerate(lines):
        np.testing.assert_allclose(lines[name], direct[j], atol=1e-6, err_msg=name)
    assert lines["[CLS]"].max() > 0.1 and lines["[SEP]"].min() > 0 and lines["punctuation"].min() > 0


def test_a_click_opens_the_head_on_its_most_typical_text(minilm, monkeypatch) -> None:
    texts = bundled_texts()[:N]
    run = run_corpus(minilm, "", "cpu", None, texts)
    k = SCORE_KEYS.index("prev")
    mean = run.sums.total[k] / run.sums.count  # [L, H]
    typical = run.typical("prev")  # [L, H]
    chosen = np.take_along_axis(run.scores[:, k], typical[None], 0)[0]  # [L, H]: the typical text's score
    np.testing.assert_allclose(np.abs(chosen - mean), np.abs(run.scores[:, k] - mean[None]).min(0))
    assert len(set(typical.ravel().tolist())) > 1  # not one text for every head
    from mha_viz.ui.views import corpus as view

    opened: dict = {}
    monkeypatch.setattr(view, "clicked_points", lambda key: [({}, [2, 7, 0.5, int(typical[2, 7])])])
    monkeypatch.setattr(view, "set_linked", lambda **v: opened.update(v))
    monkeypatch.setattr(view, "open_head", lambda la, h: opened.update(layer=la, head=h))
    view._open("corpus_mean", run.texts, 6, 12)
    assert opened == {"text": texts[int(typical[2, 7])], "layer": 2, "head": 7}


def _stats_page(data: bytes | None) -> AppTest:
    at = run_app(view="Corpus", corpus_source="a stats file (.csv) from mha-viz corpus")
    files = None if data is None else ("heads.csv", data, "text/csv")
    return at.file_uploader(key="corpus_stats").set_value(files).run()


def test_a_stats_file_is_drawn_and_a_bad_one_is_a_message(minilm, tmp_path) -> None:
    texts = bundled_texts()[:3]
    sums = corpus.added(None, corpus.Scorer("", None, "cpu").score([corpus.Item(i, t) for i, t in enumerate(texts)]))
    path = tmp_path / "heads.csv"
    corpus.write_table(str(path), sums.table())
    assert tuple(corpus.COLUMNS) == STATS_COLUMNS
    good = path.read_bytes()
    at = _stats_page(good)
    assert_clean(at)
    np.testing.assert_allclose(array(heatmaps(_titled(specs(at), "Mean prev"))[0]["z"]), _grid(sums.table(), "prev"),
                               atol=1e-6)  # fmt: skip
    broken = good.decode().splitlines()
    bad_files = {
        "no columns": b"a,b\n1,2\n",
        "share over 1": "\n".join([broken[0], broken[1].replace(broken[1].split(",")[3], "1.5", 1), *broken[2:]]),
        "missing head": "\n".join(broken[:-1]),
        "not a number": "\n".join([broken[0], "x" + broken[1], *broken[2:]]),
        "binary": b"\xff\xfe\x00garbage",
    }
    for name, data in bad_files.items():
        at = _stats_page(data if isinstance(data, bytes) else data.encode())
        assert not at.exception, (name, [e.value for e in at.exception])
        assert at.error and "mha_viz corpus" in at.error[0].value.replace("\\", ""), name  # (markdown-escaped)
        with pytest.raises(MhaVizError):
            read_stats(data if isinstance(data, bytes) else data.encode())


def test_a_stats_file_of_a_run_that_scored_no_text_is_refused(minilm, tmp_path) -> None:
    """Issue 35 §4.11: `texts = 0` and NaN scores (what a run whose every text was skipped writes) were drawn as
    "prev: 4 (nan%)"; now the page says why the file cannot be shown."""
    sums = corpus.added(None, corpus.Scorer("", None, "cpu").score([corpus.Item(0, None, "empty")]))
    path = tmp_path / "heads.csv"
    corpus.write_table(str(path), sums.table())
    data = path.read_bytes()
    assert b",0," in data and b"nan" in data.lower()  # the file as the engine writes it
    with pytest.raises(MhaVizError, match="texts = 0"):
        read_stats(data)
    at = _stats_page(data)
    assert not at.exception, [e.value for e in at.exception]
    assert at.error and "texts = 0" in at.error[0].value and "no text was scored" in at.error[0].value
    assert not specs(at) and not any("nan" in t.value.lower() for t in at.text)


def _upload_page(data: bytes | None, **params: str) -> AppTest:
    at = run_app(view="Corpus", corpus_source="a text file (.txt, one text per line)", **params)
    files = None if data is None else ("texts.txt", data, "text/plain")
    return at.file_uploader(key="corpus_upload").set_value(files).run()


def test_an_empty_upload_is_a_message(minilm) -> None:
    for data in (b"", b"\n  \n\n"):
        at = _upload_page(data)
        assert not at.exception, [e.value for e in at.exception]
        assert at.error and "no text" in at.error[0].value
        assert not specs(at)


def test_bad_lines_of_an_upload_are_skipped_and_counted(minilm) -> None:
    """Issue 35 §4.10: one 12,001-character line, or one of only zero-width characters, aborted the run."""
    lines = ["The cat sat on the mat.", "a" * 12_001, "\u200b\u200b", "", "A dog ran home, fast."]
    at = _upload_page("\n".join(lines).encode())
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    said = [c.value for c in at.caption]
    assert any("3 line(s) skipped: 1 over 12,000 characters, 2 empty" in c for c in said), said
    assert at.number_input(key="corpus_n").max == 2
    assert len(specs(at)) == 4  # the maps of the two texts are drawn


def test_the_hosted_cap_on_texts_holds(minilm, monkeypatch) -> None:
    lines = [f"Sentence number {i}, with a comma." for i in range(MAX_CORPUS_TEXTS_HOSTED + 9)]
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    at = _upload_page("\n".join(lines).encode(), corpus_n="3")
    assert not at.exception, [e.value for e in at.exception]
    assert any(f"the first {MAX_CORPUS_TEXTS_HOSTED}" in w.value for w in at.warning)
    box = at.number_input(key="corpus_n")
    assert box.max == MAX_CORPUS_TEXTS_HOSTED and box.value == 3
    monkeypatch.delenv("MHA_VIZ_HOSTED")
    at = _upload_page("\n".join(lines).encode(), corpus_n="3")
    assert not any("the first" in w.value for w in at.warning)
    assert at.number_input(key="corpus_n").max == len(lines)


def test_uploaded_texts_are_shown_as_typed_never_as_markdown(minilm) -> None:
    """A corpus line is untrusted: quoted in a caption, its markdown (an image from elsewhere, a link) is escaped."""
    hostile = "![x](http://127.0.0.1:9/a.png) **loud**"  # short: quoted whole
    lines = [hostile] * 3
    at = _upload_page("\n".join(lines).encode(), corpus_n="3")
    assert not at.exception, [e.value for e in at.exception]
    quoted = [c.value for c in at.caption if "most typical text" in c.value]
    assert quoted, [c.value for c in at.caption]
    assert "\\!\\[x\\]\\(" in quoted[0] and "\\*\\*loud\\*\\*" in quoted[0]  # every markdown character escaped
