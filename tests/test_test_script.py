"""scripts/test.sh runs the suite in two passes (issue 36 §4): every tier but e2e over the cores, then e2e over two
workers (MHA_VIZ_E2E_WORKERS); a caller's -m narrows both, a pass that finds nothing is fine when the other ran, and
each pass's wall time and the tiers' times are printed. Run for real on one small unit-test file (lint included)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_runs_in_two_passes_and_says_how_long_each_took() -> None:
    done = subprocess.run(
        ["bash", "scripts/test.sh", "tests/test_tier_times.py", "-m", "unit or e2e", "-p", "no:cacheprovider"],
        cwd=ROOT, env={**os.environ, "MHA_VIZ_E2E_WORKERS": "2"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    first, second = out.split("test session starts")[1:]  # two pytest sessions, one after the other
    # pass 1, over the workers: the file's two unit tests, and the time per tier
    assert re.search(r"created: \d+/\d+ workers", first) and "2 passed" in first, first[-2000:]
    assert re.search(r"time per tier -+\n unit:\s+2 tests\s+[\d.]+ s\n", first), first[-2000:]
    # pass 2, e2e only, over its workers: nothing of that file, which is no failure since pass 1 ran tests
    assert "created: 2/2 workers" in second and "2 workers [0 items]" in second, second[-2000:]
    assert "passed" not in second, second[-2000:]
    times = re.search(r"test passes: .* over the cores (\d+) s; e2e tier over 2 workers (\d+) s; in all (\d+) s", out)
    assert times and int(times[3]) >= int(times[1]) + int(times[2]), out[-1000:]


def test_a_selection_that_neither_pass_finds_fails() -> None:
    done = subprocess.run(
        ["bash", "scripts/test.sh", "tests/test_tier_times.py", "-m", "app", "-p", "no:cacheprovider"],
        cwd=ROOT, env={**os.environ, "MHA_VIZ_E2E_WORKERS": "1"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    assert "pytest collected no tests; that is a failure here" in done.stderr
    assert "e2e tier in one process" in done.stdout  # pass 1 found none, so pass 2 still ran (here: no workers)
