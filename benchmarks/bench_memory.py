"""App memory: peak resident memory with MiniLM at 512 tokens, and no growth across 200 distinct inputs.

Run:  python benchmarks/bench_memory.py [--inputs 200]
Runs the app's real script in this process with Streamlit's AppTest (same caches, same code as the
server), first on a 512-token text in the Heads and Overview views, then on 200 distinct sentences
(every 10th a long one). Prints resident memory along the way and the peak.
Targets: peak <= 1.5 GB; memory levels off (the last 100 inputs add little over the first 100).
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = [
    "animal",
    "street",
    "tired",
    "wide",
    "river",
    "bank",
    "money",
    "cat",
    "mat",
    "dog",
    "park",
    "rain",
    "sun",
    "tree",
    "road",
    "car",
    "book",
]


def rss_mb() -> float:
    """Current resident memory of this process (MB)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sentence(i: int, long: bool) -> str:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(8)]
    base = f"Input {i}: the {' '.join(words)} because it was too {WORDS[i % len(WORDS)]}."
    return " ".join([base] * (40 if long else 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=200)
    args = ap.parse_args()
    from streamlit.testing.v1 import AppTest

    from mha_viz.models.load import load_model

    print(f"start: {rss_mb():.0f} MB resident")
    lm = load_model(None, "cpu")
    ids = lm.tokenizer(sentence(0, True) * 3)["input_ids"][1:511]
    long_text = lm.tokenizer.decode(ids)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["text"] = long_text
    at.run()
    assert not at.exception, at.exception
    at.query_params["view"] = "Overview"
    at.run()
    print(f"after 512 tokens (Heads + Overview): {rss_mb():.0f} MB resident, peak {peak_mb():.0f} MB")
    at.query_params["view"] = "Heads"
    marks = {}
    for i in range(1, args.inputs + 1):
        at.sidebar.text_input(key="text").set_value(sentence(i, long=i % 10 == 0)).run()
        assert not at.exception, at.exception
        if i % 20 == 0:
            marks[i] = rss_mb()
            print(f"  {i:>4} inputs: {marks[i]:.0f} MB resident")
    half = args.inputs // 2
    first, last = marks.get(half - half % 20 or 20), marks[max(marks)]
    peak = peak_mb()
    print(f"peak resident memory: {peak:.0f} MB (target <= 1536 MB: {'ok' if peak <= 1536 else 'MISSED'})")
    growth = last - first
    verdict = "levels off" if growth < 100 else "GROWS"
    print(f"growth over the last {args.inputs - half} inputs: {growth:+.0f} MB ({verdict})")


if __name__ == "__main__":
    main()
