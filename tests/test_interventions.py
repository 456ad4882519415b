"""The intervention classes (mha_viz/models/interventions.py, issue 36 §1): each one's pre/mask/post on tiny
tensors against a hand computation, the stage order whatever order they are given in, a per-head key mask through
a real attention module's own eager attention, and pipeline.run with typed interventions: every kind in one pass
in any order on tiny models, and ablation against a forward pre-hook on W^O on the bundled MiniLM and SmolLM2."""

from __future__ import annotations

import pytest
import torch

from conftest import SENTENCE, tiny_model
from mha_viz.models.capture import Recorder, mha_viz_attention, recording
from mha_viz.pipeline import Ablate, HeadMask, KeyMask, Replace, Rotate, Route, ShareKV, plan_of, run
from mha_viz.trace import MhaVizError

G = torch.Generator().manual_seed(0)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=G, dtype=torch.float64)


def _orthogonal(n: int, d: int) -> torch.Tensor:
    return torch.linalg.qr(_r(n, d, d))[0]  # [n, d, d]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain softmax attention with K/V heads repeated for their query heads. q [b, h, q, dh]; k, v [b, kv, k, dh]
    -> out [b, q, h, dh] (transformers' layout)."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)  # [b, h, k, dh]
    w = torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1)  # [b, h, q, k]
    return (w @ v).transpose(1, 2)  # [b, q, h, dh]


def test_stage_order_holds_whatever_order_they_are_given_in() -> None:
    out = torch.ones(1, 2, 3, 2)
    steps = [
        Replace("encoder", 0, "out", torch.full_like(out, 5.0), out.bool()),
        Route("encoder", 0, lambda z: torch.full(z.shape[:3], 2.0)),
        HeadMask("encoder", 0, torch.full((2, 3), 3.0)),
        Ablate("encoder", 0, (1,)),
        KeyMask("encoder", 0, torch.ones(3, 4, dtype=torch.bool)),
        ShareKV("encoder", 0, ((0, 1),)),
        Rotate("encoder", 0, torch.eye(2)[None], torch.eye(2)[None]),
        Ablate("encoder", 1, (0,)),
    ]
    plan = plan_of(steps)
    assert [type(s) for s in plan[("encoder", 0)]] == [Rotate, ShareKV, KeyMask, Ablate, HeadMask, Route, Replace]
    assert plan[("encoder", 1)] == (steps[-1],)
    assert plan_of(reversed(steps))[("encoder", 0)] == plan[("encoder", 0)]
    z = out
    for s in plan[("encoder", 0)][:-1]:
        z = s.post(z)
    assert z[0, :, 1].abs().sum() == 0 and torch.all(z[0, :, [0, 2]] == 6.0)  # ablated, then × 3 × 2
    assert torch.all(plan[("encoder", 0)][-1].post(z) == 5.0)  # the replacement comes last


def test_rotate_leaves_scores_and_output_unchanged() -> None:
    q, k, v = _r(1, 4, 5, 3), _r(1, 2, 6, 3), _r(1, 2, 6, 3)  # 4 query heads on 2 K/V heads
    rot = Rotate("decoder", 0, _orthogonal(2, 3), _orthogonal(2, 3))
    rq, rk, rv = rot.pre(q, k, v)
    assert not torch.allclose(rk, k) and not torch.allclose(rv, v)
    torch.testing.assert_close(rq @ rk.repeat_interleave(2, 1).transpose(-1, -2), q @ k.repeat_interleave(2, 1).mT)
    torch.testing.assert_close(rot.post(_attend(rq, rk, rv)), _attend(q, k, v))


def test_share_kv_pools_each_group_and_nothing_else() -> None:
    q, k, v = _r(1, 6, 4, 2), _r(1, 3, 4, 2), _r(1, 3, 4, 2)
    q2, k2, v2 = ShareKV("decoder", 1, ((0, 2),)).pre(q, k, v)
    assert q2 is q
    for t, t2 in ((k, k2), (v, v2)):
        torch.testing.assert_close(t2[:, 0], (t[:, 0] + t[:, 2]) / 2)
        torch.testing.assert_close(t2[:, 2], t2[:, 0])
        assert torch.equal(t2[:, 1], t[:, 1])


def test_replace_puts_values_only_where_asked() -> None:
    q, k, v = _r(1, 2, 3, 2), _r(1, 2, 3, 2), _r(1, 2, 3, 2)
    where = torch.zeros(1, 2, 1, 1, dtype=torch.bool)
    where[0, 1] = True  # head 1 only
    q2, k2, v2 = Replace("encoder", 0, "k", torch.zeros(1, 2, 3, 2), where).pre(q, k, v)
    assert q2 is q and v2 is v and torch.equal(k2[:, 0], k[:, 0]) and k2[:, 1].abs().sum() == 0
    added = Replace("encoder", 0, "v", torch.ones(1, 2, 3, 2)).pre(q, k, v)[2]
    torch.testing.assert_close(added, v + 1)
    out = _r(1, 3, 2, 2)
    assert Replace("encoder", 0, "q", q).post(out) is out  # a q/k/v replacement does nothing after attention
    torch.testing.assert_close(Replace("encoder", 0, "out", torch.ones_like(out)).post(out), out + 1)
    assert Replace("encoder", 0, "out", out).pre(q, k, v) == (q, k, v)


def test_ablate_head_mask_and_route_act_on_the_heads_into_wo() -> None:
    out = _r(2, 3, 4, 2)  # [b, q, h, dh]
    cut = Ablate("encoder", 0, (3, 1)).post(out)
    assert cut[:, :, [1, 3]].abs().sum() == 0 and torch.equal(cut[:, :, [0, 2]], out[:, :, [0, 2]])
    assert out[:, :, 1].abs().sum() > 0  # the input is not changed in place
    keep = (torch.rand(3, 4, generator=G) > 0.5).double()  # [q, h]
    torch.testing.assert_close(HeadMask("encoder", 0, keep).post(out), out * keep[None, :, :, None])
    gate = torch.rand(2, 3, 4, generator=G, dtype=torch.float64)  # [b, q, h]
    torch.testing.assert_close(Route("encoder", 0, lambda z: gate).post(out), out * gate[..., None])
    assert Route("encoder", 0, lambda z: None).post(out) is out


def test_key_mask_drops_keys_per_head_in_the_mask() -> None:
    q, k = _r(2, 3, 4, 2), _r(2, 3, 5, 2)
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[1, [0, 3]] = False  # head 1 does not read keys 0 and 3
    low = torch.finfo(q.dtype).min
    causal = torch.zeros(2, 1, 4, 6, dtype=q.dtype).masked_fill(torch.ones(4, 6).triu(1).bool(), low)  # longer
    for base in (None, causal, causal == 0):
        m = KeyMask("encoder", 0, keep).mask(base, q, k)
        assert m.shape[1:] == (3, 4, 5) and torch.all(m[:, 1, :, [0, 3]] == low)
        plain = torch.zeros(1, 1, 4, 5, dtype=q.dtype) if base is None else causal[..., :5]
        assert torch.equal(m[:, [0, 2]], plain.expand(m.shape[0], 2, 4, 5))
        assert torch.equal(m[:, 1, :, [1, 2, 4]], plain.expand(m.shape[0], 1, 4, 5)[:, 0, :, [1, 2, 4]])


@pytest.fixture(scope="module", params=["bert", "llama"])
def tiny(request):
    return tiny_model(request.param)


def test_key_mask_through_the_models_own_attention(tiny) -> None:
    """A real attention module's eager attention with a KeyMask: the head's weights on the dropped keys are 0 and
    the rest are the softmax over the kept keys alone (by hand); the other heads are as without the mask."""
    site = tiny.sites[0]
    module = tiny.model.get_submodule(site.name)
    h, kv, n = tiny.n_heads, tiny.n_kv_heads, 6
    dh = tiny.d_model // h
    q, k, v = (_r(1, h, n, dh).float(), _r(1, kv, n, dh).float(), _r(1, kv, n, dh).float())
    keep = torch.ones(h, n, dtype=torch.bool)
    keep[1, [0, 2, 5]] = False
    rec = Recorder(parts={id(module): site.part}, plan=plan_of([KeyMask(site.part, site.layer, keep)]), keep=False)
    with recording(rec):
        _, w = mha_viz_attention(module, q, k, v, None, scaling=dh**-0.5, dropout=0.0)
    _, plain = mha_viz_attention(module, q, k, v, None, scaling=dh**-0.5, dropout=0.0)  # no recorder: the model
    scores = q[0, 1] @ k[0, 1 // (h // kv)].T * dh**-0.5  # [q, k] head 1
    hand = torch.zeros(n, n)
    hand[:, [1, 3, 4]] = torch.softmax(scores[:, [1, 3, 4]], dim=-1)
    assert torch.all(w[0, 1, :, [0, 2, 5]] == 0)
    torch.testing.assert_close(w[0, 1], hand, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w[0, [0, *range(2, h)]], plain[0, [0, *range(2, h)]])


def test_key_mask_is_recorded_as_the_mask_the_model_used(tiny) -> None:
    part = tiny.parts[0]
    ids = torch.tensor([tiny.tokenizer(SENTENCE)["input_ids"]])  # [1, pos]
    keep = torch.ones(tiny.n_heads, ids.shape[1], dtype=torch.bool)
    keep[0, 1:3] = False
    call = run(tiny, ids, KeyMask(part, 1, keep), only=(part, 1)).calls[(part, 1)]
    assert call.delta <= 1e-5  # our recomputation from the record matches the model's own weights
    assert not call.allowed[0, 0, :, 1:3].any() and call.allowed[0, 1, :, 0].all()
    plain = run(tiny, ids, record=False)
    masked = run(tiny, ids, KeyMask(part, 1, keep), record=False)
    out = lambda r: r.logits if r.logits is not None else r.hidden
    assert (out(masked) - out(plain)).abs().max() > 1e-4


def test_every_kind_in_one_pass_whatever_order_they_are_given_in(tiny) -> None:
    """Every kind of intervention in one pass, given in reverse stage order and shuffled: the same output, and
    different from the model's own (the interventions act)."""
    part = tiny.parts[0]
    ids = torch.tensor([tiny.tokenizer(SENTENCE)["input_ids"]])
    pos, h, kv = ids.shape[1], tiny.n_heads, tiny.n_kv_heads
    dh = tiny.d_model // h
    r_k, r_v = _orthogonal(kv, dh).float(), _orthogonal(kv, dh).float()
    mask = (torch.rand(pos, h, generator=G) > 0.3).float()
    new_v = torch.zeros(1, kv, pos, dh)

    def gate(p: str, la: int, z: torch.Tensor) -> torch.Tensor:  # [b, q, h, dh] -> [b, q, h]
        return (z.norm(dim=-1) > z.norm(dim=-1).median()).float()

    routes = [Route(s.part, s.layer, lambda z, s=s: gate(s.part, s.layer, z)) for s in tiny.sites]
    steps = [Replace(part, 1, "v", new_v), *routes, HeadMask(part, 1, mask), Ablate(part, 0, (1,)),
             ShareKV(part, 0, ((0, 1),)), Rotate(part, 0, r_k, r_v)]  # fmt: skip
    new = run(tiny, ids, *steps, record=False)
    order = torch.randperm(len(steps), generator=torch.Generator().manual_seed(1)).tolist()
    assert torch.equal(new.hidden, run(tiny, ids, *(steps[i] for i in order), record=False).hidden)
    plain = run(tiny, ids, record=False)
    assert (new.hidden - plain.hidden).abs().max() > 1e-4  # the interventions did something


def test_bad_interventions_are_refused_with_a_message(minilm) -> None:
    ids = torch.tensor([minilm.tokenizer(SENTENCE)["input_ids"]])
    with pytest.raises(MhaVizError, match="head 12 does not exist"):
        run(minilm, ids, Ablate("encoder", 0, (12,)), record=False)
    with pytest.raises(MhaVizError, match="cannot be replaced"):
        run(minilm, ids, Replace("encoder", 0, "x", torch.zeros(1)), record=False)
    with pytest.raises(MhaVizError, match="key mask"):
        run(minilm, ids, KeyMask("encoder", 0, torch.ones(3, dtype=torch.bool)), record=False)


def _hooked(lm, ids: torch.Tensor, heads: dict[tuple[str, int], list[int]]):
    """The model's own output with ``heads`` zeroed on their way into W^O by forward pre-hooks on its W^O (nothing of
    mha_viz's capture), removed afterwards (hooks, not a deep copy: copying SmolLM2's 540 MB cost more than its three
    passes). Shapes: ids [1, pos]; returns the model's output (last_hidden_state or logits)."""
    dh = lm.d_model // lm.n_heads
    handles = []
    for (part, layer), hs in heads.items():

        def pre(_mod, args, hs=hs):
            x = args[0].clone()  # [b, pos, h * dh]
            for h in hs:
                x[..., h * dh : (h + 1) * dh] = 0
            return (x, *args[1:])

        handles.append(lm.model.get_submodule(lm.site(part, layer).wo).register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            return lm.model(input_ids=ids, **({"use_cache": False} if lm.causal_lm else {}))
    finally:
        for handle in handles:
            handle.remove()


def test_ablation_through_the_door_equals_a_hook_on_wo_on_minilm(minilm) -> None:
    ids = torch.tensor([minilm.tokenizer(SENTENCE)["input_ids"]])
    new = run(minilm, ids, Ablate("encoder", 5, (0,)), Ablate("encoder", 2, (3, 1)))
    ref = _hooked(minilm, ids, {("encoder", 2): [1, 3], ("encoder", 5): [0]}).last_hidden_state
    torch.testing.assert_close(new.hidden, ref, atol=1e-5, rtol=0)
    assert new.calls[("encoder", 2)].wo_in[0].reshape(ids.shape[1], 12, -1)[:, [1, 3]].abs().sum() == 0
    assert not torch.equal(new.hidden, run(minilm, ids, record=False).hidden)


def test_ablation_through_the_door_equals_a_hook_on_wo_on_smollm2(smollm2) -> None:
    lm = smollm2
    ids = torch.tensor([lm.tokenizer(SENTENCE)["input_ids"]])
    new = run(lm, ids, Ablate("decoder", 3, (2, 7)), record=False)
    ref = _hooked(lm, ids, {("decoder", 3): [2, 7]}).logits.float()
    torch.testing.assert_close(new.logits, ref, atol=1e-4, rtol=1e-4)
    assert not torch.equal(new.logits, run(lm, ids, record=False).logits)
