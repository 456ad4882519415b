"""One request value (issue 36 §3): the frozen Selection the sidebar and the CLI make, the caches key on and the road
resolves into a layer handle once; Config's three parts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from conftest import SENTENCE
from mha_viz.config import Config, OwnWeights, Source, WhatIfs
from mha_viz.pipeline.road import layer_of, record, trace_at
from mha_viz.selection import Selection
from mha_viz.trace import MhaVizError

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models


def test_a_selection_is_frozen_hashable_and_one_key() -> None:
    a = Selection(Config(heads=4), SENTENCE, "", "encoder", 2)
    b = Selection(Config(heads=4), SENTENCE, None, "encoder", 2)
    assert a == b and hash(a) == hash(b) and {a: "cached"}[b] == "cached"  # "" and None ask for the same
    assert a.target is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.layer = 3  # type: ignore[misc]
    three = a.at(layer=3)
    assert three != a and (three.layer, three.part, three.config, three.text) == (3, a.part, a.config, a.text)
    assert a.at(part="cross").part == "cross" and a.at(part="cross").layer == a.layer
    assert a.edited() is a and a.edited(heads=2).config == a.config.replace(heads=2)
    assert a.edited(heads=2).recorded == a.recorded  # a what-if changes the trace, not the recorded pass
    assert a.with_text("another text").recorded != a.recorded
    assert a.at_every_layer() == three.at_every_layer() and a.at_every_layer().layer is None


def test_config_parts_round_trip() -> None:
    config = Config(
        model="smollm2", dtype="float64", d_model=64, n_heads=4, seed=7, variant="gqa", heads=3, wo="random",
        wo_seed=5, ablate=(1,), head_scale=((0, 2.0),), causal=True, scaled=False,
    )  # fmt: skip
    assert Config.of(config.source, config.own_weights, config.what_ifs) == config
    assert Config.of() == Config()  # the parts' defaults are Config's
    names = [f.name for part in (Source, OwnWeights, WhatIfs) for f in dataclasses.fields(part)]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(Config)) and len(set(names)) == len(names)
    assert config.replace(heads=None).source == config.source and config.replace(heads=None).what_ifs != config.what_ifs
    assert config.replace(model="x", seed=1).what_ifs == config.what_ifs
    assert config.replace(heads=1).own_weights == config.own_weights
    assert Config().what_ifs.none and not config.what_ifs.none
    assert {config.what_ifs: 1}[Config.of(what_ifs=config.what_ifs).what_ifs] == 1  # hashable: a cache key
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.what_ifs.heads = 1  # type: ignore[misc]


def test_config_reads_its_defaults_from_its_parts() -> None:
    """Each default is written once, in its part: Config's flat field is the part's (default and repr)."""
    flat = {f.name: f for f in dataclasses.fields(Config)}
    for part in (Source, OwnWeights, WhatIfs):
        for f in dataclasses.fields(part):
            assert (flat[f.name].default, flat[f.name].repr) == (f.default, f.repr), f.name
            assert getattr(Config(), f.name) == getattr(part(), f.name)
    shown = repr(Config(model="own", weights_file=b"\x00" * 64, heads=2))
    assert "weights_file" not in shown and "heads=2" in shown  # the file's bytes stay out of the repr, as declared
    assert Config(heads=3).heads == 3 and Config(heads=3).what_ifs == WhatIfs(heads=3)
    assert [f.name for f in dataclasses.fields(Config)][-1] == "placement"  # the flat order is kept


def test_a_layer_handle_is_resolved_once_and_gives_the_models_own_attention(minilm) -> None:
    sel = Selection(Config(), SENTENCE, None, None, 2)
    rec = record(minilm, sel.text)
    at = layer_of(minilm, rec, sel)
    assert (at.part, at.layer, at.site) == ("encoder", 2, minilm.site("encoder", 2))
    assert at.call is rec.run.calls[("encoder", 2)]
    trace = trace_at(at, sel.config)
    with torch.no_grad():
        own = minilm.model(input_ids=torch.tensor([rec.tokens.ids]), output_attentions=True).attentions[2][0]
    torch.testing.assert_close(trace.pattern, own.float(), atol=1e-5, rtol=0)  # [h, n, n]
    ablated = trace_at(at, sel.edited(ablate=(0,)).config)
    assert torch.all(ablated.W_O[0] == 0) and not torch.all(trace.W_O[0] == 0)
    with pytest.raises(MhaVizError, match="layer 6 does not exist"):
        layer_of(minilm, rec, sel.at(layer=6))
    with pytest.raises(MhaVizError, match="has no"):
        layer_of(minilm, rec, sel.at(part="cross"))


def test_the_same_selection_gives_the_same_cached_trace(minilm) -> None:
    from mha_viz.ui.cache import get_all_patterns, get_base, get_trace

    sel = Selection(Config(), SENTENCE, None, "encoder", 1)
    trace = get_trace(sel)
    assert get_trace(Selection(Config(), SENTENCE, "", "encoder", 1)) is trace  # an equal selection: one entry
    other = get_trace(sel.at(layer=2))
    assert other is not trace and not torch.equal(other.pattern, trace.pattern)
    assert torch.all(get_trace(sel.edited(causal=True)).pattern.triu(1) == 0)
    rec = record(minilm, SENTENCE)
    torch.testing.assert_close(trace.pattern, trace_at(layer_of(minilm, rec, sel), Config()).pattern)
    every = get_all_patterns(sel)
    assert get_all_patterns(sel.at(layer=4)) is every  # every layer's patterns: whatever the shown layer
    torch.testing.assert_close(torch.from_numpy(every[1]), trace.pattern)
    base = get_base(sel)
    assert (base.part, base.n_heads, base.n_layers) == ("encoder", trace.pattern.shape[0], len(every))
    with pytest.raises(TypeError):
        type(base)(base.tokens, base.key_tokens)  # Base is built by keyword only


def test_weights_caches_are_keyed_by_the_part_they_depend_on(minilm) -> None:
    from mha_viz.own import init_weights
    from mha_viz.ui.cache import get_own_weights
    from mha_viz.ui.cache_studies import get_head_weights

    own = Config(model="own", d_model=64, n_heads=4, seed=3)
    w = get_own_weights(own)
    assert torch.equal(w.W_Q, init_weights(64, 4, 3, "xavier", False).W_Q)
    assert get_own_weights(own.replace(heads=2, wo="identity", causal=True)) is w  # what-ifs: the same weights
    assert get_own_weights(own.replace(seed=4)) is not w
    head = get_head_weights(Config(), "encoder", 0)
    assert get_head_weights(Config(ablate=(1,), wo="random", scaled=False), "encoder", 0) is head
    assert get_head_weights(Config(), "encoder", 1) is not head


def _sidebar_selection(layer: int) -> None:
    import streamlit as st

    from mha_viz.ui.sidebar import mask_controls, selection, sidebar

    c = mask_controls(sidebar(), decoder=False)
    st.session_state["made"] = selection(c, "encoder", None, layer)


def test_the_cli_and_the_sidebar_make_the_same_selection() -> None:
    from streamlit.testing.v1 import AppTest

    from mha_viz.cli.main import build_parser
    from mha_viz.cli.options import selection
    from mha_viz.cli.trace import _config

    at = AppTest.from_function(_sidebar_selection, args=(2,), default_timeout=60)
    at.query_params.update({"text": SENTENCE, "causal": "true", "scaled": "false", "device": "cpu"})
    made = at.run().session_state["made"]
    args = build_parser().parse_args(
        ["trace", "--text", SENTENCE, "--layer", "2", "--part", "encoder", "--causal", "--no-scale", "--device", "cpu"]
    )
    cli = selection(args, _config(args, "cpu"))
    assert made == cli and hash(made) == hash(cli)
    assert made.config.causal and not made.config.scaled  # the flags and the controls did reach it
    plain = build_parser().parse_args(["trace", "--text", SENTENCE, "--layer", "2", "--part", "encoder"])
    assert selection(plain, _config(plain, "cpu")) != made


WHY = ["--layer", "2", "--head", "1", "--query", "it", "--key", "animal", "--out", "w.csv"]
COMMANDS = {  # each command's flags for the sidebar's text, part and layer 2; True: it reads one layer (--layer)
    "roles": (["--part", "encoder"], False),
    "why": (["--part", "encoder", *WHY], True),
    "importance": (["--part", "encoder", "--out", "i.csv"], False),
    "variants": (["--part", "encoder", "--out", "v.csv"], False),
}


@pytest.fixture(scope="module")
def sidebar_made():
    """The sidebar's selection of SENTENCE at layer 2 of the bundled model's encoder, no what-ifs."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_sidebar_selection, args=(2,), default_timeout=60)
    at.query_params.update({"text": SENTENCE, "device": "cpu"})
    return at.run().session_state["made"]


def _cli_selection(command: str, extra: list[str], lm) -> Selection:
    from mha_viz.cli.main import build_parser
    from mha_viz.cli.options import request

    return request(build_parser().parse_args([command, "--text", SENTENCE, "--device", "cpu", *extra]), lm)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_and_the_sidebar_make_the_same_selection(command: str, sidebar_made, minilm) -> None:
    """roles, importance and variants read every layer: the sidebar's selection at every layer (what the dashboard's
    caches key them on); why reads the layer the flags name."""
    extra, one_layer = COMMANDS[command]
    cli = _cli_selection(command, extra, minilm)
    made = sidebar_made if one_layer else sidebar_made.at_every_layer()
    assert cli == made and hash(cli) == hash(made)
    assert _cli_selection(command, [*extra, "--target", "x"], minilm) != made  # the flags do reach it
    other = ["3" if x == "2" else "decoder" if x == "encoder" and not one_layer else x for x in extra]
    assert _cli_selection(command, other, minilm) != made  # another layer (why), another part (the others)


def test_roles_from_the_cli_are_the_dashboards_and_the_models_own(tmp_path, capsys, sidebar_made, minilm) -> None:
    import json

    from mha_viz.cli.main import main
    from mha_viz.studies.sweeps import roles_table
    from mha_viz.ui.cache_studies import get_roles

    out = tmp_path / "roles.json"
    assert main(["roles", "--text", SENTENCE, "--part", "encoder", "--device", "cpu", "--out", str(out)]) == 0
    rows = json.loads(out.read_text(encoding="utf-8"))
    assert rows == get_roles(sidebar_made) and len(rows) == 6 * 12
    rec = record(minilm, SENTENCE)
    with torch.no_grad():
        own = minilm.model(input_ids=torch.tensor([rec.tokens.ids]), output_attentions=True).attentions
    want = roles_table(rec.tokens, torch.cat(own).float().numpy())  # [L, H, n, n]: the model's own weights
    assert [r["label"] for r in rows] == [r["label"] for r in want]
    for got, ref in zip(rows, want, strict=True):
        for key in ref:
            if key != "label":
                assert got[key] == pytest.approx(ref[key], abs=1e-5), (got["layer"], got["head"], key)


def test_why_from_the_cli_is_the_dashboards_on_the_same_selection(tmp_path, sidebar_made, minilm) -> None:
    import csv

    from mha_viz.analysis.why_plan import csv_rows
    from mha_viz.cli.main import main
    from mha_viz.ui.views.why import get_why

    out = tmp_path / "why.csv"
    flags = ["--layer", "2", "--head", "1", "--query", "it", "--key", "animal", "--versus", "street"]
    assert main(["why", "--text", SENTENCE, "--part", "encoder", "--device", "cpu", *flags, "--out", str(out)]) == 0
    with open(out, encoding="utf-8") as fh:
        rows = list(csv.reader(fh))[1:]
    rec = record(minilm, SENTENCE)
    labels = list(rec.tokens.labels)
    i, j, jv = len(labels) - 1 - labels[::-1].index("it"), labels.index("animal"), labels.index("street")
    w = get_why(sidebar_made, 1, i, j, jv)  # the dashboard's Why? tab on the sidebar's selection
    want = csv_rows(w)
    assert [tuple(r[:2]) for r in rows] == [(q, k) for q, k, _ in want]
    np.testing.assert_allclose([float(r[2]) for r in rows], [v for *_, v in want], rtol=1e-7, atol=1e-9)
    with torch.no_grad():
        own = minilm.model(input_ids=torch.tensor([rec.tokens.ids]), output_attentions=True)
    assert w.weight == pytest.approx(float(own.attentions[2][0, 1, i, j]), abs=1e-5)  # the model's own weight
    assert (w.layer, w.head, w.query, w.key, w.versus) == (2, 1, i, j, jv)


def test_importance_from_the_cli_is_the_dashboards(tmp_path, sidebar_made, minilm) -> None:
    import csv

    from mha_viz.cli.main import main
    from mha_viz.ui.cache_studies import get_importance

    out = tmp_path / "importance.csv"
    assert main(["importance", "--text", SENTENCE, "--part", "encoder", "--device", "cpu", "--out", str(out)]) == 0
    with open(out, encoding="utf-8") as fh:
        rows = list(csv.reader(fh))[1:]
    s = sidebar_made
    imp = get_importance(s.config, (s.text,), s.target, s.part)  # [L, H]: the dashboard's Head importance
    assert [(int(r[0]), int(r[1])) for r in rows] == [(la, h) for la in range(6) for h in range(12)]
    np.testing.assert_allclose([float(r[2]) for r in rows], imp.reshape(-1), rtol=1e-5)
    assert imp.max() > 0


def test_variants_from_the_cli_are_the_dashboards(tmp_path, sidebar_made, minilm) -> None:
    import csv

    from mha_viz.cli.main import main
    from mha_viz.ui.views.variants import get_study

    out = tmp_path / "variants.csv"
    assert main(["variants", "--text", SENTENCE, "--part", "encoder", "--device", "cpu", "--out", str(out)]) == 0
    with open(out, encoding="utf-8") as fh:
        rows = list(csv.reader(fh))[1:]
    s = sidebar_made
    study = get_study(s.config.model_name, s.config.model_device, s.text, s.target, s.part)  # the Variants tab's
    assert [(r[0], int(r[1])) for r in rows] == [(p.grouping, p.kv_heads) for p in study.points]
    np.testing.assert_allclose([float(r[3]) for r in rows], [p.change for p in study.points], rtol=1e-5, atol=1e-9)
    assert any(p.change > 0 for p in study.points)


def test_a_long_texts_first_layer_is_recorded_from_its_selection(minilm) -> None:
    """road.record_layer(lm, sel): the selection's layer alone, whole, with the model's own weights."""
    from mha_viz.pipeline.road import record_layer

    sel = Selection(Config(), SENTENCE, None, "encoder", 3)
    rec = record_layer(minilm, sel)
    assert rec.partial and list(rec.run.calls) == [("encoder", 3)]
    trace = trace_at(layer_of(minilm, rec, sel), sel.config)
    with torch.no_grad():
        own = minilm.model(input_ids=torch.tensor([rec.tokens.ids]), output_attentions=True).attentions[3][0]
    torch.testing.assert_close(trace.pattern, own.float(), atol=1e-5, rtol=0)  # [h, n, n]
    assert list(record_layer(minilm, sel.at(layer=1)).run.calls) == [("encoder", 1)]


def test_a_layer_resolved_without_a_recording_is_its_place_alone(minilm) -> None:
    """What the studies that run the model themselves use (layer_at(lm, None, ...)): the part, the layer, the site."""
    from mha_viz.pipeline.road import layer_at

    at = layer_of(minilm, None, Selection(Config(), SENTENCE, None, None, 4))
    assert (at.part, at.layer, at.site) == ("encoder", 4, minilm.site("encoder", 4))
    with pytest.raises(MhaVizError, match="without a recording"):
        _ = at.call
    with pytest.raises(MhaVizError, match="layer 6 does not exist"):
        layer_at(minilm, None, None, 6)
