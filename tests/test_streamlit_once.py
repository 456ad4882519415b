"""tests/streamlit_once.py: Streamlit's component scan runs once per test process, not once per AppTest, and
answers what a fresh scan of the installed packages answers."""

from __future__ import annotations

import pytest
from streamlit_once import scan_components_once

SCRIPT = "import streamlit as st\nst.write('hi')"


def test_two_apptests_scan_the_installed_packages_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.components.v2 import manifest_scanner
    from streamlit.testing.v1 import AppTest

    current = manifest_scanner.scan_component_manifests  # this process's kept scan, or the real one
    real = getattr(current, "the_real_scan", current)
    calls: list[int | None] = []

    def counted(max_workers: int | None = None) -> list:
        calls.append(max_workers)
        return real(max_workers)

    monkeypatch.setattr(manifest_scanner, "scan_component_manifests", counted)
    scan_components_once()
    for _ in range(2):
        at = AppTest.from_string(SCRIPT).run()
        assert [m.value for m in at.markdown] == ["hi"]
    assert len(calls) == 1  # the first AppTest's discovery scanned; the second was answered by the kept scan
    assert manifest_scanner.scan_component_manifests() == real() and len(calls) == 1
    scan_components_once()  # installed already: not wrapped twice
    assert manifest_scanner.scan_component_manifests.the_real_scan is counted
