"""Head importance scan and pruning curve speed (issue 13): every head of a model removed in turn.

Run:  python benchmarks/bench_importance.py [--models minilm,smollm2] [--repeats 3]
Baseline, measured in the same run: one intact forward pass of the same text (the scan makes one pass per
head, so "passes" = scan time / baseline tells how much the ablation machinery adds). Target: the 72-head
MiniLM scan on the seed sentence <= 3 s on this 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mha_viz.config import Config
from mha_viz.models.run import run_model
from mha_viz.pipeline.road import load
from mha_viz.studies import importance as im

SENTENCE = "The animal didn't cross the street because it was too tired"
TARGET_S = {"minilm": 3.0}
NAMES = {"minilm": "", "smollm2": "smollm2"}


def timed(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--curve", action="store_true", help="also time the pruning curve (1 + 3 random orders)")
    args = ap.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    for key in args.models.split(","):
        lm = load(Config(model=NAMES[key]))
        scorer = im.Scorer(lm, [SENTENCE])
        ids = scorer.texts[0].ids
        one = timed(lambda lm=lm, ids=ids: run_model(lm, ids, record=False), max(args.repeats, 5))
        n = len(scorer.heads)
        scan = timed(lambda scorer=scorer: im.head_importance(scorer), args.repeats)
        target = TARGET_S.get(key)
        verdict = "" if target is None else f"; target <= {target:.1f} s: {'met' if scan <= target else 'MISSED'}"
        print(
            f"{key}: {n} heads, {len(ids[0])} tokens: scan {scan:.2f} s (median of {args.repeats}); one intact pass "
            f"{one * 1e3:.1f} ms; scan / (heads x pass) = {scan / (n * one):.2f}{verdict}"
        )
        if args.curve:
            imp = im.head_importance(scorer)
            steps = im.curve_steps(n)
            orders = [im.pruning_order(imp), *im.random_orders(scorer.heads, im.RANDOM_SEEDS)]
            t = time.perf_counter()
            for o in orders:
                im.pruning_curve(scorer, o, steps)
            print(f"{key}: pruning curve, {len(steps)} points x {len(orders)} orders: {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
