"""Views that run on their own input estimate that input (issue 35 §4.9: Patching and Corpus were admitted on the
sidebar text's estimate); long runs leave no Start or Cancel above their finished results, and their times follow
this server's measured pace or say that they are a quiet machine's (issue 35 §2.7). AppTest on the bundled MiniLM."""

from __future__ import annotations

import re

import pytest
from apptest_helpers import array, assert_clean, heatmaps, run_app, specs

from conftest import SENTENCE
from mha_viz.pipeline.pace import PACE, eta

LONG = " ".join(["the heron waited by the weir while the river ran"] * 30)  # cut to MiniLM's limit


def _errors(at) -> list[str]:
    assert not at.exception, [e.value for e in at.exception]
    return [e.value.replace("\\", "") for e in at.error]  # plain(): Markdown escaped


def _buttons(at) -> list[str]:
    return [b.label for b in at.button]


# --- §4.9: the view's own input is what is estimated -------------------------------------------------------------


def test_patching_estimates_its_own_boxes(minilm, monkeypatch) -> None:
    """A short sidebar text (Patching on it: ~2 s) and two long Patching boxes (74 passes of the model on ~256 tokens:
    ~25 s): with a 10 s limit the boxes' run is refused, with their own estimate, before anything runs on them (main
    admitted them on the sidebar text's estimate and went on to run them)."""
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_S", "10")
    at = run_app(view="Patching")
    assert not _errors(at) and specs(at)  # the sidebar's short text: admitted, scanned, drawn
    at.text_input(key="patch_clean").set_value(LONG)
    at.text_input(key="patch_corrupt").set_value(LONG.replace("heron", "swan"))
    at.run()
    errors = _errors(at)
    said = r"Patching these two texts on this input would take about (\d+) s of server time.*10 s"
    assert any(re.search(said, e) for e in errors), errors
    assert int(next(m.group(1) for e in errors if (m := re.search(said, e)))) > 10
    assert not specs(at)  # neither the attribution estimate nor the scan ran


def test_patching_is_not_refused_for_a_long_sidebar_text(minilm, monkeypatch) -> None:
    """The other way round: a long sidebar text (Patching on it: ~14 s) does not refuse Patching on two short boxes
    (~2 s) under a 10 s limit (main refused the view on the sidebar text's estimate, its boxes never drawn)."""
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_S", "10")
    at = run_app(view="Patching", text=LONG)
    errors = _errors(at)  # the boxes start from the sidebar's text: their own estimate is over the limit
    assert any("Patching these two texts on this input would take about" in e for e in errors), errors
    at.text_input(key="patch_clean").set_value(SENTENCE)
    at.text_input(key="patch_corrupt").set_value(SENTENCE.replace("tired", "wide"))
    at.run()
    assert not _errors(at) and specs(at)  # scanned and drawn


def test_corpus_estimates_its_own_texts(minilm, monkeypatch) -> None:
    """16 uploaded texts of ~256 tokens (a few seconds here on a quiet machine, ~0.3 s if they were the sidebar's short
    text): with a 3 s limit the run is refused before it starts, with the texts' own estimate (main started it on
    the sidebar text's estimate and let the deadline cut it)."""
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_S", "3")
    at = run_app(view="Corpus", corpus_source="a text file (.txt, one text per line)")
    lines = [f"{i} {LONG}" for i in range(16)]
    at.file_uploader(key="corpus_upload").set_value(("long.txt", "\n".join(lines).encode(), "text/plain")).run()
    errors = _errors(at)
    said = r"Scoring 16 texts on all-MiniLM-L6-v2 would take about (\d+) s; the limit per request on this server is 3 s"
    assert any(re.search(said, e) for e in errors), errors
    assert not specs(at) and not any("was stopped after" in e for e in errors)


# --- §2.7: finished runs on top, no Start or Cancel above them ---------------------------------------------------


def test_a_finished_importance_scan_and_curve_leave_no_controls_above_them(minilm, monkeypatch) -> None:
    """The scan (on a button here: AUTO_HEADS lowered) and the pruning curve: once each is done, its Start and Cancel
    buttons are gone and its result is the first chart; they stay gone on the next run (main kept both buttons
    above the finished results, and the curve's Cancel on every later run). A finished run is timed (the pace)."""
    from mha_viz.ui.memo import CACHES as ALL
    from mha_viz.ui.views import importance as view

    monkeypatch.setattr(view, "AUTO_HEADS", 10)
    for cache in ALL:
        cache.clear()
    PACE.clear()
    at = run_app(view="Head importance")
    assert not _errors(at) and "Scan all 72 heads" in _buttons(at) and not specs(at)
    at.button(key=next(b.key for b in at.button if b.label == "Scan all 72 heads")).click().run()
    assert_clean(at)
    assert "Scan all 72 heads" not in _buttons(at) and "Cancel" not in _buttons(at)
    assert specs(at) and heatmaps(specs(at)[0])  # the importance map is the first chart
    assert PACE.factor() is not None  # the scan told the pace what it took
    assert "Compute the pruning curve" in _buttons(at)
    at.button(key=next(b.key for b in at.button if b.label == "Compute the pruning curve")).click().run()
    assert_clean(at)
    for _ in range(2):  # the run that finished it, and the next one
        labels = _buttons(at)
        assert "Compute the pruning curve" not in labels and "Cancel" not in labels, labels
        assert len(specs(at)) == 2 and not heatmaps(specs(at)[1])  # the map, then the pruning curve
        at.run()
        assert_clean(at)
    assert array(heatmaps(specs(at)[0])[0]["z"]).shape == (6, 12)


# --- §2.7: times from this server's measured pace -----------------------------------------------------------------


def test_eta_scales_to_the_measured_pace() -> None:
    PACE.clear()
    assert eta(22) == "about 22 s on a quiet machine (longer while this server is busy)"
    PACE.observe(0.1, 5.0)  # too small a run to time: fixed costs
    assert PACE.factor() is None
    PACE.observe(10.0, 90.0)  # a run here took 9 × its quiet-machine estimate
    assert PACE.factor() == pytest.approx(9.0)
    assert (
        eta(22) == "about 3.3 min at this server's pace now (its last runs took 9.0 × the 22 s a quiet machine needs)"
    )
    PACE.observe(10.0, 10.0)
    assert PACE.factor() == pytest.approx(5.0)  # the recent runs together
    PACE.clear()


def test_the_corpus_time_follows_the_measured_pace(minilm) -> None:
    """The bundled corpus (159 texts, on a button): before anything is timed its time is said to be a quiet machine's;
    after a timed run 9 × slower than estimated (a loaded machine), the same page says 9 × that (main said
    "about N s here" whatever the load)."""
    PACE.clear()
    at = run_app(view="Corpus")
    assert not _errors(at) and "Score 159 texts" in _buttons(at)
    quiet = [c.value for c in at.caption if "159 texts" in c.value]
    found = re.search(r"about (\d+) s on a quiet machine", quiet[0]) if quiet else None
    assert found, quiet
    PACE.observe(10.0, 90.0)  # what long_run and the recorded pass report after a run on a loaded machine
    at.run()
    paced = [c.value for c in at.caption if "159 texts" in c.value]
    assert paced and "at this server's pace now (its last runs took 9.0 ×" in paced[0], paced
    PACE.clear()
