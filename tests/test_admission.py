"""Requests admitted against one memory budget for the process (issue 21 §2.2: three long links at once took a
server from 1.7 to 7.2 GB): a running request's estimate counts until it ends; others wait a moment or are
refused with a notice, in the page too."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.pipeline import admission
from mha_viz.pipeline.admission import ADMISSION, Admission, ServerBusy

APP = str(Path(__file__).resolve().parents[1] / "app.py")
MB = 2**20


def _hold(adm: Admission, need: int, started: threading.Event, release: threading.Event) -> threading.Thread:
    def run() -> None:
        with adm.admit(need, "the first request", total=100 * MB, wait_s=0):
            started.set()
            release.wait(60)

    thread = threading.Thread(target=run)
    thread.start()
    assert started.wait(60)
    return thread


def test_a_running_request_counts_until_it_ends() -> None:
    adm = Admission()
    started, release = threading.Event(), threading.Event()
    thread = _hold(adm, 80 * MB, started, release)
    assert adm.in_use == 80 * MB and adm.running == 1
    busy = pytest.raises(ServerBusy, match=r"The server is busy, try again in a moment.*MHA_VIZ_PROCESS_MB")
    with busy, adm.admit(50 * MB, "Next token", total=100 * MB, wait_s=0):
        pass
    with adm.admit(20 * MB, "Heads", total=100 * MB, wait_s=0):  # room for this one beside it
        assert adm.in_use == 100 * MB
    admitted = []

    def waiter() -> None:  # waits for the first request to end, then runs
        with adm.admit(50 * MB, "Next token", total=100 * MB, wait_s=60):
            admitted.append(adm.in_use)

    second = threading.Thread(target=waiter)
    second.start()
    assert not admitted  # still waiting while the first one runs
    release.set()
    thread.join(60)
    second.join(60)
    assert admitted == [50 * MB] and adm.in_use == 0 and adm.running == 0


def test_a_request_alone_always_runs_and_an_error_frees_its_share() -> None:
    adm = Admission()
    with adm.admit(500 * MB, "Overview", total=100 * MB, wait_s=0):  # over the total, but alone: its own limit
        assert adm.in_use == 500 * MB
    with pytest.raises(RuntimeError), adm.admit(60 * MB, "Heads", total=100 * MB, wait_s=0):
        raise RuntimeError("the view failed")
    assert adm.in_use == 0


def test_many_threads_never_hold_more_than_the_total() -> None:
    adm, peak, lock = Admission(), [0], threading.Lock()

    def request() -> None:
        with adm.admit(30 * MB, "Heads", total=100 * MB, wait_s=60):
            time.sleep(0.01)  # held a while, so that requests overlap
            with lock:
                peak[0] = max(peak[0], adm.in_use)

    threads = [threading.Thread(target=request) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert 30 * MB <= peak[0] <= 90 * MB and adm.in_use == 0


def test_defaults_from_the_environment(monkeypatch) -> None:
    for name in ("MHA_VIZ_PROCESS_MB", "MHA_VIZ_ADMIT_WAIT_S", "MHA_VIZ_MAX_REQUEST_MB", "MHA_VIZ_HOSTED"):
        monkeypatch.delenv(name, raising=False)
    assert admission.process_mb() == 4096 and admission.admit_wait_s() == 5
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    assert admission.process_mb() == 1536
    monkeypatch.setenv("MHA_VIZ_PROCESS_MB", "3000")
    monkeypatch.setenv("MHA_VIZ_ADMIT_WAIT_S", "0")
    assert admission.process_mb() == 3000 and admission.admit_wait_s() == 0
    monkeypatch.setenv("MHA_VIZ_PROCESS_MB", "١٢")  # not plain ASCII digits: the default
    assert admission.process_mb() == 1536


@contextmanager
def _another_session_holds_everything(monkeypatch) -> Iterator[None]:
    """Another session's request holds the whole process budget (1 MB) while the block runs; no wait to admit."""
    monkeypatch.setenv("MHA_VIZ_PROCESS_MB", "1")
    monkeypatch.setenv("MHA_VIZ_ADMIT_WAIT_S", "0")
    started, release = threading.Event(), threading.Event()

    def other_session() -> None:
        with ADMISSION.admit(MB, "another session's Overview"):
            started.set()
            release.wait(120)

    thread = threading.Thread(target=other_session)
    thread.start()
    try:
        assert started.wait(60)
        yield
    finally:
        release.set()
        thread.join(60)


def test_a_busy_server_says_so_in_the_page(minilm, monkeypatch) -> None:
    """Another session's request holds the whole process budget: this page's view is refused with a notice
    (after the configured wait), the page itself still draws; once it ends, the view runs."""
    with _another_session_holds_everything(monkeypatch):
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["view"] = "Heads"
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        errors = [e.value for e in at.error]
        assert any("The server is busy, try again in a moment" in e for e in errors), errors
        assert not at.get("plotly_chart")
    at.run()
    assert not at.error and at.get("plotly_chart")


# --- the recorded pass every view reads is admitted like any other work (issue 35 §4.3) --------------------------

FRESH = "A text no other test records, so that this page's model pass runs: the heron waited by the weir"


def test_a_requests_own_parts_never_wait_for_each_other() -> None:
    """The recorded pass a view asks for is admitted inside the view's own admission: the two count together but
    never wait for each other (a request alone always runs); another thread's request still makes them wait."""
    adm = Admission()
    with adm.admit(80 * MB, "Next token", total=100 * MB, wait_s=0), adm.admit(50 * MB, "its pass", total=100 * MB,
                                                                                   wait_s=0):  # fmt: skip
        assert adm.in_use == 130 * MB and adm.running == 2
    started, release = threading.Event(), threading.Event()
    thread = _hold(adm, 80 * MB, started, release)
    try:
        view = adm.admit(10 * MB, "Heads", total=100 * MB, wait_s=0)
        with pytest.raises(ServerBusy), view, adm.admit(20 * MB, "its pass", total=100 * MB, wait_s=0):
            pass
    finally:
        release.set()
        thread.join(60)
    assert adm.in_use == 0


def _recorded(text: str) -> bool:
    from mha_viz.config import Config
    from mha_viz.selection import Selection
    from mha_viz.ui.cache import is_recorded

    return is_recorded(Selection(Config(), text))


def _heads_page(text: str) -> tuple[AppTest, list[str]]:
    """The Heads page of ``text`` run once (no exception), and its error messages without Markdown escapes."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["view"] = "Heads"
    at.query_params["text"] = text
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at, [e.value.replace("\\", "") for e in at.error]


def test_the_page_pass_is_refused_as_busy_before_it_runs(minilm, monkeypatch) -> None:
    """Another session holds the whole process budget: the page's model pass over a new text waits the configured
    moment and is refused with the busy notice, never run (main recorded it first, then refused the view)."""
    with _another_session_holds_everything(monkeypatch):
        at, errors = _heads_page(FRESH)
        assert any("The server is busy" in e and "Recording all-MiniLM-L6-v2 needs about" in e for e in errors), errors
        assert not _recorded(FRESH) and not at.get("plotly_chart")


def test_the_page_pass_over_the_time_limit_is_refused_before_it_runs(minilm, monkeypatch) -> None:
    """A long MiniLM text (cut to the model's 256 tokens): its pass is estimated at ~0.7 s. With a limit under that,
    the pass itself is refused with its own estimate before it runs (main ran it, then refused the view)."""
    from mha_viz.pipeline import budget

    monkeypatch.setattr(budget, "max_request_s", lambda: 0.5)
    text = " ".join(["the heron waited by the weir while the river ran"] * 50)
    _, errors = _heads_page(text)
    said = r"Recording all-MiniLM-L6-v2 on this input would take about 0\.\d s of server time.*MHA_VIZ_MAX_REQUEST_S"
    assert any(re.search(said, e) for e in errors), errors
    assert not _recorded(text)


def test_the_page_pass_is_cut_at_the_deadline(minilm, monkeypatch) -> None:
    """Estimated under the limit, yet past it while running (a loaded server): the page's model pass is cut by the
    request's deadline with a notice (main ran it with no deadline; only the view after it was cut)."""
    from mha_viz.pipeline import budget

    monkeypatch.setattr(budget, "check_time", lambda view, s, what=None, at_length=False: 0.0)
    monkeypatch.setattr(budget, "check_seconds", lambda need, what, s: 0.0, raising=False)  # the estimates let it in
    monkeypatch.setattr(budget, "max_request_s", lambda: 1e-9)  # and the deadline has passed at once
    text = FRESH + " and then flew"
    _, errors = _heads_page(text)
    assert any("Recording all-MiniLM-L6-v2 was stopped after" in e and "MHA_VIZ_MAX_REQUEST_S" in e for e in errors), (
        errors
    )
    assert not _recorded(text)
