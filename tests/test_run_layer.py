"""One layer recorded alone (run_layer): the same values as a whole recorded pass and as the eager model's
output_attentions, the pass ended after that layer, and the blockwise self-check catching a wrong pattern."""

from __future__ import annotations

import pytest
import torch
import transformers as tf
from references import id_tokens, reference

from conftest import SENTENCE
from mha_viz.attention import attention_pattern
from mha_viz.config import Config
from mha_viz.models import self_check
from mha_viz.models.load import LoadedModel, prepare
from mha_viz.models.run import run_layer, run_model
from mha_viz.models.sources import bundled_model_dir
from mha_viz.pipeline.road import Recording, layer_trace
from mha_viz.trace import MhaVizError
from zoo import build


def test_one_layer_equals_the_whole_pass_and_eager_attentions(minilm: LoadedModel) -> None:
    ids = torch.tensor([minilm.tokenizer(SENTENCE)["input_ids"]])
    whole = run_model(minilm, ids)
    eager = tf.AutoModel.from_pretrained(bundled_model_dir(), attn_implementation="eager").eval()
    attn, wo_out = reference(eager, minilm, {"input_ids": ids})
    for layer in (0, 3, 5):
        one = run_layer(minilm, ids, "encoder", layer)
        assert list(one.calls) == [("encoder", layer)]
        call, ref = one.calls[("encoder", layer)], whole.calls[("encoder", layer)]
        for name in ("q", "k", "v", "x", "wo_in", "wo_out"):
            assert torch.equal(getattr(call, name), getattr(ref, name)), (layer, name)
        assert call.delta == ref.delta <= 1e-6
        rec = Recording(id_tokens(ids[0].tolist()), None, one)
        t = layer_trace(minilm, rec, "encoder", layer, Config())
        assert (t.pattern - attn[("encoder", layer)][0]).abs().max().item() <= 1e-6
        assert (t.output - wo_out[("encoder", layer)][0]).abs().max().item() <= 1e-5


def test_the_pass_stops_after_the_layer(minilm: LoadedModel) -> None:
    """Layers after the recorded one never run (that is where the time and memory of long texts go)."""
    ran: list[int] = []
    handles = [
        minilm.model.get_submodule(s.name).register_forward_pre_hook(lambda *_a, i=s.layer: ran.append(i))
        for s in minilm.sites
    ]
    try:
        run_layer(minilm, torch.tensor([minilm.tokenizer(SENTENCE)["input_ids"]]), "encoder", 2)
    finally:
        for h in handles:
            h.remove()
    assert ran == [0, 1, 2]


def test_rotary_gqa_decoder_layer_alone() -> None:
    lm = prepare(build("llama"), None, "llama")
    ids = torch.randint(3, 120, (1, 12), generator=torch.Generator().manual_seed(5))
    whole = run_model(lm, ids).calls[("decoder", 1)]
    one = run_layer(lm, ids, "decoder", 1).calls[("decoder", 1)]
    for name in ("q", "k", "v", "x", "q_pre", "k_pre", "wo_out", "allowed"):
        assert torch.equal(getattr(one, name), getattr(whole, name)), name


def test_blockwise_self_check_sees_one_wrong_row(monkeypatch, minilm: LoadedModel) -> None:
    """The self-check compares every row even in small blocks: one changed weight in the last block shows."""
    monkeypatch.setattr(self_check, "CHECK_BLOCK", 12 * 20)  # 12 heads x 20 keys: one query row per block
    ids = torch.tensor([minilm.tokenizer(SENTENCE)["input_ids"]])  # 14 tokens
    call = run_layer(minilm, ids, "encoder", 1).calls[("encoder", 1)]
    _, pattern, _ = attention_pattern(call.q, call.k, scale=call.scaling, allowed=call.allowed)
    assert self_check.self_check(call, pattern) <= 1e-6  # row blocks round like the whole matrix, to float32
    wrong = pattern.clone()
    wrong[0, 7, -1, 3] += 0.25
    assert self_check.self_check(call, wrong) == pytest.approx(0.25, abs=1e-6)
    wrong[0, 2, 0, 0] = float("nan")
    assert self_check.self_check(call, wrong) != self_check.self_check(call, wrong)  # NaN is reported, not dropped


def test_layer_out_of_range_and_encoder_decoder_refused(minilm: LoadedModel, t5_dir: str) -> None:
    from mha_viz.models.load import load_model

    ids = torch.tensor([[101, 102]])
    with pytest.raises(MhaVizError, match="layer 6 does not exist"):
        run_layer(minilm, ids, "encoder", 6)
    with pytest.raises(MhaVizError, match="encoder-decoder"):
        run_layer(load_model(t5_dir), ids, "encoder", 0)


def test_progress_counts_every_attention_call(minilm: LoadedModel) -> None:
    """A long text's progress bar: told after each layer, recorded or not (run_layer's pass to layer 3: 1..4;
    a whole recording: 1..6 of 6)."""
    ids = torch.tensor([minilm.tokenizer(SENTENCE)["input_ids"]])
    seen: list[int] = []
    run_layer(minilm, ids, "encoder", 3, progress=seen.append)
    assert seen == [1, 2, 3, 4]
    told: list[tuple[int, int]] = []
    from mha_viz.pipeline.road import record

    record(minilm, SENTENCE, progress=lambda done, total: told.append((done, total)))
    assert told == [(k, 6) for k in range(1, 7)]
