"""The fused long call (models/fused.py): where the model's attention is plain scaled-dot-product attention, one
flash-attention kernel gives the output and each row's log-sum-exp, equal to the model's own eager attention; soft-
capping, learned sinks and anything else keep the eager blocks (models/tiled.py), also when told the call is plain."""

from __future__ import annotations

import pytest
import torch
from tile_models import KINDS, TOL, _batch, _eager_pass, _model, _tiled_pass, last_call

from mha_viz import tiles
from mha_viz.models import fused

PLAIN = {"llama", "mistral", "bert", "gemma2_plain"}  # gemma2 with no soft-cap: its own query scaling, plain softmax
KINDS_HERE = {**KINDS, "gemma2_plain": ({**KINDS["gemma2"][0], "attn_logit_softcapping": None}, torch.float32)}


def _kind_model(kind: str) -> torch.nn.Module:
    if kind != "gemma2_plain":
        return _model(kind)
    import transformers

    cfg, dtype = KINDS_HERE[kind]
    config = transformers.AutoConfig.for_model("gemma2", **cfg)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").to(dtype).eval()


def _mask(call) -> torch.Tensor | None:
    """The additive mask the eager function was given, rebuilt from the record. Shapes: [b, 1, n, n_k]."""
    if call.allowed is None:
        return None
    add = torch.zeros(call.allowed.shape) if call.bias is None else call.bias
    return torch.where(call.allowed, add, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("kind", sorted(KINDS_HERE))
def test_the_fused_path_is_taken_exactly_where_attention_is_plain(kind: str) -> None:
    model = _kind_model(kind)
    ids, mask = _batch(96)
    ids, mask = ids[:1], mask[:1]
    theirs = _eager_pass(model, ids, mask)
    ours, calls = _tiled_pass(model, ids, mask, block=4 * 96 * 10)  # blocks of 10 query rows
    for mine, want in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert float((mine - want).abs().max()) <= TOL
    assert [c.fused for c in calls] == [kind in PLAIN] * len(calls)  # soft-capping and sinks: never fused
    for call, weights in zip(calls, theirs.attentions, strict=True):
        assert call.delta <= TOL
        rebuilt = tiles.window_weights(call.q, call.k, call.row_lse, call.scaling, call.softcap, call.bias,
                                       call.allowed, call.sink is not None, call.k.shape[-2])  # fmt: skip
        assert float((rebuilt - weights.float()).abs().max()) <= TOL


@pytest.mark.parametrize("kind", sorted(PLAIN))
def test_fused_output_and_lse_equal_eager(kind: str) -> None:
    """One layer's call fused directly: its output equals the model's eager output and its lse the log-sum-exp of the
    eager scores, on every row (not only the check rows)."""
    model = _kind_model(kind)
    call, module, eager = last_call(model)  # untiled: the call's q, k, v, mask
    add = _mask(call)
    named = {"scaling": call.scaling, "dropout": 0.0}
    got = fused.fused_call(eager, module, call.q, call.k, call.v, add, (), named, named, 4 * 96 * 10, True, 2, 0)
    assert got is not None and got.fused
    want, _ = eager(module, call.q, call.k, call.v, add, **named)  # [b, n, h, d]
    assert float((got.out - want).abs().max()) <= TOL
    lse = tiles.row_lse(call.q, call.k, call.scaling, None, call.bias, call.allowed)  # [b, h, n] float64
    assert float((got.lse - lse).abs().max()) <= TOL


@pytest.mark.parametrize("kind", ["gemma2", "gpt_oss"])
def test_soft_capping_and_sinks_fall_back_even_when_called_plain(kind: str) -> None:
    """The recogniser refuses them; and were it fooled (the soft-cap or sink left out of what it is told), the check
    rows' eager output disagrees and the call still goes to the eager blocks (None)."""
    model = _model(kind)
    call, module, eager = last_call(model)  # untiled: the call's q, k, v, mask
    q, k, v = (t.to(next(model.parameters()).dtype) for t in (call.q, call.k, call.v))
    add = _mask(call)
    add = None if add is None else add.to(q.dtype)
    told = {"scaling": call.scaling, "dropout": 0.0}
    real = {**told, "softcap": call.softcap} if kind == "gemma2" else {**told, "s_aux": module.sinks}
    assert fused.plain_scale(eager, module, real, {}, q.shape[-1]) is None
    assert fused.fused_call(eager, module, q, k, v, add, (), real, real, 4 * 96 * 10, True, 2, 0) is None
    if kind == "gpt_oss":  # its eager function reads module.sinks itself: not a plain source
        assert not fused.is_plain(eager)
        fused._KNOWN[eager] = True  # fooled: the recogniser says plain
    try:
        # gemma2: the soft-cap reaches its eager function as a positional argument the recogniser is not told of
        given, kw = ((0.0, call.scaling, call.softcap), {}) if kind == "gemma2" else ((), told)
        big = q * 20 if kind == "gemma2" else q  # scores large enough for the soft-cap to bite
        fooled = fused.fused_call(eager, module, big, k, v, add, given, kw, told, 4 * 96 * 10, True, 2, 0)
    finally:
        fused._KNOWN.pop(eager, None)
    assert fooled is None
