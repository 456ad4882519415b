"""The masks of a long recording (mha_viz/models/masks.py): where a call is tiled, transformers' mask interface gives
mha-viz's attention a boolean mask (no dense [n, n] float mask, nor its float copy), the same allowed keys as the
eager float mask (causal, a sliding window, padding, an encoder), shared by every layer as Call.allowed; the model's
own eager function still gets eager_mask's additive float mask, block by block."""

from __future__ import annotations

import pytest
import torch
from tile_models import _batch, _model, _tiled_pass, last_call

from mha_viz.models import capture, masks


def _masks(model: torch.nn.Module, ids: torch.Tensor, attention_mask: torch.Tensor, rec: capture.Recorder | None):
    """The mask transformers builds for this model and text with mha-viz's implementation, in a recording or not."""
    from transformers import masking_utils

    capture.register()
    model.config._attn_implementation = capture.NAME
    embeds = model.get_input_embeddings()(ids)
    fn = masking_utils.create_bidirectional_mask if model.config.model_type == "bert" else None
    make = fn or (
        masking_utils.create_sliding_window_causal_mask
        if getattr(model.config, "sliding_window", None)
        else masking_utils.create_causal_mask
    )
    kw = {} if fn else {"past_key_values": None}
    try:
        if rec is None:
            return make(config=model.config, inputs_embeds=embeds, attention_mask=attention_mask, **kw)
        with capture.recording(rec):
            return make(config=model.config, inputs_embeds=embeds, attention_mask=attention_mask, **kw)
    finally:
        model.config._attn_implementation = "eager"


@pytest.mark.parametrize("kind", ["llama", "mistral", "bert"])
@pytest.mark.parametrize("padded", [False, True])
def test_a_long_recording_gets_a_boolean_mask_with_eagers_allowed_keys(kind: str, padded: bool) -> None:
    model = _model(kind)
    ids, mask = _batch(96)
    if not padded:
        ids, mask = ids[:1], mask[:1]
    eager = _masks(model, ids, mask, None)  # no recording: exactly eager_mask's float mask
    rec = capture.Recorder(extras=False, tile_block=4 * 96 * 10)
    long = _masks(model, ids, mask, rec)
    short = _masks(model, ids, mask, capture.Recorder(extras=False, tile_block=4 * 96 * 96))  # not tiled
    if eager is None:  # an encoder with no padding: no mask at all, either way
        assert long is None and short is None
        return
    assert eager.dtype == model.dtype and short.dtype == eager.dtype and torch.equal(short, eager)
    assert long.dtype == torch.bool and long.shape == eager.shape  # a quarter of the bytes, no float [n, n]
    assert torch.equal(long, eager > torch.finfo(eager.dtype).min / 2)  # the same keys allowed
    assert rec.bool_masks[masks.mask_key(long)][1] == model.dtype
    assert torch.equal(masks.additive(long, model.dtype), eager)  # what the eager function is given, exactly


def test_the_layers_of_a_long_causal_text_share_the_boolean_mask_as_their_allowed_keys() -> None:
    model = _model("llama")
    ids, mask = _batch(96)
    _, calls = _tiled_pass(model, ids[:1], mask[:1], block=4 * 96 * 10)
    first, second = (c.allowed for c in calls)
    assert first.dtype == torch.bool and first.data_ptr() == second.data_ptr()  # one mask, no per-layer copy
    n = ids.shape[1]
    assert torch.equal(first[0, 0], torch.ones(n, n, dtype=torch.bool).tril())  # causal, exactly
    assert all(c.fused for c in calls)  # a causal bool mask: one flash-attention kernel, checked against eager


def test_a_boolean_mask_that_is_not_mha_vizs_is_never_converted() -> None:
    """A bool mask the model itself hands its eager function (not one of ours) goes to it as it is, and the fused
    kernel refuses it (its eager function would read it as it is)."""
    model = _model("llama")
    call, module, eager = last_call(model)  # untiled: the call's q, k, v, mask
    from mha_viz.models import fused

    named = {"scaling": call.scaling, "dropout": 0.0}
    args = (eager, module, call.q, call.k, call.v, call.allowed, (), named, named, 4 * 96 * 10, True, 2)
    assert fused.fused_call(*args) is None
    wrapped = masks.converting(eager, torch.float32)
    assert wrapped is masks.converting(eager, torch.float32) and wrapped.__wrapped__ is eager
    got = fused.fused_call(wrapped, *args[1:])
    assert got is not None and got.fused
    want, _ = eager(module, call.q, call.k, call.v, masks.additive(call.allowed, torch.float32), **named)
    assert float((got.out - want).abs().max()) <= 1e-5
