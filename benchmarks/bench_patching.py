"""Exact activation patching speed (issue 24 §5): every head patched, several patched runs per forward pass.

Run:  python benchmarks/bench_patching.py [--models minilm,smollm2] [--repeats 1] [--what out]
Baseline, measured in the same run: one unpatched forward pass of the corrupted text. Printed: the scan's time
(the clean recording and the corrupted baseline included: pt.prepare + pt.patch_heads), the ratio scan / one pass,
the same with one patched run per pass (no batching), and the top heads by |recovered|.
Pairs: MiniLM the tired/wide pair (cosine difference of "it" to "animal" and "street"), SmolLM2 the IOI pair
(logit(" Mary") − logit(" John")).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import median_time

from mha_viz.config import Config
from mha_viz.models.run import run_model
from mha_viz.pipeline import estimates
from mha_viz.pipeline.road import load
from mha_viz.studies import patching as pt
from mha_viz.studies.attribution_patching import attribution

TIRED = "The animal didn't cross the street because it was too tired"
PAIRS = {"minilm": ("", TIRED, TIRED.replace("tired", "wide")), "smollm2": ("smollm2", *pt.IOI)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--what", choices=list(pt.WHATS), default="out")
    ap.add_argument("--unbatched", action="store_true", help="also time one patched run per pass")
    args = ap.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    for key in args.models.split(","):
        name, clean, corrupt = PAIRS[key]
        lm = load(Config(model=name))
        pair = pt.prepare(lm, clean, corrupt)
        one, _ = median_time(lambda lm=lm, pair=pair: run_model(lm, pair.corrupt_ids, record=False), 5)

        def scan(lm=lm, clean=clean, corrupt=corrupt):
            return pt.patch_heads(pt.prepare(lm, clean, corrupt), args.what)

        took, patched = median_time(scan, args.repeats)
        n = patched.size
        size = pt.batch_size(lm, pair.corrupt_ids.shape[1])
        print(
            f"{key}: {n} heads ({args.what}), {pair.corrupt_ids.shape[1]} tokens, {size} runs per pass: scan "
            f"{took:.2f} s; one unpatched pass {one * 1e3:.1f} ms; scan / one pass = {took / one:.1f} "
            f"({took / (n * one):.2f} per head)"
        )
        took_a, est = median_time(lambda pair=pair: attribution(pair, args.what), args.repeats)
        r = float(np.corrcoef(est.ravel(), patched.ravel())[0, 1])
        print(
            f"{key}: attribution patching {took_a:.3f} s on the prepared pair (the clean and corrupted recordings "
            f"that exact patching shares are not counted) = {took_a / one:.1f} unpatched passes (target ≤ 3); "
            f"exact scan / attribution = {took / took_a:.1f}; correlation with exact r = {r:.3f}"
        )
        if args.unbatched:
            old, estimates.MAX_PATCH_BATCH = estimates.MAX_PATCH_BATCH, 1
            try:
                slow, _ = median_time(scan, 1)
            finally:
                estimates.MAX_PATCH_BATCH = old
            print(f"{key}: one patched run per pass: {slow:.2f} s; scan / one pass = {slow / one:.1f}")
        rec = pair.recovered(patched)
        print(f"  metric: {pair.metric.describe()}; clean {pair.clean:.4f}, corrupted {pair.corrupted:.4f}")
        for la, h, r in pt.top_heads(rec, 8):
            print(f"  L{la}H{h}: recovered {r:+.3f} (patched {patched[la, h]:.4f})")


if __name__ == "__main__":
    main()
