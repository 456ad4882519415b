"""Long texts: a text over the model's limit is cut to it with a notice, and every view works on the cut text."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import assert_clean, run_app
from texts import long_text, over_limit

from mha_viz.config import Config
from mha_viz.models.load import LoadedModel, load_model
from mha_viz.models.tokens import cut_notice, tokenize
from mha_viz.pipeline.road import encode, layer_trace, record
from mha_viz.ui.sidebar import VIEWS

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models


def test_cut_to_the_limit_with_what_was_dropped(minilm: LoadedModel) -> None:
    text = over_limit(minilm, 100)
    total = len(minilm.tokenizer(text)["input_ids"])
    tokens, _ = encode(minilm, text)
    cut = tokens.cut
    assert len(tokens.ids) == minilm.max_tokens == cut.limit == 512
    assert cut.total_tokens == total and cut.dropped_tokens == total - 512 >= 100
    assert tokens.labels[0] == "[CLS]" and tokens.labels[-1] == "[SEP]"  # the closing token stays
    # the kept characters are exactly what the kept tokens cover: tokenising them alone gives the same ids
    assert 0 < cut.kept_chars < cut.total_chars == len(text)
    assert minilm.tokenizer(text[: cut.kept_chars])["input_ids"] == list(tokens.ids)
    notice = cut_notice(cut, minilm.name, text)
    for figure in (
        f"{total:,} tokens",
        "at most 512",
        f"last {total - 512:,} tokens",
        f"{len(text) - cut.kept_chars:,}",
    ):
        assert figure in notice, (figure, notice)
    assert text[: cut.kept_chars].split()[-1] in notice  # where the cut is: the words just before it
    assert encode(minilm, long_text(3))[0].cut is None  # a short text is not cut


def test_trace_of_a_cut_text_is_the_trace_of_its_kept_part(minilm: LoadedModel) -> None:
    text = over_limit(minilm, 40)
    rec = record(minilm, text)
    kept = text[: rec.tokens.cut.kept_chars]
    config = Config()
    a, b = layer_trace(minilm, rec, None, 2, config), layer_trace(minilm, record(minilm, kept), None, 2, config)
    assert a.pattern.shape == (12, 512, 512) and a.tokens == b.tokens
    torch.testing.assert_close(a.pattern, b.pattern, rtol=0, atol=0)


def test_decoder_text_is_cut_too(t5_dir: str) -> None:
    lm = load_model(t5_dir)
    limit = 24
    target_ids = lm.tokenizer(long_text(6))["input_ids"]
    assert len(target_ids) + 1 > limit
    body = tokenize(lm.tokenizer, long_text(6), limit - 1, lm.name, what="target text")
    from mha_viz.models.tokens import decoder_tokens

    dec = decoder_tokens(lm.tokenizer, long_text(6), lm.decoder_start_id or 0, limit, lm.name)
    assert len(dec.ids) == limit and dec.ids[1:] == body.ids  # the start token, then the cut target
    assert dec.cut.limit == limit and dec.cut.total_tokens == len(target_ids) + 1
    assert dec.cut.dropped_tokens == len(target_ids) + 1 - limit
    assert "target text" in cut_notice(dec.cut, lm.name, long_text(6))


def test_cli_cuts_with_one_line_on_stderr(minilm: LoadedModel, capsys, tmp_path) -> None:
    from mha_viz.cli.main import main

    out = tmp_path / "t.npz"
    main(["trace", "--text", over_limit(minilm, 30), "--layer", "0", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at most 512" in err[0] and "cut" in err[0]
    import numpy as np

    assert np.load(out)["pattern"].shape == (1, 12, 512, 512)


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_renders_at_limit_plus_100(view: str, minilm: LoadedModel) -> None:
    at = run_app(view=view, text=over_limit(minilm, 100))
    assert_clean(at)
    notices = [w.value for w in at.warning if "so it was cut" in w.value]
    assert len(notices) == 1 and "at most 512" in notices[0], [w.value for w in at.warning]


def test_lesson_window_draws_the_opened_heads_exact_weights(minilm: LoadedModel) -> None:
    from apptest_helpers import array, heatmaps, open_all, specs

    text = over_limit(minilm, 100)
    at = run_app(view="Lesson", text=text, layer="1", lesson_head="head 3", lesson_rows="tokens 128–255")
    assert_clean(at)
    open_all(at)  # the steps are lazy: open them all
    assert at.selectbox(key="lesson_rows").value == 128
    want = layer_trace(minilm, record(minilm, text), None, 1, Config()).pattern[3].numpy()  # [512, 512]
    found = [hm for s in specs(at) for hm in heatmaps(s) if str(hm.get("meta", "")).startswith("softmax, row by row")]
    assert len(found) == 1
    z = array(found[0]["z"])
    assert z.shape == (128, 512)  # a window of 128 query rows, every key
    np.testing.assert_allclose(z, want[128:256], rtol=0, atol=1e-6)
    assert len(found[0]["y"]) == 128 and found[0]["y"][0] == record(minilm, text).tokens.labels[128]
