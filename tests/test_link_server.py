"""The link checks on a real `streamlit run app.py` server, through a raw websocket client (no browser): the path a
link takes there (AppSession reads the rerun's query string before the page runs) is not the one AppTest takes.
Issue 21 §2.5 (a number in a link never gives Streamlit's error page) and §2.8 (a link over 1,000 parameters is
reported, not dropped silently)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import websockets
from stream_client import run_async
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def port(tmp_path_factory) -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    log = open(tmp_path_factory.mktemp("server") / "streamlit.log", "w")  # noqa: SIM115 (closed below)
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(free), "--server.headless", "true",
           "--browser.gatherUsageStats", "false"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "MHA_VIZ_NO_PRELOAD": "1"}, stdout=log, stderr=log)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{free}/_stcore/health", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, "streamlit exited"
                time.sleep(0.5)
        yield free
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def visit(port: int, query_string: str) -> tuple[list[str], list[str], list[str]]:
    """One session's first run with this link: (its warnings, its uncaught-error boxes, the URLs it set)."""

    async def run() -> tuple[list[str], list[str], list[str]]:
        url = f"ws://127.0.0.1:{port}/_stcore/stream"
        async with websockets.connect(url, max_size=2**28, subprotocols=["streamlit"]) as ws:
            msg = BackMsg()
            msg.rerun_script.query_string = query_string
            await ws.send(msg.SerializeToString())
            alerts, errors, urls = [], [], []
            while True:
                fm = ForwardMsg()
                fm.ParseFromString(await asyncio.wait_for(ws.recv(), 120))
                kind = fm.WhichOneof("type")
                if kind == "script_finished":
                    return alerts, errors, urls
                if kind == "page_info_changed":
                    urls.append(fm.page_info_changed.query_string)
                if kind == "delta" and fm.delta.WhichOneof("type") == "new_element":
                    element = fm.delta.new_element
                    if element.WhichOneof("type") == "alert":
                        alerts.append(element.alert.body.replace("\\", ""))
                    if element.WhichOneof("type") == "exception":
                        errors.append(element.exception.message)

    return run_async(run())


def test_numbers_in_links_on_a_real_server(port: int) -> None:
    for seed in ("9" * 5000, "inf"):
        alerts, errors, urls = visit(port, "view=W%5EO&wo_mode=random+orthogonal&wo_seed=" + seed)
        assert not errors, errors
        assert any(a.startswith(f"Ignored from the link: wo_seed={seed[:20]}") and "showing 0)" in a for a in alerts)
        assert urls and "wo_seed" not in urls[-1]


def test_a_link_over_1000_parameters_is_reported_on_a_real_server(port: int) -> None:
    visit(port, "view=Heads")  # the dashboard's code is loaded (and Streamlit's check wrapped) by a first visit
    alerts, errors, urls = visit(port, "&".join(f"p{i}=1" for i in range(2000)) + "&view=Heads")
    assert not errors, errors
    assert any("the whole link (2,001 parameters): Streamlit reads none of a link" in a for a in alerts), alerts
    assert urls and "_link_refused" not in urls[-1] and "p1999" not in urls[-1]  # the marker is gone
