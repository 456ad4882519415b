"""Models larger than one device (issue 26 §3): a model spread by transformers' device_map (accelerate) with part of
its layers offloaded to disk records exactly what the model loaded whole records — every layer's q, k, v, pattern
and W^O output (≤ 1e-6; measured: identical) — and the options that ask for it are checked before anything loads.
This machine has no GPU: the layers go to the CPU and to disk here (max_memory caps the CPU)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from conftest import SENTENCE
from mha_viz.cli.main import main
from mha_viz.config import Config
from mha_viz.errors import MhaVizError
from mha_viz.models import offload
from mha_viz.models.load import load_model
from mha_viz.models.placement import Placement, parse_max_memory, split, where
from mha_viz.models.projections import embedding_matrix
from mha_viz.models.run import token_embeddings
from mha_viz.models.sources import smollm2_ready
from mha_viz.models.unembed import head_rows
from mha_viz.pipeline.road import layer_trace, record

TOL = 1e-6


def _device(max_memory: str, folder: str = "") -> str:
    """The model device string of a placement with ``max_memory`` (as Config.model_device writes it)."""
    placement = Placement(max_memory=parse_max_memory(max_memory), offload_folder=folder)
    return Config(device="cpu", placement=placement.encode()).model_device


def _same_traces(whole, spread, text: str) -> None:
    """Every layer of ``spread`` records what ``whole`` records: q, k, v, pattern, head outputs, the output after
    W^O (ours and the model's own), W^O itself."""
    a, b = record(whole, text), record(spread, text)
    part = whole.part(None)
    for layer in range(whole.n_layers(part)):
        ta, tb = layer_trace(whole, a, part, layer, Config()), layer_trace(spread, b, part, layer, Config())
        for name in ("q", "k", "v", "pattern", "head_out", "output", "W_O"):
            diff = float((getattr(ta, name) - getattr(tb, name)).abs().max())
            assert diff <= TOL, (layer, name, diff)
        ca, cb = a.run.calls[(part, layer)], b.run.calls[(part, layer)]
        assert float((ca.wo_out - cb.wo_out).abs().max()) <= TOL, layer
        assert float((ca.x - cb.x).abs().max()) <= TOL, layer
    assert float((a.run.hidden - b.run.hidden).abs().max()) <= TOL


def test_max_memory_is_read_both_ways() -> None:
    pairs = (("0", "2GiB"), ("cpu", "1.5GB"))
    assert parse_max_memory("0=2GiB, CPU=1.5GB") == pairs
    assert parse_max_memory('{"0": "2GiB", "cpu": "1.5GB"}') == pairs
    p = Placement(max_memory=pairs, offload_folder="/tmp/off")
    assert p.kwargs() == {"device_map": "auto", "max_memory": {0: 2 * 2**30, "cpu": 1_500_000_000},
                          "offload_folder": "/tmp/off"}  # fmt: skip
    assert Placement.decode(p.encode()) == p
    assert parse_max_memory("cpu=2gb") == (("cpu", "2gb"),) and Placement(max_memory=(("cpu", "2gb"),)).kwargs()[
        "max_memory"
    ] == {"cpu": 2 * 10**9}  # bytes, not bits
    assert split(Config(device="cuda", placement=p.encode()).model_device) == ("cuda", p)
    assert split("cpu") == ("cpu", None)


@pytest.mark.parametrize(
    ("text", "says"),
    [("gpu0=1GiB", "not a device"), ("cpu=lots", "not a size"), ("cpu", "not DEVICE=SIZE"),
     ("[1]", "must be an object"), ('{"cpu": 1', "not valid JSON"), ("cpu=1GiB,cpu=2GiB", "twice")],
)  # fmt: skip
def test_bad_max_memory_is_refused(text: str, says: str) -> None:
    with pytest.raises(MhaVizError, match=says):
        parse_max_memory(text)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["roles", "--text", "a b", "--max-memory", "cpu=1GiB"], "need --device-map auto"),
        (["roles", "--text", "a b", "--offload-folder", "off"], "need --device-map auto"),
        (["roles", "--text", "a b", "--device-map", "auto", "--max-memory", "cpu=lots"], "not a size"),
        (["corpus", "--texts", "t.txt", "--out", "x.csv", "--device-map", "auto", "--max-memory", "x=1GiB"],
         "not a device"),
    ],
)  # fmt: skip
def test_cli_errors_are_one_line(argv: list[str], says: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("a text\n", encoding="utf-8")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_hosted_mode_takes_no_offload_folder(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    with pytest.raises(MhaVizError, match="does not take an offload folder"):
        load_model(None, _device("cpu=1GiB", str(tmp_path / "off")))
    assert not (tmp_path / "off").exists()


@pytest.mark.slow  # SmolLM2 twice, once spread to disk (MiniLM on disk below is the fast check)
@pytest.mark.skipif(not smollm2_ready(), reason="the bundled SmolLM2 is not converted (bash scripts/setup.sh)")
def test_smollm2_with_layers_on_disk_records_what_the_whole_model_records(smollm2) -> None:
    whole = smollm2  # the reference: the worker's session SmolLM2 (the same whole load on the CPU)
    spread = load_model("smollm2", _device("cpu=300MB"))  # ~540 MB of float32 weights: the later layers go to disk
    where = spread.device_map
    on_disk = [k for k, v in where.items() if v == "disk" and k.startswith("model.layers.")]
    assert where["model.layers.0"] == "cpu" and len(on_disk) >= 10, where
    assert any(p.device.type == "meta" for p in spread.model.parameters())  # really off the modules
    _same_traces(whole, spread, SENTENCE)
    a, b = record(whole, SENTENCE), record(spread, SENTENCE)
    assert float((a.run.logits - b.run.logits).abs().max()) <= TOL


def test_a_model_wholly_on_disk_reads_its_weights_and_serves_threads(minilm) -> None:
    spread = load_model(None, _device("cpu=1MB"))
    assert set(spread.device_map.values()) == {"disk"}
    assert all(p.device.type == "meta" for p in spread.model.parameters())
    _same_traces(minilm, spread, SENTENCE)
    assert torch.equal(embedding_matrix(minilm), embedding_matrix(spread))
    ids = record(minilm, SENTENCE).tokens.ids
    assert torch.equal(token_embeddings(minilm, ids, True), token_embeddings(spread, ids, True))
    # two sessions tracing the shared model at once: without the lock one pass's hook takes the weights off a
    # module the other is running ("Tensor on device cpu is not on the expected device meta")
    ref = record(spread, SENTENCE).run.hidden
    failures: list[str] = []

    def trace_a_few() -> None:
        for _ in range(4):
            try:
                if not torch.equal(record(spread, SENTENCE).run.hidden, ref):
                    failures.append("differs")
            except Exception as exc:  # any failure of a pass is the finding
                failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=trace_a_few) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


@pytest.mark.slow  # SmolLM2 loaded whole and with its LM head on disk (slow tier)
@pytest.mark.skipif(not smollm2_ready(), reason="the bundled SmolLM2 is not converted (bash scripts/setup.sh)")
def test_head_rows_of_an_offloaded_lm_head(smollm2) -> None:
    whole, spread = smollm2, load_model("smollm2", _device("cpu=1MB"))  # whole: the worker's session SmolLM2
    assert spread.device_map == {"": "disk"}
    for a, b in zip(head_rows(whole, [1, 5, 9]), head_rows(spread, [1, 5, 9]), strict=True):
        assert torch.equal(a, b)
    assert offload.tensor(spread.model.lm_head).shape == whole.model.lm_head.weight.shape


def test_corpus_cli_with_a_device_map_writes_the_same_file(tmp_path: Path, monkeypatch, capsys) -> None:
    from mha_viz.studies import corpus

    placed: list[dict | None] = []
    real = corpus.Scorer.__init__

    def noted(self, *args, **kwargs) -> None:
        real(self, *args, **kwargs)
        placed.append(self.lm.device_map)

    monkeypatch.setattr(corpus.Scorer, "__init__", noted)
    src = tmp_path / "texts.txt"
    src.write_text(f"{SENTENCE}\nThe cat sat on the mat.\n", encoding="utf-8")
    whole, spread = tmp_path / "whole.csv", tmp_path / "spread.csv"
    assert main(["corpus", "--texts", str(src), "--out", str(whole)]) == 0
    argv = ["--device-map", "auto", "--max-memory", "cpu=80MB", "--offload-folder", str(tmp_path / "off")]
    assert main(["corpus", "--texts", str(src), "--out", str(spread), *argv]) == 0
    assert placed[0] is None and "disk" in placed[1].values() and "cpu" in placed[1].values(), placed
    assert f"spread by a device map: {where(placed[1])}" in capsys.readouterr().err
    assert spread.read_bytes() == whole.read_bytes()


def test_the_app_spreads_the_model_and_shows_the_same_heads(minilm, monkeypatch) -> None:
    from apptest_helpers import assert_clean, heatmaps, run_app, specs

    at = run_app(view="Heads", layer="4")
    assert_clean(at)
    whole = [h["z"] for h in heatmaps(specs(at)[0])]
    at.sidebar.toggle(key="device_map").set_value(True)
    at.run()  # the boxes open once the toggle is on
    assert_clean(at)
    at.sidebar.text_input(key="max_memory").set_value("cpu=80MB")
    at.run()
    assert_clean(at)
    assert "Loading with device map auto" in " ".join(c.value for c in at.sidebar.caption)
    assert [h["z"] for h in heatmaps(specs(at)[0])] == whole
    from mha_viz.ui.cache import MODELS

    held = MODELS.keys()  # (model, "<device>|<placement>") of each model the process holds
    keys = [k for k in held if "80MB" in k[1]]
    assert len(keys) == 1 and "disk" in MODELS.get(keys[0], lambda: pytest.fail("not loaded")).device_map.values()
    at.sidebar.text_input(key="max_memory").set_value("cpu=lots")
    at.run()
    assert [e.value for e in at.error] and "not a size" in at.error[0].value
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    at = run_app(view="Heads", layer="4")
    assert not [w for w in at.sidebar.text_input if w.key == "offload_folder"]


def test_what_every_view_reads_is_the_same_with_layers_on_disk(minilm) -> None:
    """Road and study level, no AppTest (issue 36 §4: replaces 21 views × 2 AppTest runs): MiniLM with its later
    layers on disk (cpu=80MB, as the app test above) gives every layer's trace, under each what-if the views apply,
    the plain weights, the circuits' weights and copying map, an ablation and an importance score, number for
    number as loaded whole. test_the_app_spreads_the_model_and_shows_the_same_heads is the AppTest of it."""
    from mha_viz.pipeline.road import layer_weights
    from mha_viz.studies import circuit_report, importance, sweeps

    spread = load_model(None, _device("cpu=80MB"))
    assert "disk" in spread.device_map.values() and "cpu" in spread.device_map.values(), spread.device_map
    _same_traces(minilm, spread, SENTENCE)  # Heads, Lines, Overview, Rollout, Lesson, Step by step, roles, ...
    a, b = record(minilm, SENTENCE), record(spread, SENTENCE)
    part, last = minilm.part(None), minilm.n_layers(minilm.part(None)) - 1  # the last layer: on disk
    for what_if in (Config(wo="identity"), Config(ablate=(1, 4)), Config(heads=4), Config(causal=True)):
        ta, tb = layer_trace(minilm, a, part, last, what_if), layer_trace(spread, b, part, last, what_if)
        for name in ("pattern", "output"):
            assert float((getattr(ta, name) - getattr(tb, name)).abs().max()) <= TOL, (what_if, name)
    names = ("W_Q", "W_K", "W_V", "W_O")
    wa, wb = layer_weights(minilm, a, part, last), layer_weights(spread, b, part, last)  # Head count, claims
    assert all(torch.equal(getattr(wa, n), getattr(wb, n)) for n in names)
    ca, cb = circuit_report.layer_weights(minilm, part, last), circuit_report.layer_weights(spread, part, last)
    assert all(torch.equal(getattr(ca, n), getattr(cb, n)) for n in names)  # Circuits
    assert (circuit_report.copying_map(minilm, part) == circuit_report.copying_map(spread, part)).all()
    plan = {(part, last): [0, 3], (part, 1): [2]}  # Ablation
    ea, eb = sweeps.ablation_effect(minilm, SENTENCE, plan), sweeps.ablation_effect(spread, SENTENCE, plan)
    assert ea.keys() == eb.keys() and str(ea) == str(eb)
    heads = [(last, 0), (1, 2)]  # Head importance (one score: the scan repeats it per head)
    assert importance.Scorer(minilm, [SENTENCE]).score(heads) == importance.Scorer(spread, [SENTENCE]).score(heads)
