"""Where the suite's time goes, tier by tier (issue 36 §4): summed from the test reports, printed at the end of a run.

Under pytest-xdist the controller receives every worker's reports, so the sums cover the whole run; they add up the
tests' own times (set-up, call and tear-down), not the wall time, which scripts/test.sh prints per pass.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

TIER_ORDER = ("unit", "model", "app", "e2e", "slow")


class TierTimes:
    """Seconds and test counts per tier, from pytest's test reports (``keywords`` carry the tier marker)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, set[str]] = defaultdict(set)

    def add(self, nodeid: str, keywords: Iterable[str], duration: float) -> None:
        """One phase (set-up, call or tear-down) of one test."""
        tier = next((t for t in TIER_ORDER if t in set(keywords)), "untiered")
        self.seconds[tier] += duration
        self.tests[tier].add(nodeid)

    def lines(self) -> list[str]:
        """One line per tier that ran, in tier order, then the total."""
        tiers = [t for t in (*TIER_ORDER, "untiered") if t in self.tests]
        out = [f"{t:>5}: {len(self.tests[t]):5d} tests {self.seconds[t]:8.1f} s" for t in tiers]
        total_tests = sum(len(self.tests[t]) for t in tiers)
        total_s = sum(self.seconds[t] for t in tiers)
        return [*out, f"  all: {total_tests:5d} tests {total_s:8.1f} s (summed over workers, not wall time)"]
