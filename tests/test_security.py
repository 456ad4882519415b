"""Safe to host: hostile and odd text, unsafe HTML sinks, hosted-mode model allow-list."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import plotly.io as pio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mha_viz.config import Config
from mha_viz.figures import focus_bars, heads_grid, matrix_heatmap
from mha_viz.models.load import load_model
from mha_viz.models.tokens import MAX_TEXT_CHARS, tokenize
from mha_viz.trace import MhaVizError

ROOT = Path(__file__).resolve().parents[1]
PAYLOADS = [
    "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)>",
    '<a href="javascript:alert(1)">click</a>',
    '<span style="font-size:60px">big</span>',
    "&lt;img src=x onerror=alert(1)&gt;",
    r"$\href{javascript:alert(1)}{x}$",
]
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
def lm():
    return load_model(None, "cpu")


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
    from mha_viz.pipeline import traces

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
