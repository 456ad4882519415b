"""Head importance and pruning curves by ablation, on tiny models where the answer is known and on MiniLM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import SENTENCE, _tiny_tokenizer
from mha_viz.models.load import prepare
from mha_viz.studies import importance as im

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models


def _tiny(model_type: str, boost: tuple[int, int] | None):
    """A tiny random model (our own copy); with ``boost`` = (layer, head), every other head's W^O block is zeroed,
    so that head alone moves anything."""
    from zoo import build

    model = build(model_type)
    if boost is not None:
        name, wo_name = ("model.layers", "self_attn.o_proj") if model_type == "llama" else (
            "encoder.layer", "attention.output.dense")  # fmt: skip
        for layer in range(2):
            wo = model.get_submodule(f"{name}.{layer}.{wo_name}")
            dh = wo.weight.shape[1] // 4
            with torch.no_grad():  # nn.Linear weight [out, in]: a head's slice of the input columns
                for head in range(4):
                    if (layer, head) != boost:
                        wo.weight[:, head * dh : (head + 1) * dh] = 0.0
    return prepare(model, _tiny_tokenizer(), f"tiny-{model_type}")


@pytest.mark.parametrize("model_type", ["llama", "bert"])
def test_a_dominant_head_is_the_most_important(model_type: str) -> None:
    lm = _tiny(model_type, (1, 2))
    scorer = im.Scorer(lm, [SENTENCE, "The animal was tired"])
    imp = im.head_importance(scorer)
    assert imp.shape == (2, 4)
    assert abs(imp[1, 2]) > 1e-6
    others = np.delete(imp.flatten(), 1 * 4 + 2)
    np.testing.assert_allclose(others, 0.0, atol=1e-12)  # removing a head that moves nothing changes nothing
    assert "loss" in im.measure_name(lm) if lm.causal_lm else "cosine" in im.measure_name(lm)


def test_decoder_measure_is_the_loss_increase() -> None:
    lm = _tiny("llama", None)
    scorer = im.Scorer(lm, [SENTENCE])
    ids = scorer.texts[0].ids
    from mha_viz.pipeline.door import Ablate, run

    intact = run(lm, ids, record=False).logits[0]
    cut = run(lm, ids, Ablate("decoder", 0, (1, 3)), record=False).logits[0]
    ce = lambda lg: torch.nn.functional.cross_entropy(lg[:-1].double(), ids[0, 1:])
    assert scorer.score([(0, 1), (0, 3)]) == pytest.approx(float(ce(cut) - ce(intact)), abs=1e-9)
    assert scorer.score([]) == 0.0


@pytest.mark.slow  # 73 pruning steps of MiniLM, twice (slow tier)
def test_pruning_curve_starts_at_zero_and_ends_at_all_removed(minilm) -> None:
    scorer = im.Scorer(minilm, [SENTENCE])
    imp = im.head_importance(scorer)
    order = im.pruning_order(imp)
    assert len(order) == 72 and len(set(order)) == 72
    assert abs(imp[order[0]]) == np.abs(imp).min() and abs(imp[order[-1]]) == np.abs(imp).max()
    steps = im.curve_steps(72)
    assert steps == list(range(73))
    curve = im.pruning_curve(scorer, order, steps)
    everything = scorer.score(scorer.heads)
    assert curve[0] == 0.0 and curve[-1] == pytest.approx(everything, abs=1e-12)
    (rand,) = [im.pruning_curve(scorer, o, steps) for o in im.random_orders(scorer.heads, [0])]
    assert rand[-1] == pytest.approx(everything, abs=1e-12)
    # removing the least important heads first keeps the output closer than a random order on average
    assert curve[1:-1].mean() < rand[1:-1].mean()
    assert imp[1, 0] == pytest.approx(scorer.score([(1, 0)]))


def test_pruning_order_is_by_magnitude() -> None:
    imp = np.array([[0.5, -0.9], [0.01, -0.02]])
    assert im.pruning_order(imp) == [(1, 0), (1, 1), (0, 0), (0, 1)]


def test_curve_steps_thin_out_for_big_models() -> None:
    steps = im.curve_steps(270)
    assert steps[0] == 0 and steps[-1] == 270 and len(steps) <= im.CURVE_POINTS
    assert steps == sorted(set(steps))


@pytest.mark.slow  # importance and a 73-step pruning curve through the CLI (slow tier)
def test_cli_contract(minilm, tmp_path, capsys) -> None:
    import csv

    from mha_viz.cli.main import main

    out, curve = tmp_path / "imp.csv", tmp_path / "curve.csv"
    assert main(["importance", "--text", SENTENCE, "--out", str(out), "--curve", str(curve)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == ["layer", "head", "importance"] and len(rows) == 72
    expected = im.head_importance(im.Scorer(minilm, [SENTENCE]))
    got = np.zeros((6, 12))
    for r in rows:
        got[int(r["layer"]), int(r["head"])] = float(r["importance"])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-9)
    points = list(csv.DictReader(curve.open()))
    assert float(points[0]["by_importance"]) == 0.0 and int(points[-1]["heads_removed"]) == 72
    everything = im.Scorer(minilm, [SENTENCE]).score([(la, h) for la in range(6) for h in range(12)])
    assert float(points[-1]["by_importance"]) == pytest.approx(everything, rel=1e-5)
    assert float(points[-1]["random_mean"]) == pytest.approx(everything, rel=1e-5)
    assert "L5H" in capsys.readouterr().out
    assert main(["importance", "--text", SENTENCE, "--out", str(tmp_path / "x.txt")]) == 2
    assert main(["importance", "--text", SENTENCE, "--model", "own", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("mha-viz: error:") for line in err)
