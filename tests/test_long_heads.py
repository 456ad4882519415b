"""The heads that matter at length (analysis/long_heads.py, studies/long_heads.py, models/generate.py, `mha-viz long`):
shares from a tiled pass equal the same numbers from the model's own eager weights; greedy generation through the door
is the model's own greedy decoding, with each head's most attended key as its eager weights say; the rules on patterns
whose answers are known; the CLI end to end on SmolLM2, and its one-line refusals."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from mha_viz.analysis import long_heads as rules
from mha_viz.models.load import load_model
from mha_viz.pipeline import door
from mha_viz.pooling import block_means, pool_factor
from mha_viz.studies.long_heads import layer_shares
from zoo import eager_pass

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

TOL = 1e-5


@pytest.fixture(scope="module")
def llama(llama_dir):
    return load_model(llama_dir)


def _ids(n: int) -> torch.Tensor:
    return torch.randint(3, 300, (1, n), generator=torch.Generator().manual_seed(2))


def test_shares_from_the_tiled_statistics_equal_the_eager_weights(llama) -> None:
    n, w, sinks = 100, 8, 4
    ids = _ids(n)
    run = door.run(llama, ids, extras=False, tile_cells=10, tile_block=4 * n * 9)  # blocks of 9 rows: tiled
    theirs = eager_pass(llama, ids).attentions
    q, k = torch.arange(n)[:, None], torch.arange(n)[None, :]
    near = (k <= q) & (k > q - w)
    for layer, weights in enumerate(theirs):
        call = run.calls[("decoder", layer)]
        assert call.row_lse is not None
        got = layer_shares(call, 10, w=w, sinks=sinks)  # [5, h]
        p = weights[0].double()  # [h, n, n]
        want_sink = p[..., :sinks].sum(-1).mean(-1)
        want_local = (p * near).sum(-1).mean(-1)
        want_union = (p * (near | (k < sinks))).sum(-1).mean(-1)
        assert np.allclose(got[0], want_sink.numpy(), atol=TOL) and np.allclose(got[1], want_local.numpy(), atol=TOL)
        assert np.allclose(got[2], want_union.numpy(), atol=TOL)
        assert np.allclose(got[3], rules.vertical_slash_recall(p[:, -64:].numpy(), n - 64), atol=TOL)
        f = pool_factor(n, n, 10)  # the recording keeps no tile map: layer_shares pools on demand at 10 a side
        pooled = block_means(p.numpy(), f)
        assert np.allclose(got[4], rules.block_sparse_recall(pooled, f, n, n), atol=TOL)


def test_greedy_generation_is_the_models_greedy_decoding(llama) -> None:
    ids = _ids(40)
    got = door.generate(llama, ids, 6)
    with torch.no_grad():
        want = llama.model.generate(ids, max_new_tokens=6, do_sample=False, use_cache=True)[0, 40:]
    assert got.ids.tolist() == want.tolist()
    full = torch.cat([ids, got.ids[None, :-1]], dim=1)  # each step's query: the token before the one it chose
    attentions = eager_pass(llama, full).attentions
    for step in range(6):
        eager_top = torch.stack([a[0, :, 39 + step].argmax(-1) for a in attentions])  # [L, H]
        assert torch.equal(got.top[step], eager_top)


def test_generation_with_heads_masked_follows_the_masked_model(llama) -> None:
    ids = _ids(40)
    masked = [door.Ablate("decoder", 0, (0, 1, 2, 3)), door.Ablate("decoder", 1, (1, 3))]
    got = door.generate(llama, ids, 1, masked)
    logits = door.run(llama, ids, *masked).logits  # [1, n, vocab]
    assert int(got.ids[0]) == int(logits[0, -1].argmax())


def test_retrieval_hits_count_each_copied_needle_token_once() -> None:
    prompt = np.array([5, 6, 51, 7, 8, 9, 10, 11, 12, 13, 50, 51, 52, 14])  # the needle at 10…12
    chosen = np.array([51, 52, 52, 99])
    top = np.zeros((4, 2, 2), dtype=int)
    top[:, 0, 0] = [11, 12, 12, 3]  # copies 51 then 52 (52 again: counted once)
    top[:, 0, 1] = [11, 11, 11, 11]  # copies 51 only (11 holds 51, not 52)
    top[:, 1, 0] = [2, 12, 0, 0]  # 51 read from outside the needle: no; then copies 52
    top[:, 1, 1] = [0, 0, 0, 0]
    hits = rules.retrieval_hits(top, chosen, prompt, slice(10, 13))
    assert hits.tolist() == [[2, 1], [1, 0]]
    assert np.allclose(rules.retrieval_score([hits], [3]), hits / 3)


def test_pattern_recalls_and_kinds() -> None:
    n, r = 64, 16
    rows = np.zeros((2, r, n))
    first = n - r
    for i in range(r):
        rows[0, i, 0] = 0.5  # a vertical line (key 0) ...
        rows[0, i, first + i - 3] = 0.5  # ... and a slash (offset 3)
    rows[1] = 1.0 / n  # even over every key
    got = rules.vertical_slash_recall(rows, first)
    assert got[0] == pytest.approx(1.0) and got[1] < 0.2
    tiles = np.zeros((2, 8, 8))
    tiles[0, :, 0] = 1.0 / 8  # every block-row's weight in one tile
    tiles[1] = 1.0 / 64
    got = rules.block_sparse_recall(tiles, 8, 64, 64)
    assert got[0] == pytest.approx(1.0) and got[1] == pytest.approx(1 / 8)
    recalls = np.array([[[0.95, 0.5, 0.4], [0.3, 0.9, 0.2]]])  # [1, 2, 3]
    assert rules.pattern_kind(recalls).tolist() == [["A-shape", "vertical-slash"]]
    kinds = rules.duo_kind(recalls[..., 0], np.array([[0.0, 0.0]]))
    assert kinds.tolist() == [["streaming", "retrieval"]]
    assert rules.duo_kind(recalls[..., 0], np.array([[0.5, 0.0]])).tolist() == [["retrieval", "retrieval"]]


@pytest.mark.slow  # minutes of SmolLM2 passes on two cores: outside --fast, in the full suite
def test_cli_long_writes_every_heads_row_on_smollm2(tmp_path, capsys) -> None:
    from mha_viz.cli.main import main

    text = tmp_path / "long.txt"
    text.write_text(Path("mha_viz/studies/corpus_examples.txt").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "heads.csv"
    argv = ["long", "--text-file", str(text), "--max-tokens", "160", "--depths", "0.5", "--k", "2", "--out", str(out)]
    assert main(argv) == 0
    with open(out, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 30 * 9 and list(rows[0])[:6] == ["layer", "head", "sink", "local", "retrieval", "kind"]
    for row in rows:
        assert all(0.0 <= float(row[c]) <= 1.0 + 1e-6 for c in ("sink", "local", "retrieval", "a_shape"))
        assert row["kind"] in ("retrieval", "streaming") and row["pattern"] in rules.PATTERNS
    assert "needle recall" in capsys.readouterr().err


def test_cli_long_refuses_bad_input_in_one_line(tmp_path, capsys) -> None:
    from mha_viz.cli.main import main

    assert main(["long", "--text-file", str(tmp_path / "none.txt"), "--out", str(tmp_path / "h.csv")]) != 0
    err = capsys.readouterr().err.strip()
    assert "cannot read --text-file" in err and "Traceback" not in err and len(err.splitlines()) == 1
    (tmp_path / "t.txt").write_text("word " * 50, encoding="utf-8")
    assert main(["long", "--text-file", str(tmp_path / "t.txt"), "--depths", "0.5,2", "--out", str(tmp_path / "h.csv"),
                 "--max-tokens", "64"]) != 0  # fmt: skip
    assert "between 0 and 1" in capsys.readouterr().err


def test_shares_under_a_sliding_window_shorter_than_the_text_equal_the_eager_weights() -> None:
    """Rows past the window see none of the first keys: their sink share is 0, not the 1/n an eager softmax gives a
    row that sees no key at all (tiles.window_weights' ``dead``: dead over the row's whole mask, not the window's)."""
    from tile_models import _eager_pass, _model, _tiled_pass

    model, n, w, sinks = _model("mistral"), 100, 8, 4  # sliding window 24 < 100
    ids, mask = (t[:1] for t in _batch_of(n))
    _, calls = _tiled_pass(model, ids, mask, block=4 * n * 9)
    theirs = _eager_pass(model, ids, mask).attentions
    for layer, (call, weights) in enumerate(zip(calls, theirs, strict=True)):
        got = layer_shares(call, 10, w=w, sinks=sinks)  # [5, h]
        want_sink = weights[0].double()[..., :sinks].sum(-1).mean(-1)
        assert np.allclose(got[0], want_sink.numpy(), atol=TOL), (layer, got[0], want_sink)


def _batch_of(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    from tile_models import _batch

    return _batch(n)
