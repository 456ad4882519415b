"""Streamlit's scan of the installed packages for v2 components, once per test process (issue 36 §4).

Each new ``AppTest`` makes its own ``BidiComponentManager`` and its first run discovers components by reading the
metadata of every installed distribution (``streamlit.components.v2.manifest_scanner.scan_component_manifests``:
~110 packages here, ~0.3 CPU s, as much as a small page's own run, paid by every ``run_app``). A real server scans
once, when its ``Runtime`` starts. The installed packages do not change while the tests run, so the scan's answer
is kept for the process: each AppTest still registers what it returns in a manager of its own. The dashboard
declares no components (the scan finds none here); the answer is the real scan's, made once.
"""

from __future__ import annotations

import functools
import sys
from typing import Any


def scan_components_once() -> None:
    """Keep the component scan's answer for this process, once Streamlit is imported (collecting any module that
    imports tests/apptest_helpers.py imports it); before that, or when already done, nothing."""
    if "streamlit" not in sys.modules:
        return
    from streamlit.components.v2 import manifest_scanner

    real = manifest_scanner.scan_component_manifests
    if getattr(real, "the_real_scan", None) is not None:
        return
    kept = functools.cache(real)

    def scan(max_workers: int | None = None) -> list[Any]:
        return list(kept(max_workers))  # a new list each time, as a scan gives

    scan.the_real_scan = real  # type: ignore[attr-defined]
    manifest_scanner.scan_component_manifests = scan
