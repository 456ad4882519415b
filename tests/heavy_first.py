"""The order files go to the pytest-xdist workers: the heaviest first (issue 36 §4).

``--dist loadfile`` hands a worker a whole file at a time; with ``--no-loadscope-reorder`` (scripts/test.sh) in the
order collected, so a long file with few tests (the script's own run, a browser test that opens three pages) no longer
starts last and runs alone on one core while the other worker is idle. The seconds below were measured per file
and per pass (docs/test-times.md: CPU seconds of pass 1's tests; the e2e pass's summed test time); they only order
the files, they decide nothing else. A file not listed counts ``UNLISTED_S`` a test, so a new file still finds its
place by size; a stale figure costs only balance.
"""

from __future__ import annotations

from typing import Any

UNLISTED_S = 0.5  # a test of a file not listed below (the suite's mean is ~0.6 s in pass 1)

PASS1_S = {  # every tier but e2e: CPU seconds of each file's tests
    "tests/test_coverage.py": 65, "tests/test_patching.py": 55, "tests/test_kv_view.py": 41,
    "tests/test_kv_lens.py": 39, "tests/test_long_text.py": 37, "tests/test_budget_views.py": 35,
    "tests/test_corpus_batch.py": 32, "tests/test_app.py": 31, "tests/test_long_views.py": 26,
    "tests/test_offload.py": 22, "tests/test_new_attention_views.py": 22, "tests/test_variants.py": 22,
    "tests/test_pool_ahead.py": 22, "tests/test_link_numbers.py": 21, "tests/test_opened_head.py": 21,
    "tests/test_app_circuits.py": 20, "tests/test_importance.py": 20, "tests/test_logits.py": 18,
    "tests/test_url_state.py": 18, "tests/test_view_estimates.py": 18, "tests/test_models.py": 18,
}  # fmt: skip
E2E_S = {  # the e2e tier: each file's summed test time (wall: mostly other processes)
    "tests/e2e/test_shared_url.py": 235, "tests/e2e/test_browser.py": 160, "tests/test_test_script.py": 131,
    "tests/test_package.py": 115, "tests/e2e/test_replicas.py": 109, "tests/e2e/test_opened_head.py": 108,
    "tests/e2e/test_hostile.py": 95, "tests/test_budget_views.py": 88, "tests/e2e/test_two_sentences.py": 86,
    "tests/test_cli.py": 82, "tests/test_server_hardening.py": 72, "tests/test_corpus.py": 63,
    "tests/test_server_ready.py": 58, "tests/test_stored_page.py": 55, "tests/test_allocator.py": 52,
    "tests/test_server_start.py": 44, "tests/test_client_limits.py": 43, "tests/test_rerun_limits.py": 40,
    "tests/e2e/test_patching_map.py": 31, "tests/e2e/test_html_export.py": 30, "tests/test_link_server.py": 25,
    "tests/test_page_cost.py": 25, "tests/test_notebook.py": 20,
}  # fmt: skip


def heaviest_first(items: list[Any], rel: Any, is_e2e: Any) -> list[Any]:
    """``items`` ordered by their file's seconds in their pass, heaviest first; a file's tests keep their order, and
    files of equal weight keep theirs. ``rel(item)``: the item's file relative to the repository, as in the tables;
    ``is_e2e(item)``: whether it runs in the e2e pass."""
    first: dict[tuple[str, bool], int] = {}
    count: dict[tuple[str, bool], int] = {}
    for i, item in enumerate(items):
        key = (rel(item), bool(is_e2e(item)))
        first.setdefault(key, i)
        count[key] = count.get(key, 0) + 1

    def weight(key: tuple[str, bool]) -> float:
        table = E2E_S if key[1] else PASS1_S
        return table.get(key[0], UNLISTED_S * count[key])

    return sorted(items, key=lambda it: (-weight(k := (rel(it), bool(is_e2e(it)))), first[k]))
