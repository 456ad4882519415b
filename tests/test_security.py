"""Safe to host: hostile and odd text, unsafe HTML sinks, hosted-mode model allow-list."""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path

import numpy as np
import plotly.io as pio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from texts import PAYLOADS

from mha_viz.config import Config
from mha_viz.figures import focus_bars, heads_grid, matrix_heatmap
from mha_viz.models.load import load_model
from mha_viz.models.tokens import MAX_TEXT_CHARS, tokenize
from mha_viz.trace import MhaVizError

ROOT = Path(__file__).resolve().parents[1]
UNSAFE_CALLS = {"html", "iframe"}  # st.html, st.iframe, components.html, components.iframe


def _python_files() -> list[Path]:
    return [ROOT / "app.py", *sorted((ROOT / "mha_viz").rglob("*.py"))]


def test_no_unsafe_html_sink_gets_a_non_constant() -> None:
    """st.html / st.iframe / components.html / unsafe_allow_html may only ever see literal constants."""
    problems = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in UNSAFE_CALLS and not all(isinstance(a, ast.Constant) for a in node.args):
                problems.append(f"{path.name}:{node.lineno} {name}() with a non-constant argument")
            for kw in node.keywords:
                if kw.arg == "unsafe_allow_html" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is False
                ):
                    problems.append(f"{path.name}:{node.lineno} unsafe_allow_html={ast.unparse(kw.value)}")
    assert not problems, problems


def test_the_static_check_catches_a_violation(tmp_path) -> None:
    bad = "import streamlit as st\ntext = input()\nst.markdown(text, unsafe_allow_html=True)\nst.html(text)\n"
    tree = ast.parse(bad)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    flagged = [
        n
        for n in calls
        if (getattr(n.func, "attr", "") in UNSAFE_CALLS and not all(isinstance(a, ast.Constant) for a in n.args))
        or any(k.arg == "unsafe_allow_html" for k in n.keywords)
    ]
    assert len(flagged) == 2


@pytest.mark.parametrize("payload", PAYLOADS)
def test_figures_show_hostile_labels_as_text(payload: str) -> None:
    tokens = ["[CLS]", payload, "it", "[SEP]"]
    p = np.full((2, 4, 4), 0.25, dtype=np.float32)
    for fig in (
        heads_grid(p, tokens),
        matrix_heatmap(p[0], tokens, tokens, f"title with {payload}", attention=True),
        focus_bars(p, tokens, 1),
    ):
        spec = json.loads(pio.to_json(fig, validate=False))
        texts = json.dumps(spec["data"]) + json.dumps(spec["layout"].get("annotations", []))
        texts += json.dumps(spec["layout"].get("title", {}))
        for tag in ("<img", "<svg", "<a ", "<span"):
            assert tag not in texts.replace("<extra>", "").replace("</extra>", ""), (tag, payload)
        assert "&lt;" in texts or "<" not in payload


@pytest.fixture(scope="module")
def lm(minilm):
    """The session's MiniLM (tests/conftest.py), not a second load."""
    return minilm


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.text(
        alphabet=st.characters(
            categories=["Mn", "Me", "Cf", "Cs", "Zs", "Zl", "So", "Sk", "Lo", "Lu", "Ll", "Po", "Nd", "Cc"],
            codec=None,
        ),
        max_size=60,
    )
)
def test_odd_unicode_is_a_trace_or_a_clear_message(lm, text: str) -> None:
    try:
        tokens = tokenize(lm.tokenizer, text, lm.max_tokens, lm.name)
    except MhaVizError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert all(label for label in tokens.labels) and len(set(tokens.labels)) == len(tokens.labels)
    assert all(label.isprintable() for label in tokens.labels)


@pytest.mark.parametrize(
    "text",
    [
        "\u202eevil\u202c override",
        "👩\u200d👩\u200d👧 family",
        "abc\ud800def",
        "e\u0301\u0301",
        "\u200b\u200b",
        "x" * 10_000,
        "word " * 2_000,
        "y" * 1_000_000,
    ],
)
def test_odd_and_long_text(lm, text: str) -> None:
    from mha_viz.pipeline.road import traces

    try:
        _, _, (trace,) = traces(Config(), text, layers=[0], lm=lm)
    except MhaVizError as exc:
        assert len(text) <= MAX_TEXT_CHARS or "limit" in str(exc)
        return
    assert not trace.pattern.isnan().any() and all(trace.tokens)


def test_hosted_mode_allow_list_refuses_before_any_access(monkeypatch) -> None:
    import socket

    import transformers

    def no_network(*_a, **_k):
        raise AssertionError("network or file access attempted")

    real_from_pretrained = transformers.AutoConfig.from_pretrained
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_network)
    monkeypatch.setenv("MHA_VIZ_ALLOWED_MODELS", "gpt2,distilgpt2")
    for name in ("bert-base-uncased", "/etc", "../x", "/tmp", "gpt2/../../etc", "not a model id", "a" * 300):
        with pytest.raises(MhaVizError, match="not available on this server"):
            load_model(name)
    with pytest.raises(AssertionError, match="network or file access"):
        load_model("gpt2")  # allowed: it does try to load
    monkeypatch.delenv("MHA_VIZ_ALLOWED_MODELS")
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    with pytest.raises(MhaVizError, match="distilgpt2"):
        load_model("/etc")
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", real_from_pretrained)
    assert load_model(None).name == "all-MiniLM-L6-v2"  # the bundled model is always allowed


def test_remote_code_is_never_trusted() -> None:
    loading = [ROOT / "mha_viz" / "models" / "load.py", ROOT / "mha_viz" / "models" / "sources.py"]
    source = "".join(path.read_text() for path in loading)
    assert "trust_remote_code=True" not in source and source.count("trust_remote_code=False") >= 4
    assert "use_safetensors=True" in (ROOT / "mha_viz" / "models" / "load.py").read_text()
    unsafe = []
    for path in _python_files():  # every from_pretrained anywhere says trust_remote_code=False
        text = path.read_text()
        assert "trust_remote_code=True" not in text, path.name
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "from_pretrained":
                ok = any(
                    k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in node.keywords
                )
                if not ok:
                    unsafe.append(f"{path.name}:{node.lineno}")
    assert not unsafe, unsafe


# --- hostile own-weights uploads: the reader raises MhaVizError (one line) or returns weights --------------


@functools.cache  # the fuzz tests start from it hundreds of times; bytes are immutable
def _valid_file(d_model: int = 8, n_heads: int = 2) -> bytes:
    from mha_viz.own import init_weights, save_weights

    return save_weights(init_weights(d_model, n_heads, seed=1, bias=True))


def _split(data: bytes) -> tuple[dict, bytes]:
    """A safetensors file's header (as a dict) and its data bytes."""
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _crafted(header: dict | bytes, body: bytes) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + body


def _only_mha_viz_error(data: bytes) -> str | None:
    """Load ``data``: the error message, or None when it loaded. Any other exception fails the test."""
    from mha_viz.own import load_weights

    try:
        load_weights(data)
    except MhaVizError as exc:
        message = str(exc)
        assert message and "\n" not in message and "Traceback" not in message, message
        return message
    return None


def test_valid_file_loads_and_crafting_round_trips() -> None:
    header, body = _split(_valid_file())
    assert _only_mha_viz_error(_crafted(header, body)) is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[" * 30_000 + b"]" * 30_000, "nested too deeply"),
        (b'{"W_Q": ' * 6_000 + b"1" + b"}" * 6_000, "nested too deeply"),
        (('{"W_Q": {"dtype": "F32", "shape": [' + "9" * 5_000 + '], "data_offsets": [0, 4]}}').encode(), "digit"),
        (('{"W_Q": {"dtype": "F32", "shape": [2], "data_offsets": [0, ' + "9" * 400 + "]}}").encode(), "digit"),
        (b'{"W_Q": {"dtype": "F32", "shape": [1e999], "data_offsets": [0, 4]}}', "invalid shape"),
        (b'{"W_Q": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}', "invalid shape"),
        (b'{"W_Q": 1, "W_Q": 2}', "appears twice"),
        (b"\xff\xfe{}", "unreadable header"),
        (b'"just a string"', "not a table"),
    ],
)
def test_hostile_headers_are_clear_errors(raw: bytes, message: str) -> None:
    assert message in (_only_mha_viz_error(_crafted(raw, b"\0" * 64)) or "it loaded")


def _edited(edit) -> bytes:
    header, body = _split(_valid_file())
    edit(header)
    return _crafted(header, body)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda h: h["W_K"].update(data_offsets=h["W_Q"]["data_offsets"]), "overlaps"),
        (lambda h: h["W_K"].update(data_offsets=list(reversed(h["W_K"]["data_offsets"]))), "invalid shape or position"),
        (lambda h: h["W_Q"].update(shape=[-2, 8, 4]), "invalid shape"),
        (lambda h: h["W_Q"].update(shape=[2.0, 8.0, 4.0]), "invalid shape"),
        (lambda h: h["W_Q"].update(shape=[True, 8, 4]), "invalid shape"),
        (lambda h: h["W_Q"].update(shape=[2, 8, 4, 1]), "invalid shape"),
        (lambda h: h["W_Q"].update(data_offsets=[0, 64, 0]), "invalid shape"),
        (lambda h: h["W_Q"].update(data_offsets="0-64"), "invalid shape"),
        (lambda h: h["W_Q"].update(dtype="I64"), "float tensor"),
        (lambda h: h.update(W_Q=[1, 2, 3]), "float tensor"),
        (lambda h: h.update(W_Q="tensor"), "float tensor"),
        (lambda h: h.update(__metadata__={"format": "x", "scale": 2.0}), "__metadata__"),
        (lambda h: h.update(__metadata__={"scale": None}), "__metadata__"),
        (lambda h: h.update(__metadata__=["scale", "2"]), "__metadata__"),
        (lambda h: h.update(__metadata__={"scale": "1e38"}), "at most"),
        (lambda h: h.update(__metadata__={"scale": "9" * 5000}), "at most"),
        (lambda h: h.update(__metadata__={"scale": "-1"}), "above 0"),
        (lambda h: h.update(__metadata__={"scale": " 1e38\n"}), "scale metadata is 1e+38;"),  # one line, no echo
        (lambda h: h.update(__metadata__={"scale": "1\x1b[2J"}), "not a number"),
        (lambda h: h.update(__metadata__={"scale": "two"}), "not a number"),
        (lambda h: h.pop("b_O"), "gap"),  # its bytes are left unclaimed in the file
        (lambda h: h.update({"W_Q\u202e": h.pop("W_Q")}), "unexpected tensor"),
    ],
)
def test_crafted_tables_are_clear_errors(edit, message: str) -> None:
    found = _only_mha_viz_error(_edited(edit))
    assert found is not None and message in found, found


def test_overflowing_but_finite_weights_are_refused() -> None:
    import torch
    from safetensors.torch import save

    from mha_viz.own import MAX_ABS_WEIGHT, init_weights

    tensors = init_weights(8, 2).tensors()
    for name, value in (("W_Q", 1e30), ("W_O", MAX_ABS_WEIGHT * 2)):
        big = dict(tensors, **{name: torch.full_like(tensors[name], value)})
        found = _only_mha_viz_error(save(big))
        assert found is not None and name in found and f"{MAX_ABS_WEIGHT:g}" in found, found
    f64 = {n: t.double() for n, t in tensors.items()}
    f64["W_K"][0, 0, 0] = 1e300  # finite in float64, inf once read as float32
    found = _only_mha_viz_error(save(f64))
    assert found is not None and "W_K" in found
    ok = dict(tensors, W_V=torch.full_like(tensors["W_V"], MAX_ABS_WEIGHT))
    assert _only_mha_viz_error(save(ok)) is None  # the bound itself is allowed


def test_random_byte_mutations_raise_only_mha_viz_error() -> None:
    """A seeded fuzz loop: flips, overwrites, insertions (deep brackets, long numbers), deletions and truncations
    of a valid file's header and data; half the time the length prefix is fixed up so the header still parses."""
    import random

    rng = random.Random(20240601)
    valid = _valid_file()
    n = int.from_bytes(valid[:8], "little")
    loaded = refused = 0
    for _ in range(1500):
        parts = [bytearray(valid[8 : 8 + n]), bytearray(valid[8 + n :])]
        for _ in range(rng.randint(1, 4)):
            data = parts[0] if rng.random() < 0.8 else parts[1]  # mostly the header, where parsing happens
            where = rng.randrange(len(data) + 1)
            op = rng.randrange(6)
            if op == 0 and where < len(data):
                data[where] ^= 1 << rng.randrange(8)
            elif op == 1 and where < len(data):
                data[where] = rng.choice(b'{}[]",:0123456789-.eE \x00\xff')
            elif op == 2:
                data[where:where] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
            elif op == 3:
                data[where:where] = rng.choice((b"[" * 3000, b"9" * 5000, b"-1", b"1e999", b'"x":{},'))
            elif op == 4:
                del data[where : where + rng.randint(1, 6)]
            else:
                del data[where:]
        prefix = len(parts[0]) if rng.random() < 0.5 else n
        data = prefix.to_bytes(8, "little") + bytes(parts[0]) + bytes(parts[1])
        if rng.random() < 0.1:
            data = data[: rng.randrange(len(data) + 1)]
        if _only_mha_viz_error(data) is None:
            loaded += 1
        else:
            refused += 1
    assert refused > 1000 and loaded > 0  # the loop did reach both outcomes


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(["W_Q", "W_K", "W_O", "b_O", "__metadata__", "extra"]),
    field=st.sampled_from([None, "dtype", "shape", "data_offsets"]),
    value=_json,
)
def test_any_json_in_any_header_field_raises_only_mha_viz_error(name: str, field: str | None, value) -> None:
    header, body = _split(_valid_file())
    if field is None or not isinstance(header.get(name), dict):
        header[name] = value
    else:
        header[name][field] = value
    _only_mha_viz_error(_crafted(json.dumps(header, allow_nan=True).encode(), body))


def test_both_bundled_models_are_allowed_in_hosted_mode(monkeypatch) -> None:
    from mha_viz.models.sources import resolve

    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    assert resolve("smollm2")[0].endswith(tuple("0123456789")) and resolve(None)[1]
    with pytest.raises(MhaVizError, match="not available on this server"):
        resolve("Qwen/Qwen2.5-0.5B")
