"""The KV cache lens (studies/kv_lens.py) on the bundled SmolLM2 (9 query heads sharing 3 K/V heads) and a tiny
LLaMA: a whole budget changes nothing, the masked pass equals the model run with a truly compacted transformers
cache holding only the kept keys, per K/V head, and the continuation's weights equal the model's own
output_attentions; CacheMask and the restore map against a hand-built KeyMask."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import _tiny_tokenizer
from mha_viz.config import MATCH_TOL
from mha_viz.models.interventions import CacheMask, KeyMask
from mha_viz.models.load import prepare
from mha_viz.studies import kv_lens
from mha_viz.trace import MhaVizError

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

TEXT = "Alice gave the key to Bob because Bob had lost his own key. Later Bob opened the door with the key"


@pytest.fixture(scope="module")
def smol(smollm2):
    return smollm2, kv_lens.prefill(smollm2, TEXT)


def test_a_whole_budget_changes_nothing(smol) -> None:
    lm, pre = smol
    point = kv_lens.evaluate(lm, pre, "snapkv", 1.0)
    assert point.kl == 0.0 and point.loss_change == 0.0 and point.lost_mass == 0.0
    assert point.top_before == point.top_after
    everything = np.ones((pre.shape[0], lm.n_kv_heads, pre.prefix), dtype=bool)
    steps = [CacheMask(pre.part, la, torch.ones(9, pre.prefix, dtype=torch.bool), start=pre.prefix) for la in range(30)]
    assert kv_lens.measure(lm, pre, *steps)[1] == pre.loss  # the mask path itself, all kept: bit for bit
    assert kv_lens.kv_bytes(pre, everything) == 2 * 30 * 3 * 64 * pre.prefix * 4


def test_masked_pass_equals_a_compacted_real_cache(smol) -> None:
    """H2O keeps a different set per K/V head, the same count: the transformers cache of the prefix, cut per head to
    the kept keys (gather), then the continuation run on it at its own positions."""
    lm, pre = smol
    point = kv_lens.evaluate(lm, pre, "h2o", 0.5)
    keep, p, ids = point.keep, pre.prefix, pre.ids
    assert point.loss_change != 0.0 and (keep.sum(-1) == round(0.5 * p)).all()
    with torch.no_grad():
        out = lm.model(input_ids=ids[:, :p], use_cache=True)
        cache = out.past_key_values
        for la, layer in enumerate(cache.layers):
            idx = torch.from_numpy(np.stack([np.flatnonzero(k) for k in keep[la]]))  # [kv, B]
            gather = idx[None, :, :, None].expand(1, -1, -1, layer.keys.shape[-1])
            layer.keys, layer.values = layer.keys.gather(2, gather), layer.values.gather(2, gather)
        rest = lm.model(input_ids=ids[:, p:], past_key_values=cache, position_ids=torch.arange(p, ids.shape[1])[None])
    logits = torch.cat([out.logits[0, -1:], rest.logits[0]]).double()  # [n - P + 1, vocab]
    logp = logits.log_softmax(-1)
    loss = -logp[:-1].gather(1, ids[0, p:, None]).mean()
    assert abs(float(loss) - (pre.loss + point.loss_change)) < MATCH_TOL
    after = torch.tensor([v for _, v in point.top_after])
    assert torch.allclose(logp[-1].exp().topk(5).values.float(), after.float(), atol=MATCH_TOL)


def test_continuation_weights_and_lost_mass_are_the_models_own(smol) -> None:
    lm, pre = smol
    with torch.no_grad():
        att = lm.model(input_ids=pre.ids, output_attentions=True, use_cache=False).attentions  # L × [1, H, n, n]
    p = pre.prefix
    own = np.stack([a[0, :, p:, :p].double().mean(1).numpy() for a in att])  # [L, H, P]
    assert np.abs(own - pre.cont).max() < MATCH_TOL
    keep = kv_lens.kvp.keep_mask("streaming", pre.stats, 0.25)
    group = np.repeat(keep, 3, axis=1)  # query head h reads K/V head h // 3
    assert np.abs(kv_lens.lost_mass(pre, keep) - (own * ~group).sum(-1)).max() < MATCH_TOL


@pytest.fixture(scope="module")
def tiny_llama():
    from zoo import build

    lm = prepare(build("llama"), _tiny_tokenizer(), "tiny-llama")
    return lm, kv_lens.prefill(lm, "The animal didn't cross the street because it was too tired", 0.6)


def test_cache_mask_equals_a_hand_built_key_mask_and_restoring(tiny_llama) -> None:
    lm, pre = tiny_llama
    L, H, p = pre.shape
    n, kv = pre.ids.shape[1], lm.n_kv_heads
    keep = kv_lens.kvp.keep_mask("h2o", pre.stats, 0.4)  # [L, kv, P]
    full = torch.ones(L, H, n, n, dtype=torch.bool)  # by hand: rows ≥ P lose the evicted prefix keys of their group
    for la in range(L):
        for h in range(H):
            full[la, h, p:, :p] = torch.from_numpy(keep[la, h // (H // kv)])
    by_hand = [KeyMask(pre.part, la, full[la][None]) for la in range(L)]
    _, loss = kv_lens.measure(lm, pre, *by_hand)
    got = kv_lens.evaluate(lm, pre, "h2o", 0.4)
    assert abs(got.loss_change + pre.loss - loss) < 1e-6 and got.loss_change != 0.0
    restored = kv_lens.restore_map(lm, pre, keep)  # [L, kv]
    one = full.clone()
    one[0, : H // kv, p:, :p] = True  # layer 0, K/V head 0 restored: its query heads 0 … H/kv - 1 read everything
    _, loss_0 = kv_lens.measure(lm, pre, *(KeyMask(pre.part, la, one[la][None]) for la in range(L)))
    assert restored.shape == (L, kv) and abs(restored[0, 0] - (loss - loss_0)) < 1e-6
    assert (restored[~(~keep).any(-1)] == 0).all()


def test_bad_input_is_refused(smol, minilm) -> None:
    lm, _ = smol
    with pytest.raises(MhaVizError, match="at least 4 tokens"):
        kv_lens.prefill(lm, "Hi")
    with pytest.raises(MhaVizError, match="between 0 and 1"):
        kv_lens.prefill(lm, TEXT, 1.5)
    with pytest.raises(MhaVizError, match="causal language model"):
        kv_lens.prefill(minilm, TEXT)


@pytest.mark.slow  # minutes of SmolLM2 passes on two cores: outside --fast, in the full suite
def test_the_cli_writes_what_the_study_finds(smol, tmp_path, capsys) -> None:
    from mha_viz.cli.main import main

    lm, pre = smol
    out, heads = tmp_path / "kv.csv", tmp_path / "heads.csv"
    argv = ["kv", "--text", TEXT, "--policy", "tova", "--budget", "0.5", "--device", "cpu", "--out", str(out)]
    assert main([*argv, "--heads-out", str(heads)]) == 0
    want = kv_lens.evaluate(lm, pre, "tova", 0.5)
    rows = [line.split(",") for line in out.read_text().splitlines()]
    assert rows[0] == ["policy", "budget", "kv_bytes", "kl", "loss_change", "lost_mass"]
    got = dict(zip(rows[0], rows[1], strict=True))
    assert got["policy"] == "tova" and int(got["kv_bytes"]) == want.kv_bytes
    for key in ("kl", "loss_change", "lost_mass"):
        assert abs(float(got[key]) - getattr(want, key)) < 1e-5
    per_head = [line.split(",") for line in heads.read_text().splitlines()[1:]]
    assert len(per_head) == 30 * 3 and any(float(r[2]) != 0.0 for r in per_head)
    assert "top-5 after" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--budget", "0"], "--budget is a share"),
        (["--prefix-share", "1"], "--prefix-share is between"),
        (["--policy", "lru"], "invalid choice"),
        (["--out", "kv.txt"], "--out must name a .csv"),
    ],
)
def test_the_cli_refuses_bad_input_in_one_line(argv: list[str], message: str, tmp_path, capsys) -> None:
    from mha_viz.cli.main import main

    base = {"--text": TEXT, "--out": str(tmp_path / "kv.csv"), "--budget": "0.25"}
    given = dict(zip(argv[::2], argv[1::2], strict=True))
    args = [x for k, v in {**base, **given}.items() for x in (k, v)]
    assert main(["kv", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_missing_text_file_is_one_line(tmp_path, capsys) -> None:
    from mha_viz.cli.main import main

    assert main(["kv", "--text-file", str(tmp_path / "none.txt"), "--out", str(tmp_path / "kv.csv")]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
