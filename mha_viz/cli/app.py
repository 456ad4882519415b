"""``mha-viz app [streamlit options...]``: the dashboard from an installed package (`python -m mha_viz app`).

Runs ``python -m streamlit run <the packaged script>`` with the repository's .streamlit/config.toml settings
as command-line options (a config file is read only from the working folder, which is the user's here);
options given after ``app`` go to Streamlit and win over these (``--server.port 8600``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "serve" / "script" / "streamlit_app.py"
# .streamlit/config.toml, as options (tests/test_package.py checks that the two agree).
STREAMLIT_OPTIONS: dict[str, str] = {
    "server.maxUploadSize": "16",
    "server.enableXsrfProtection": "true",
    "server.enableCORS": "true",
    "server.headless": "true",
    "server.fileWatcherType": "none",
    "runner.postScriptGC": "false",
    "browser.gatherUsageStats": "false",
    "client.showErrorDetails": "none",
    "client.toolbarMode": "minimal",
    "theme.base": "light",
}
ENV = {"HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}  # as scripts/app.sh


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser(
        "app",
        help="start the dashboard (Streamlit); options after it go to Streamlit, e.g. --server.port 8600",
        description="Start the dashboard on http://localhost:8501. Other options go to `streamlit run`.",
    )


def streamlit_command(extra: Sequence[str]) -> list[str]:
    """The command line that serves the dashboard, with ``extra`` Streamlit options last (they win)."""
    extra = list(extra[1:] if extra[:1] == ["--"] else extra)
    options = [f"--{name}={value}" for name, value in STREAMLIT_OPTIONS.items()]
    return [sys.executable, "-m", "streamlit", "run", str(SCRIPT), *options, *extra]


def command(extra: Sequence[str]) -> int:
    """Serve until Streamlit stops; its exit status (128 + N when killed by signal N). SIGTERM and SIGINT
    sent to this process are passed on, so stopping it stops the server: 0 when the server stopped on that
    signal (the app is an st.App: Streamlit's server shuts down, then lets the signal end the process)."""
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in ENV.items()}}
    proc = subprocess.Popen(streamlit_command(extra), env=env)
    forwarded = (signal.SIGTERM, signal.SIGINT)
    passed: list[int] = []

    def pass_on(signum: int, _frame: object) -> None:
        passed.append(signum)
        proc.send_signal(signum)

    previous = {s: signal.signal(s, pass_on) for s in forwarded}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if code < 0 and -code in passed:  # stopped as asked
        return 0
    return 128 - code if code < 0 else code
