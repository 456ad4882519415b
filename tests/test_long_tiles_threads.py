"""A fused long call's many small operations (the check rows against the model's eager attention, the mask's causality
check) run on one thread, the caller's count given back after, and the CPU's flash kernel reads GQA's K/V heads as they
are (no repeated copy), its output still the model's eager attention's (models/fused.py, runtime.threads.one_thread)."""

from __future__ import annotations

import pytest
import torch
from tile_models import TOL, _batch, _eager_pass, _model, _tiled_pass, last_call

from mha_viz.models import fused


@pytest.fixture
def two_threads():
    """torch on two threads for the test (a thread hand-over to avoid), its count put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_check_rows_run_on_one_thread_and_the_kernel_reads_gqa_heads_as_they_are(monkeypatch, two_threads) -> None:
    model = _model("llama")  # GQA (fewer K/V heads than query heads) with rotary embeddings
    seen: dict[str, list] = {"check": [], "causal": [], "kv_heads": []}
    check_span, causal_once, flash = fused.check_span, fused.causal_once, fused._flash

    def check_spy(*args, **kwargs):
        seen["check"].append(torch.get_num_threads())
        return check_span(*args, **kwargs)

    def causal_spy(*args, **kwargs):
        seen["causal"].append(torch.get_num_threads())
        return causal_once(*args, **kwargs)

    def flash_spy(q, k, v, *args, **kwargs):
        seen["kv_heads"].append((q.shape[1], k.shape[1], v.shape[1]))
        return flash(q, k, v, *args, **kwargs)

    monkeypatch.setattr(fused, "check_span", check_spy)  # observed, then run as is
    monkeypatch.setattr(fused, "causal_once", causal_spy)
    monkeypatch.setattr(fused, "_flash", flash_spy)
    ids, mask = _batch(96)
    ids, mask = ids[:1], mask[:1]  # one whole text: an exactly causal mask, one kernel call per layer
    theirs = _eager_pass(model, ids, mask)
    ours, calls = _tiled_pass(model, ids, mask, block=4 * 96 * 10)
    assert calls and all(c.fused for c in calls)
    assert seen["check"] == [1] * len(calls) and seen["causal"] == [1] * len(calls)
    assert torch.get_num_threads() == 2  # the caller's count is back
    h, kv = model.config.num_attention_heads, model.config.num_key_value_heads
    assert kv < h and seen["kv_heads"] == [(h, kv, kv)] * len(calls)
    for mine, want in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert float((mine - want).abs().max()) <= TOL
    assert max(c.delta for c in calls) <= TOL


def test_blocks_with_their_own_mask_read_gqa_heads_as_they_are(monkeypatch, two_threads) -> None:
    """A sliding window shorter than the text (not exactly causal): one kernel call per block of rows with that block's
    mask and keys, GQA's K/V heads as they are; every hidden state within TOL of the model's eager pass."""
    model = _model("mistral")  # GQA and a sliding window of 24 over 96 tokens
    kv_heads, flash = [], fused._flash

    def flash_spy(q, k, v, mask, *args, **kwargs):
        kv_heads.append((q.shape[1], k.shape[1], mask is not None))
        return flash(q, k, v, mask, *args, **kwargs)

    monkeypatch.setattr(fused, "_flash", flash_spy)
    ids, mask = _batch(96)
    theirs = _eager_pass(model, ids[:1], mask[:1])
    ours, calls = _tiled_pass(model, ids[:1], mask[:1], block=4 * 96 * 10)  # blocks of 10 query rows
    assert calls and all(c.fused for c in calls)
    h, kv = model.config.num_attention_heads, model.config.num_key_value_heads
    assert len(kv_heads) == 10 * len(calls) and set(kv_heads) == {(h, kv, True)}
    for mine, want in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert float((mine - want).abs().max()) <= TOL
    assert max(c.delta for c in calls) <= TOL and torch.get_num_threads() == 2


def test_a_call_nothing_records_still_checks_its_output_against_eager(monkeypatch) -> None:
    """A layer before the shown one (keep False): its check rows' output is still compared with the model's eager
    attention (a call wrongly taken for plain falls back), but the weights' self-check, which nothing would keep, is
    not computed."""
    from mha_viz.models import tiled

    checked, check = [], tiled._check

    def check_spy(*args, **kwargs):
        checked.append(1)
        return check(*args, **kwargs)

    monkeypatch.setattr(tiled, "_check", check_spy)
    for kind in ("llama", "gpt_oss"):
        model = _model(kind)
        call, module, eager = last_call(model)  # untiled: the call's q, k, v, mask
        add = torch.where(call.allowed, 0.0, torch.finfo(torch.float32).min)  # the additive causal mask [1, 1, n, n]
        told = {"scaling": call.scaling, "dropout": 0.0}
        if kind == "gpt_oss":
            fused._KNOWN[eager] = True  # fooled: its eager function (learned sinks) taken for plain
        try:
            got = fused.fused_call(eager, module, call.q, call.k, call.v, add, (), told, told, 4 * 96 * 10, False, 2)
        finally:
            fused._KNOWN.pop(eager, None)
        if kind == "llama":
            want, _ = eager(module, call.q, call.k, call.v, add, **told)
            assert got is not None and got.fused and float((got.out - want).abs().max()) <= TOL and got.lse is None
            assert not checked  # nothing recorded: no weights' self-check
            kept = fused.fused_call(eager, module, call.q, call.k, call.v, add, (), told, told, 4 * 96 * 10, True, 2)
            assert kept is not None and checked and kept.delta <= TOL  # recorded: the self-check runs
        else:
            assert got is None  # the output check caught it: the eager blocks run it
