"""Numbers in links (issue 21 §1.2, §2.5): one parser for every number a link may carry, and what the notice
says is what the page shows: never Streamlit's uncaught-error page, never a value announced as ignored but
used truncated. Unit tests for the parser; AppTest (the bundled models) for the widgets bound to the URL."""

from __future__ import annotations

import math

import pytest
from apptest_helpers import assert_clean, ignored_note, run_app
from hypothesis import given
from hypothesis import strategies as st

from mha_viz import config
from mha_viz.ui.links import parse_link_float, parse_link_int

NINES = "9" * 5000


# --- the parser -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    ["", " 3", "3 ", " 3 ", "1_0", "٣", "３", "+3", "3.0", "2.9", "1e3", "inf", "-inf", "nan", "0x10", "3-", "--3",
     "-", "9" * 309, NINES, "-0", "-3", "4294967296"],
)  # fmt: skip
def test_link_int_refuses_anything_but_plain_digits_in_range(text: str) -> None:
    assert parse_link_int(text, 0, 2**32 - 1) is None


@pytest.mark.parametrize(
    ("text", "lo", "hi", "want"),
    [("0", 0, 9, 0), ("7", 0, 9, 7), ("007", 0, 9, 7), ("-3", -5, 5, -3), ("4294967295", 0, 2**32 - 1, 2**32 - 1)],
)
def test_link_int_reads_plain_digits(text: str, lo: int, hi: int, want: int) -> None:
    assert parse_link_int(text, lo, hi) == want


def test_link_int_checks_the_length_before_converting(monkeypatch) -> None:
    """A value of thousands of digits is refused without int() ever seeing it (no quadratic conversion, no
    ValueError from Python's digit limit)."""
    import builtins

    import mha_viz.ui.links as links

    seen: list[str] = []
    real = builtins.int
    monkeypatch.setattr(links, "int", lambda v: seen.append(v) or real(v), raising=False)
    assert parse_link_int(NINES, 0, 2**32 - 1) is None
    assert parse_link_int("12", 0, 99) == 12
    assert seen == ["12"]


@given(st.integers(-(2**40), 2**40), st.integers(-(2**40), 2**40))
def test_link_int_round_trips_every_number_in_range(n: int, other: int) -> None:
    lo, hi = min(n, other), max(n, other)
    assert parse_link_int(str(n), lo, hi) == n


@given(st.text(max_size=40))
def test_link_int_result_is_always_in_range_and_what_was_written(text: str) -> None:
    got = parse_link_int(text, -100, 100)
    if got is not None:
        assert -100 <= got <= 100 and text.lstrip("-").isascii() and text.lstrip("-").isdigit()


@pytest.mark.parametrize("text", ["", "inf", "-inf", "nan", "1e0", "1E-1", " 1", "1 ", "1_0", "٣", "0x1", "3.5",
                                  "-0.5", "+1", "1.2.3", ".", "9" * 400, "Infinity"])  # fmt: skip
def test_link_float_refuses_anything_but_plain_decimals_in_range(text: str) -> None:
    assert parse_link_float(text, 0.0, 3.0) is None


@pytest.mark.parametrize(("text", "want"), [("0", 0.0), ("2", 2.0), ("0.5", 0.5), (".5", 0.5), ("3.0", 3.0),
                                            ("1.", 1.0)])  # fmt: skip
def test_link_float_reads_plain_decimals(text: str, want: float) -> None:
    assert parse_link_float(text, 0.0, 3.0) == want


@given(st.text(max_size=40))
def test_link_float_result_is_finite_and_in_range(text: str) -> None:
    got = parse_link_float(text, -1.0, 1.0)
    assert got is None or (math.isfinite(got) and -1.0 <= got <= 1.0)


# --- the limits, each in one place -------------------------------------------------------------------------------
def test_each_limit_is_defined_once() -> None:
    import importlib

    from mha_viz.cli import trace as cli
    from mha_viz.models import tokens
    from mha_viz.studies import induction

    sidebar = importlib.import_module("mha_viz.ui.sidebar")
    own_controls = importlib.import_module("mha_viz.ui.own_controls")
    assert own_controls.MAX_SEED is config.MAX_SEED == 2**32 - 1
    assert cli.MAX_SEED is config.MAX_SEED and induction.MAX_SEED is config.MAX_SEED
    assert tokens.MAX_TEXT_CHARS is config.MAX_TEXT_CHARS and sidebar.MAX_TEXT_CHARS is config.MAX_TEXT_CHARS
    assert not hasattr(importlib.import_module("mha_viz.ui.views.wo"), "MAX_WO_SEED")


# --- the page: what the notice says is what is shown ------------------------------------------------------------
@pytest.mark.parametrize("seed", [NINES, "inf", "-inf", "1e3", "3.0", "٣", " 3"])
def test_wo_seed_from_a_bad_link_is_a_notice_not_an_error_page(minilm, seed: str) -> None:
    at = run_app(view="W^O", wo_mode="random orthogonal", wo_seed=seed)
    assert_clean(at)
    note = ignored_note(at)
    assert f"wo_seed={seed[:10]}" in note and f"must be a whole number from 0 to {config.MAX_SEED}; showing 0" in note
    box = at.number_input(key="wo_seed")
    assert box.value == 0 and box.proto.query_param_key == ""  # not bound this run: Streamlit does not read it
    assert "wo_seed" not in at.query_params
    at.run()  # said once; the box is bound to the link again
    box = at.number_input(key="wo_seed")
    assert ignored_note(at) == "" and box.value == 0 and box.proto.query_param_key == "wo_seed"
    box.set_value(42).run()
    assert_clean(at)
    assert at.number_input(key="wo_seed").value == 42


def test_own_weights_numbers_announced_ignored_are_not_used_truncated(minilm) -> None:
    at = run_app(src="Own weights", d_model="3.0", own_heads="2.9", seed="٣", view="Heads")
    assert_clean(at)
    note = ignored_note(at)
    assert "d_model=3.0 (must be a whole number from 1 to 2048; showing 512)" in note
    assert "own_heads=2.9 (must be a whole number from 1 to 256; showing 8)" in note
    assert f"seed=٣ (must be a whole number from 0 to {config.MAX_SEED}; showing 0)" in note
    box = at.sidebar.number_input
    assert (box(key="d_model").value, box(key="own_heads").value, box(key="seed").value) == (512, 8, 0)


def test_own_weights_huge_numbers_are_a_notice(minilm) -> None:
    at = run_app(src="Own weights", d_model="inf", own_heads="9" * 309, seed="-inf", view="Heads")
    assert_clean(at)
    note = ignored_note(at)
    assert all(f"{k}=" in note for k in ("d_model", "own_heads", "seed")), note
    box = at.sidebar.number_input
    assert (box(key="d_model").value, box(key="own_heads").value, box(key="seed").value) == (512, 8, 0)


def test_scale_factor_takes_plain_decimals_only(minilm) -> None:
    at = run_app(view="W^O", wo_mode="scale a head", scale_factor="1e0")
    assert_clean(at)
    assert "scale_factor=1e0 (must be a number from 0 to 3; showing 2)" in ignored_note(at)
    assert at.slider(key="scale_factor").value == 2.0
    at = run_app(view="W^O", wo_mode="scale a head", scale_factor="0.5")
    assert ignored_note(at) == "" and at.slider(key="scale_factor").value == 0.5


def test_rollout_layer_announced_ignored_is_not_used_truncated(minilm) -> None:
    at = run_app(view="Rollout", rollout_layer="3.0")
    assert_clean(at)
    assert "rollout_layer=3.0 (must be a whole number from 0 to 5; showing 5)" in ignored_note(at)
    assert at.slider(key="rollout_layer").value == 5
    at = run_app(view="Rollout", rollout_layer="2")
    assert ignored_note(at) == "" and at.slider(key="rollout_layer").value == 2


def test_lines_start_from_a_bad_link(minilm) -> None:
    at = run_app(view="Lines", text="word " * 200, lines_start=NINES)
    assert_clean(at)
    assert "lines_start=999" in ignored_note(at)
    assert at.number_input(key="lines_start").value == 0
    at = run_app(view="Lines", text="word " * 200, lines_start="40")
    assert ignored_note(at) == "" and at.number_input(key="lines_start").value == 40


def test_induction_numbers_from_a_bad_link() -> None:
    at = run_app(src="SmolLM2-135M (bundled)", view="Induction", ind_length="inf", ind_seed="1e3")
    assert_clean(at)
    note = ignored_note(at)
    assert "ind_length=inf (" in note and "showing 50)" in note
    assert f"ind_seed=1e3 (must be a whole number from 0 to {config.MAX_SEED}; showing 0)" in note
    assert at.number_input(key="ind_length").value == 50 and at.number_input(key="ind_seed").value == 0
