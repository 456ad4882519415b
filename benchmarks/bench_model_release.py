"""What a dropped model leaves behind, and what the collection before each page run costs (issue 21 §2.1).

Run:  python benchmarks/bench_model_release.py
Loads the bundled SmolLM2 through the dashboard's model store three times, dropping it each time, and prints
the process's RSS with it loaded and after the drop, and the time of ui.memo.collect_garbage (the collection
before each page run) with the heap frozen. Measured on the 2-core CI box: loaded ~1010 MB, dropped
457/458/459 MB (before the fix: 916/1431/1946 MB, the frozen model never freed), collect before a run 0.0 ms
(94-158 ms in this script while collect_garbage still asked gc.get_freeze_count(), which walks the frozen list).
"""

from __future__ import annotations

import gc
import time

import psutil

from mha_viz.ui import cache, memo


def main() -> None:
    proc = psutil.Process()

    def rss() -> float:
        return proc.memory_info().rss / 2**20

    cache.get_model("", "cpu")  # the bundled MiniLM, as on a served page
    for i in range(3):
        lm = cache.get_model("smollm2", "cpu")
        loaded = rss()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            memo.collect_garbage()
            times.append((time.perf_counter() - t) * 1000)
        del lm
        cache.MODELS.drop(("smollm2", "cpu"))
        memo.release_memory()
        print(
            f"cycle {i}: loaded {loaded:.0f} MB, dropped {rss():.0f} MB, collect before a run "
            f"{min(times):.1f}-{max(times):.1f} ms, frozen objects {gc.get_freeze_count()}, "
            f"dropped models still alive {memo.dropped_alive()}"
        )


if __name__ == "__main__":
    main()
