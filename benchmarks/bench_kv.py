"""The KV cache lens (issue 39): how long a budget change takes after the first run, against one forward pass in the
same run, and the budget-versus-quality curve of every policy on SmolLM2 at a long text.

Run:  python benchmarks/bench_kv.py [--tokens 4096] [--curve-tokens 3000] [--text-file F] [--restore] [--device cuda]
A budget change recomputes only the masks and the lost mass from the recorded prefill (what the view redraws before
its one pass for the numbers); the floor is one plain forward pass of the same text (record=False). Target (issue 39
§3): ≤ 1 s at 4,096 tokens. The curve: every policy at KV_BUDGETS and the K/V sharing point, then which policy loses
least at 25 %, and (--restore) which K/V heads carry that policy's loss (one head's full cache restored at a time).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mha_viz import pipeline
from mha_viz.analysis import kv_policies as kvp
from mha_viz.analysis.plans.kv import best_at, top_heads
from mha_viz.config import Config
from mha_viz.pipeline.road import load
from mha_viz.studies import kv_lens

CORPUS = Path(__file__).resolve().parents[1] / "mha_viz" / "studies" / "corpus_examples.txt"
TARGET_S = 1.0


def text_of(lm, path: Path, tokens: int) -> str:
    """The first ``tokens`` tokens of the file's text (decoded back to text)."""
    ids = lm.tokenizer(path.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    if len(ids) < tokens:
        raise SystemExit(f"{path} has only {len(ids)} tokens; give a longer --text-file")
    return lm.tokenizer.decode(ids[:tokens])


def budget_change(lm, tokens: int, path: Path) -> None:
    text = text_of(lm, path, tokens)
    t = time.perf_counter()
    pre = kv_lens.prefill(lm, text)
    first = time.perf_counter() - t
    t = time.perf_counter()
    pipeline.run(lm, pre.ids, record=False, extras=False)
    floor = time.perf_counter() - t
    times = []
    for policy in kvp.POLICIES:
        for budget in (0.1, 0.25, 0.5):
            t = time.perf_counter()
            keep = kvp.keep_mask(policy, pre.stats, budget)
            kv_lens.lost_mass(pre, keep)
            times.append(time.perf_counter() - t)
    change = statistics.median(times)
    print(f"{pre.ids.shape[1]} tokens: first run (record + prefill sums) {first:.2f} s; one forward pass {floor:.2f} s")
    print(f"  budget change (masks + lost mass), median of {len(times)}: {change * 1e3:.1f} ms, max "
          f"{max(times) * 1e3:.1f} ms = {change / floor:.3f} forward passes; target ≤ {TARGET_S} s: "
          f"{'met' if max(times) <= TARGET_S else 'NOT met'}")  # fmt: skip


def the_curve(lm, tokens: int, path: Path, restore: bool) -> None:
    text = text_of(lm, path, tokens)
    pre = kv_lens.prefill(lm, text)
    t = time.perf_counter()
    points = kv_lens.curve(lm, pre, progress=lambda f, what: print(f"  … {what}", file=sys.stderr, flush=True))
    spent = time.perf_counter() - t
    P = pre.prefix
    print(f"\ncurve at {pre.ids.shape[1]} tokens (prefix {P}), {len(points)} points in {spent:.0f} s; full-cache loss "
          f"on the continuation {pre.loss:.4f} nats")  # fmt: skip
    print(f"{'policy':<16}{'budget':>8}{'MiB':>9}{'Δ loss':>10}{'KL':>10}{'lost mass':>11}")
    for p in points:
        print(f"{p.policy:<16}{p.budget:>8.2f}{p.kv_bytes / 2**20:>9.2f}{p.loss_change:>+10.4f}{p.kl:>10.4f}"
              f"{p.lost_mass:>11.4f}")  # fmt: skip
    print(best_at(points, 0.25))
    at25 = sorted((p for p in points if p.policy in kvp.POLICIES and p.budget == 0.25), key=lambda p: p.loss_change)
    for p in at25:
        print(f"  {p.policy}: most mass lost by {top_heads(p.lost, 3)}")
    for which, point in (("worst", at25[-1]), ("best", at25[0])) if restore and at25 else ():
        t = time.perf_counter()
        caused = kv_lens.restore_map(lm, pre, point.keep)  # [L, kv] nats
        print(
            f"{point.policy} ({which}) at 25 %: the K/V heads whose evictions cause most loss: "
            f"{top_heads(caused, 5, 'K/V head')}; sum {caused.sum():+.4f}, total {point.loss_change:+.4f} "
            f"({time.perf_counter() - t:.0f} s)"
        )
        for layer in range(caused.shape[0]):
            print(f"  layer {layer:>2}: " + " ".join(f"{c:+.4f}" for c in caused[layer]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096, help="the budget-change timing's text length")
    ap.add_argument("--curve-tokens", type=int, default=3000, help="the curve's text length (0: no curve)")
    ap.add_argument("--text-file", type=Path, default=CORPUS, help="a UTF-8 text of at least --tokens tokens")
    ap.add_argument("--restore", action="store_true", help="also the per-head maps of the worst and best at 25 %%")
    ap.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda")
    args = ap.parse_args()
    print(f"torch threads: {torch.get_num_threads()}; device: {args.device}; text: {args.text_file}")
    lm = load(Config(model="smollm2", device=args.device))
    budget_change(lm, args.tokens, args.text_file)
    if args.curve_tokens:
        the_curve(lm, args.curve_tokens, args.text_file, args.restore)


if __name__ == "__main__":
    main()
