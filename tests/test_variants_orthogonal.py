"""The orthogonal alignment before pooling (2412.20677, mha_viz/studies/variants.py "orthogonal"): Procrustes and the
rotary-compatible pair rotation recover known rotations, the rotation alone leaves the model unchanged, the rotary
rotation folds into W_Q and W_K (it commutes with rotary), and the study's own K/V count changes nothing."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import _tiny_tokenizer, tiny_model
from mha_viz.models.load import prepare
from mha_viz.models.run import run_model
from mha_viz.pipeline.door import run as door_run
from mha_viz.studies import variants as va

TEXT = "The animal was tired because it ran all day"


@pytest.fixture(scope="module", params=["bert", "llama"])
def tiny(request):
    return tiny_model(request.param)


def _ids(lm) -> torch.Tensor:
    return torch.tensor([lm.tokenizer(TEXT)["input_ids"]])  # [1, pos]


def _out(lm, share=None, rotate=None) -> torch.Tensor:
    run = door_run(lm, _ids(lm), *va.conversion(share or {}, rotate), record=False)
    return run.logits if run.logits is not None else run.hidden


def _random_orthogonal(n: int, d: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(n, d, d, generator=torch.Generator().manual_seed(seed)))
    return q  # [n, d, d]


def test_procrustes_recovers_a_known_rotation() -> None:
    a = torch.randn(40, 8, generator=torch.Generator().manual_seed(0))
    r = _random_orthogonal(1, 8, 1)[0]
    torch.testing.assert_close(va.procrustes(a, a @ r), r, atol=1e-5, rtol=0)


def test_pair_rotation_recovers_pair_angles_and_commutes_with_rotary() -> None:
    d, half = 8, 4
    theta = torch.tensor([0.3, -1.2, 2.5, 0.0])
    r = torch.zeros(d, d)
    i = torch.arange(half)
    r[i, i], r[i, i + half], r[i + half, i], r[i + half, i + half] = theta.cos(), theta.sin(), -theta.sin(), theta.cos()
    a = torch.randn(30, d, generator=torch.Generator().manual_seed(2))
    got = va.pair_rotation(a, a @ r)
    torch.testing.assert_close(got, r, atol=1e-5, rtol=0)
    # transformers' rotary at position p: x cos + rotate_half(x) sin, cos/sin repeated over both halves

    def rope(x: torch.Tensor, p: float) -> torch.Tensor:
        ang = p * torch.tensor([1.0, 0.1, 0.01, 0.001]).repeat(2)  # [d]
        rot_half = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * ang.cos() + rot_half * ang.sin()

    torch.testing.assert_close(rope(a @ got, 7.0), rope(a, 7.0) @ got, atol=1e-5, rtol=0)
    full = va.procrustes(a, a @ _random_orthogonal(1, d, 3)[0])  # a general rotation does not commute
    assert (rope(a @ full, 7.0) - rope(a, 7.0) @ full).abs().max() > 1e-2


def test_rotation_alone_leaves_the_model_exact(tiny) -> None:
    part = tiny.parts[0]
    kv = tiny.n_kv_heads
    dh = run_model(tiny, _ids(tiny), only=(part, 0)).calls[(part, 0)].k.shape[-1]
    rot = {(part, la): (_random_orthogonal(kv, dh, la), _random_orthogonal(kv, dh, 10 + la))
           for la in range(tiny.n_layers(part))}  # fmt: skip
    plain = _out(tiny)
    assert (_out(tiny, rotate=rot) - plain).abs().max() <= 1e-5
    # pooled after rotating differs from pooled without: the rotation does something once heads are merged
    share = va.share_plan(part, (va.consecutive_groups(kv, 1),) * tiny.n_layers(part))
    assert (_out(tiny, share=share, rotate=rot) - _out(tiny, share=share)).abs().max() > 1e-4


def test_rotary_pair_rotation_folds_into_the_weights() -> None:
    """On the rotary tiny LLaMA, the fitted rotation applied at the attention call equals W_Q's and W_K's head
    columns multiplied by R_K, W_V's by R_V and W^O's rows by R_Vᵀ in a deep copy (no capture involved)."""
    from zoo import build

    lm = prepare(build("llama"), _tiny_tokenizer(), "tiny-llama")
    part = lm.parts[0]
    run = run_model(lm, _ids(lm), extras=False)
    kinds = [va.key_kind(lm, part, la) for la in range(lm.n_layers(part))]
    assert set(kinds) == {"rotary"}
    groups = (va.consecutive_groups(lm.n_kv_heads, 1),) * lm.n_layers(part)
    kv = [(run.calls[(part, la)].k[0], run.calls[(part, la)].v[0]) for la in range(lm.n_layers(part))]
    rot = va.rotation_plan(part, groups, kv, kinds)
    model = copy.deepcopy(lm.model)
    h, n_kv = lm.n_heads, lm.n_kv_heads
    for la in range(lm.n_layers(part)):
        site = lm.site(part, la)
        r_k, r_v = rot[(part, la)]  # [kv, dh, dh]
        dh = r_k.shape[-1]
        with torch.no_grad():
            for name, r, n in ((site.pre_rotary[0], r_k.repeat_interleave(h // n_kv, 0), h),
                               (site.pre_rotary[1], r_k, n_kv), (site.v, r_v, n_kv)):  # fmt: skip
                w = model.get_submodule(name).weight  # [n * dh, d_model]
                w.copy_(torch.einsum("nde,ndm->nem", r, w.view(n, dh, -1)).reshape_as(w))
            wo = model.get_submodule(site.wo).weight  # [d_model, h * dh]
            rv = r_v.repeat_interleave(h // n_kv, 0)  # [h, dh, dh]
            wo.copy_(torch.einsum("hde,mhd->mhe", rv, wo.view(wo.shape[0], h, dh)).reshape_as(wo))
    edited = prepare(model, lm.tokenizer, "tiny-llama-rotated")
    assert (_out(lm, rotate=rot) - _out(lm)).abs().max() <= 1e-5
    torch.testing.assert_close(_out(edited), _out(lm), atol=1e-5, rtol=1e-4)
    share = va.share_plan(part, groups)
    torch.testing.assert_close(_out(edited, share=share), _out(lm, share=share, rotate=rot), atol=1e-5, rtol=1e-4)


def test_orthogonal_study_own_count_is_zero_and_one_group_differs_from_mean(tiny) -> None:
    s = va.study(tiny, [TEXT])
    orth, mean = s.curve("orthogonal"), s.curve("mean")
    assert [p.kv_heads for p in orth] == [p.kv_heads for p in mean]
    assert orth[0].kv_heads == tiny.n_kv_heads and orth[0].change == 0.0
    assert abs(orth[-1].change - mean[-1].change) > 1e-9  # rotated before pooling: another model
