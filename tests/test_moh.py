"""Training-free mixture of heads (mha_viz/studies/moh.py): the per-token head mask at the attention call against a
hand-written pre-hook on a copy's W^O, k = h is the model, k = 0 is every head ablated, and the CLI's contract."""

from __future__ import annotations

import copy
import csv

import numpy as np
import pytest
import torch

from conftest import _zoo_dir, tiny_model
from mha_viz import pipeline
from mha_viz.cli.main import main
from mha_viz.models.load import prepare
from mha_viz.pipeline import Ablate, HeadMask
from mha_viz.studies import moh

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

TEXT = "The animal was tired because it ran"


@pytest.fixture(scope="module", params=["bert", "llama"])
def tiny(request):
    return tiny_model(request.param)


def _ids(lm) -> torch.Tensor:
    return torch.tensor([lm.tokenizer(TEXT)["input_ids"]])  # [1, pos]


def _out(run) -> torch.Tensor:
    return run.logits if run.logits is not None else run.hidden


def _hooked(lm, part: str, masks: dict[int, torch.Tensor]) -> torch.Tensor:
    """A deep copy whose W^O inputs are multiplied by each token's head mask by a forward pre-hook (nothing of
    mha_viz's capture). Shapes: masks[layer] [pos, h]."""
    copy_lm = prepare(copy.deepcopy(lm.model), lm.tokenizer, lm.name + "-hooked")
    for la, m in masks.items():
        lin = copy_lm.model.get_submodule(lm.site(part, la).wo)

        def pre(_mod, args, m=m):
            x = args[0]  # [b, pos, h * dh]
            return (x * m.repeat_interleave(x.shape[-1] // m.shape[-1], dim=-1)[None],)

        lin.register_forward_pre_hook(pre)
    return _out(pipeline.run(copy_lm, _ids(lm), record=False))


def test_per_token_mask_equals_a_hand_written_hook(tiny) -> None:
    part = tiny.parts[0]
    pos = _ids(tiny).shape[1]
    gen = torch.Generator().manual_seed(0)
    masks = {la: (torch.rand(pos, tiny.n_heads, generator=gen) > 0.5).float() for la in range(tiny.n_layers(part))}
    got = _out(pipeline.run(tiny, _ids(tiny), *(HeadMask(part, la, m) for la, m in masks.items()), record=False))
    torch.testing.assert_close(got, _hooked(tiny, part, masks), atol=1e-5, rtol=1e-4)
    assert (got - _out(pipeline.run(tiny, _ids(tiny), record=False))).abs().max() > 1e-3  # the mask does something


def test_router_keeps_the_largest_contributions_per_token(tiny) -> None:
    part = tiny.parts[0]
    usage = moh.head_usage(tiny, TEXT, None, part, 2)  # [L, pos, h]
    assert usage.shape == (tiny.n_layers(part), _ids(tiny).shape[1], tiny.n_heads)
    assert (usage.sum(-1) == 2).all()
    # layer 0's routing, recomputed by hand from the unrouted pass's W^O input (layer 0's input is not routed)
    run = pipeline.run(tiny, _ids(tiny), only=(part, 0))
    z = run.calls[(part, 0)].wo_in[0].reshape(-1, tiny.n_heads, moh.head_wo(tiny, part)[0].shape[1])  # [pos, h, dh]
    norms = torch.stack([(z[:, h] @ moh.head_wo(tiny, part)[0][h]).norm(dim=-1) for h in range(tiny.n_heads)], -1)
    want = np.argsort(-norms.numpy(), axis=-1)[:, :2]
    assert all(set(np.flatnonzero(usage[0, t])) == set(want[t]) for t in range(len(want)))
    # the routed pass equals the hand-written hook with the masks it used
    masks = {la: torch.tensor(usage[la], dtype=torch.float32) for la in range(len(usage))}
    routed = _out(pipeline.run(tiny, _ids(tiny), *moh.routes(part, 2, moh.head_wo(tiny, part)), record=False))
    torch.testing.assert_close(routed, _hooked(tiny, part, masks), atol=1e-5, rtol=1e-4)


def test_k_h_is_the_model_and_k_0_ablates_every_head(tiny) -> None:
    part = tiny.parts[0]
    wo = moh.head_wo(tiny, part)
    plain = _out(pipeline.run(tiny, _ids(tiny), record=False))
    full = _out(pipeline.run(tiny, _ids(tiny), *moh.routes(part, tiny.n_heads, wo), record=False))
    assert (full - plain).abs().max() <= 1e-6
    none = _out(pipeline.run(tiny, _ids(tiny), *moh.routes(part, 0, wo), record=False))
    all_heads = [Ablate(part, la, tuple(range(tiny.n_heads))) for la in range(tiny.n_layers(part))]
    ablated = _out(pipeline.run(tiny, _ids(tiny), *all_heads, record=False))
    torch.testing.assert_close(none, ablated, atol=1e-6, rtol=0)
    assert (none - plain).abs().max() > 1e-3


def test_moh_curve_ends(tiny) -> None:
    c = moh.moh_curve(tiny, [TEXT], importance=np.zeros((tiny.n_layers(tiny.parts[0]), tiny.n_heads)))
    assert list(c.ks) == list(range(tiny.n_heads + 1))
    assert abs(c.routed[-1]) <= 1e-6 and c.static[-1] == 0.0
    assert c.routed[0] == pytest.approx(c.static[0], abs=1e-6)  # k = 0: every head gone, both ways


def test_cli_moh_contract(tmp_path_factory, tmp_path, capsys) -> None:
    out = tmp_path / "moh.csv"
    code = main(
        ["variants", "--moh", "--model", _zoo_dir(tmp_path_factory, "llama"), "--text", TEXT, "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["k", "change_routed", "change_static"]
    assert [int(r[0]) for r in rows[1:]] == list(range(len(rows) - 1))
    assert abs(float(rows[-1][1])) <= 1e-6 and float(rows[-1][2]) == 0.0
    assert "per token" in capsys.readouterr().out
