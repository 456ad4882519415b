"""Word-level tokens for own weights: seed 000's worked example with the article's shapes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import assert_clean, ignored_note, run_app, step

from mha_viz.cli.main import main
from mha_viz.config import Config
from mha_viz.models.tokens import MAX_WORDS, word_id, word_tokens
from mha_viz.own import random_embeddings
from mha_viz.pipeline.own_road import own_trace
from mha_viz.trace import MhaVizError

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

ROOT = Path(__file__).resolve().parents[1]
HUMPTY = "humpty dumpty sat on"
WORDS = Config(model="own", d_model=512, n_heads=8, seed=0, tokens="words")


def documented_id(word: str) -> int:
    """The rule as documented: sha256 of the UTF-8 bytes, first 8 bytes big-endian, top bit cleared."""
    return int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "big") & (2**63 - 1)


def test_word_tokens_split_on_whitespace() -> None:
    t = word_tokens("  humpty\tdumpty sat\non ")
    assert t.pieces == ("humpty", "dumpty", "sat", "on") and t.labels == t.pieces
    assert t.special == (False,) * 4
    assert t.ids == tuple(documented_id(w) for w in ("humpty", "dumpty", "sat", "on"))
    rep = word_tokens("the cat saw the dog")
    assert rep.labels == ("the (0)", "cat", "saw", "the (3)", "dog") and rep.ids[0] == rep.ids[3]
    assert word_id("The") != word_id("the")  # case matters


def test_word_limits_are_clear_errors() -> None:
    with pytest.raises(MhaVizError, match="empty"):
        word_tokens("   \n ")
    assert len(word_tokens("w " * MAX_WORDS).ids) == MAX_WORDS == 512
    cut = word_tokens("w " * (MAX_WORDS + 1))  # cut to the first 512 words, the notice says what was dropped
    assert len(cut.ids) == MAX_WORDS and cut.cut.dropped_tokens == 1 and cut.cut.kept_chars == 2 * MAX_WORDS - 1


def test_seed_example_shapes_as_the_article_has_them(minilm) -> None:
    tokens, weights, t = own_trace(minilm, HUMPTY, WORDS)
    assert tokens.labels == ("humpty", "dumpty", "sat", "on")
    assert tuple(t.x.shape) == (4, 512)  # X
    assert tuple(t.q.shape) == tuple(t.k.shape) == tuple(t.v.shape) == tuple(t.z.shape) == (8, 4, 64)  # per head
    assert tuple(t.scores.shape) == tuple(t.pattern.shape) == (8, 4, 4)  # Q_i K_iᵀ
    assert tuple(t.concat.shape) == tuple(t.output.shape) == (4, 512)
    assert tuple(weights.W_Q.shape) == (8, 512, 64) and tuple(weights.W_O.shape) == (8, 64, 512)
    torch.testing.assert_close(t.x, random_embeddings([documented_id(w) for w in tokens.pieces], 512, seed=0))


def test_same_word_same_row(minilm) -> None:
    _, _, a = own_trace(minilm, HUMPTY, WORDS)
    _, _, b = own_trace(minilm, "on sat humpty", WORDS)
    assert torch.equal(a.x[2], b.x[1]) and torch.equal(a.x[3], b.x[0]) and torch.equal(a.x[0], b.x[2])
    assert not torch.equal(a.x[0], a.x[1])


def test_word_rows_are_stable_across_processes(minilm) -> None:
    """Another interpreter with another hash seed gives the very same X (so hash() is not used)."""
    code = (
        "import json; from mha_viz.config import Config; from mha_viz.pipeline import load, own_trace; "
        "c = Config(model='own', tokens='words'); "
        f"print(json.dumps(own_trace(load(c), {HUMPTY!r}, c)[2].x.tolist()))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    other = torch.tensor(json.loads(out.stdout.strip().splitlines()[-1]), dtype=torch.float32)
    assert torch.equal(other, own_trace(minilm, HUMPTY, WORDS)[2].x)


@pytest.mark.parametrize("causal", [False, True])
def test_trace_equals_torch_multihead_attention(causal: bool, minilm) -> None:
    _, _, t = own_trace(minilm, HUMPTY, WORDS.replace(causal=causal, dtype="float64"))
    torch.manual_seed(0)  # own xavier weights are what torch.nn.MultiheadAttention draws under the seed
    mha = torch.nn.MultiheadAttention(512, 8, bias=False).double()
    x = t.x.double().unsqueeze(1)  # [4, 1, 512] (seq, batch, d)
    mask = torch.ones(4, 4, dtype=torch.bool).triu(1) if causal else None  # True = not allowed
    with torch.no_grad():
        out, weights = mha(x, x, x, attn_mask=mask, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(t.pattern, weights[0], atol=1e-12, rtol=0)  # [8, 4, 4]
    torch.testing.assert_close(t.output, out[:, 0], atol=1e-10, rtol=0)  # [4, 512]
    assert (t.pattern[:, 0, 1:] == 0).all() == causal


def test_model_embeddings_are_the_mean_of_the_pieces(minilm) -> None:
    config = WORDS.replace(d_model=384, n_heads=12, embeddings="model")
    _, _, t = own_trace(minilm, HUMPTY, config)
    table = minilm.model.get_input_embeddings().weight.detach()
    for row, word in enumerate(HUMPTY.split()):
        ids = minilm.tokenizer(word, add_special_tokens=False)["input_ids"]
        torch.testing.assert_close(t.x[row], table[ids].mean(0))
    assert len(minilm.tokenizer("humpty", add_special_tokens=False)["input_ids"]) == 3  # hum ##pt ##y: a real mean


def test_cli_words_npz(tmp_path, capsys, minilm) -> None:
    out = tmp_path / "words.npz"
    args = ["trace", "--model", "own", "--tokens", "words", "--text", HUMPTY, "--full", "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    d = np.load(out)
    assert list(d["tokens"]) == ["humpty", "dumpty", "sat", "on"]
    assert d["x"].shape == d["concat"].shape == d["output"].shape == (4, 512)
    assert d["q"].shape == d["k"].shape == d["v"].shape == (8, 4, 64) and d["pattern"].shape == (1, 8, 4, 4)
    np.testing.assert_array_equal(d["x"], own_trace(minilm, HUMPTY, WORDS)[2].x.numpy())
    pieces = tmp_path / "pieces.npz"
    assert main(["trace", "--model", "own", "--text", HUMPTY, "--out", str(pieces)]) == 0
    assert np.load(pieces)["pattern"].shape[-1] == 9  # the default stays word pieces ([CLS] ... [SEP])


def test_cli_words_with_a_pretrained_model_is_refused(capsys) -> None:
    assert main(["trace", "--tokens", "words", "--text", HUMPTY]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--tokens words is for own weights" in err
    assert main(["trace", "--model", "own", "--tokens", "letters", "--text", HUMPTY]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_app_step_by_step_with_words(minilm) -> None:
    at = run_app(src="Own weights", own_tokens="words (split on spaces)", text=HUMPTY, view="Step by step")
    assert_clean(at)
    assert at.sidebar.radio(key="own_tokens").value == "words"
    title, x = step(at, "1. X")
    assert "[4 × 512]" in title
    np.testing.assert_allclose(x, own_trace(minilm, HUMPTY, WORDS)[2].x.numpy(), atol=1e-6)
    for prefix in ("2a. Q_0", "2b. K_0", "2c. V_0", "7a. head_0"):
        assert "[4 × 64]" in step(at, prefix)[0]
    assert "[4 × 4]" in step(at, "3. Q_0 K_0ᵀ")[0] and "[4 × 4]" in step(at, "6. softmax")[0]
    assert "[4 × 512]" in step(at, "7b. concat")[0] and "[4 × 512]" in step(at, "7c. output")[0]


def test_app_bad_tokens_link_is_reported(minilm) -> None:
    at = run_app(src="Own weights", own_tokens="letters", text=HUMPTY, view="Step by step")
    assert_clean(at)
    assert "own_tokens=letters (the choices are word pieces (bundled tokenizer)" in ignored_note(at)
    assert "[9 × 512]" in step(at, "1. X")[0]  # word pieces, the default
