"""App memory: peak resident memory with MiniLM at 512 tokens, both bundled models loaded, and no growth
across many distinct inputs.

Run:  python benchmarks/bench_memory.py [--inputs 1000] [--pages 200]
Runs the app's real script in this process with Streamlit's AppTest (same caches, same code as the
server): first a 512-token text in the Lesson, Heads and Overview views (peak: target <= 800 MB), then
--pages distinct sentences through the whole page (every 10th a long one), then the rest of --inputs
distinct sentences through the cached pipeline calls only (get_base + get_trace, the part that holds
memory; ~20 ms each, so 1,000 inputs take a minute or so), then the bundled SmolLM2 on a 512-token text
(both models loaded: target <= 1,600 MB). Memory must level off: the last half of the inputs adds little.
Only the app's own copies of the models are loaded (the tokenizer for the long text is loaded alone).
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_MB = 800  # peak with MiniLM at 512 tokens
TARGET_BOTH_MB = 1600  # peak with MiniLM and SmolLM2 both loaded
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
    return " ".join([base] * (24 if long else 1))  # long: under 512 tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=1000, help="distinct inputs in all")
    ap.add_argument("--pages", type=int, default=200, help="of which this many through the whole page")
    args = ap.parse_args()
    from streamlit.testing.v1 import AppTest
    from transformers import AutoTokenizer

    from mha_viz.config import Config
    from mha_viz.models.sources import bundled_model_dir
    from mha_viz.pipeline.road import smollm2_dir
    from mha_viz.selection import Selection
    from mha_viz.ui import cache

    print(f"start: {rss_mb():.0f} MB resident")
    tok = AutoTokenizer.from_pretrained(bundled_model_dir())  # the tokenizer alone: no second model here
    long_text = tok.decode(tok(sentence(0, True) * 3)["input_ids"][1:511])
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["text"] = long_text
    for view in ("Lesson", "Heads", "Overview"):
        at.query_params["view"] = view
        at.run()
        assert not at.exception, at.exception
    peak512 = peak_mb()
    print(f"after 512 tokens (Lesson, Heads, Overview): {rss_mb():.0f} MB resident, peak {peak512:.0f} MB "
          f"(target <= {TARGET_MB} MB: {'ok' if peak512 <= TARGET_MB else 'MISSED'})")  # fmt: skip
    at.query_params["view"] = "Heads"
    marks = {}
    config = Config()
    for i in range(1, args.inputs + 1):
        text = sentence(i, long=i % 10 == 0)
        if i <= args.pages:
            at.sidebar.text_area(key="text").set_value(text).run()
            assert not at.exception, at.exception
        else:  # the cached pipeline calls of a page (what holds memory), without drawing
            cache.get_trace(Selection(config, text, None, cache.get_base(Selection(config, text)).part, 0))
        if i % max(20, args.inputs // 20) == 0:
            marks[i] = rss_mb()
            print(f"  {i:>5} inputs: {marks[i]:.0f} MB resident", flush=True)
    half = args.inputs // 2
    first = marks[min(marks, key=lambda k: abs(k - half))]
    last = marks[max(marks)]
    growth = last - first
    verdict = "levels off" if growth < 100 else "GROWS"
    print(f"growth over the last {args.inputs - half} inputs: {growth:+.0f} MB ({verdict}); peak so far "
          f"{peak_mb():.0f} MB (the caches together hold at most MHA_VIZ_CACHE_MB)")  # fmt: skip
    smollm2_dir()
    at.query_params["src"] = "smollm2"
    at.query_params["text"] = long_text
    at.run()
    assert not at.exception, at.exception
    both = peak_mb()
    print(f"both bundled models loaded, SmolLM2 at 512 tokens: {rss_mb():.0f} MB resident, peak {both:.0f} MB "
          f"(target <= {TARGET_BOTH_MB} MB: {'ok' if both <= TARGET_BOTH_MB else 'MISSED'})")  # fmt: skip


if __name__ == "__main__":
    main()
