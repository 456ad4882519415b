"""``mha-viz kv``: what a compressed KV cache keeps and what that changes (studies/kv_lens.py): one policy at one
budget, or with --curve every policy at several budgets and the seed's K/V sharing, to CSV; --heads-out writes the
per-head map (the loss each K/V head's evictions cause: its full cache restored alone)."""

from __future__ import annotations

import argparse

from mha_viz.analysis import csv_cells
from mha_viz.cli.options import add_device, check_out, pretrained
from mha_viz.config import KV_PREFIX_SHARE
from mha_viz.errors import MhaVizError

COLUMNS = ("policy", "budget", "kv_bytes", "kl", "loss_change", "lost_mass")
HEAD_COLUMNS = ("layer", "kv_head", "loss_from_evictions", "lost_mass")
POLICIES = ("streaming", "h2o", "snapkv", "tova", "adakv", "duo")  # kv_policies.POLICIES (no numpy while parsing)
POLICY_HELP = (
    "streaming: StreamingLLM (sinks + window); h2o: heavy hitters + recent; snapkv: observation-window votes, pooled; "
    "tova: the last token's attention; adakv: head-wise budgets on SnapKV's scores; duo: DuoAttention-style, "
    "retrieval heads keep all"
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kv", help="KV cache eviction policies per head: KL, loss change and lost attention, to CSV")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text-file", help="read the text from this file (UTF-8)")
    src.add_argument("--text", help="the text")
    p.add_argument("--model", default="smollm2", help="a causal LM: smollm2 (default), a Hugging Face id or folder")
    p.add_argument("--policy", choices=POLICIES, default="snapkv", help=POLICY_HELP)
    p.add_argument("--budget", type=float, default=0.25, help="kept per K/V head: a share of the prefix, or tokens")
    p.add_argument("--prefix-share", type=float, default=KV_PREFIX_SHARE, help="the share of the text that is cached")
    p.add_argument("--curve", action="store_true", help="every policy at several budgets, and K/V sharing")
    p.add_argument("--heads-out", help="also write FILE.csv: per layer and K/V head, the loss its evictions cause")
    add_device(p, spread=False)
    p.add_argument("--out", required=True, help="write FILE.csv: " + ", ".join(COLUMNS))


def read_text(args: argparse.Namespace) -> str:
    if args.text is not None:
        text = args.text
    else:
        with open(args.text_file, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    if not text.strip():
        raise MhaVizError("the text is empty")
    return text


def command(args: argparse.Namespace) -> None:
    check_out(args.out, ".csv")
    if args.heads_out:
        check_out(args.heads_out, ".csv", flag="--heads-out")
    if not args.budget > 0 or args.budget != args.budget or args.budget == float("inf"):
        raise MhaVizError(f"--budget is a share in (0, 1] or a token count ≥ 1, not {args.budget}")
    if not 0 < args.prefix_share < 1:
        raise MhaVizError(f"--prefix-share is between 0 and 1, not {args.prefix_share}")
    text = read_text(args)
    from mha_viz.analysis.plans.kv import rows
    from mha_viz.studies import kv_lens

    lm = pretrained(args, "the KV cache lens needs a pretrained causal language model, not own weights")
    pre = kv_lens.prefill(lm, text, args.prefix_share)
    point = kv_lens.evaluate(lm, pre, args.policy, args.budget)
    points = kv_lens.curve(lm, pre) if args.curve else [point]
    with open(args.out, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows(rows(points))  # the view's table, the same cells
    L, H, P = pre.shape
    print(f"wrote {args.out}: {len(points)} rows; {lm.name}, {L} layers, {H} query heads on {lm.n_kv_heads} K/V heads; "
          f"prefix {P} of {pre.ids.shape[1]} tokens cached; full-cache loss on the rest {pre.loss:.4f}")  # fmt: skip
    print(f"{args.policy} at {args.budget:g}: KL {point.kl:.4g}, loss change {point.loss_change:+.4g} nats, "
          f"lost mass {point.lost_mass:.3f}")  # fmt: skip
    print("  top-5 before: " + ", ".join(f"{t!r} {p:.3f}" for t, p in point.top_before))
    print("  top-5 after:  " + ", ".join(f"{t!r} {p:.3f}" for t, p in point.top_after))
    if args.heads_out:
        caused = kv_lens.restore_map(lm, pre, point.keep)  # [L, kv]
        lost = point.lost.reshape(L, lm.n_kv_heads, -1).mean(-1)  # [L, kv]: its query heads' mean lost mass
        with open(args.heads_out, "w", encoding="utf-8", newline="") as fh:
            writer = csv_cells.writer(fh)
            writer.writerow(HEAD_COLUMNS)
            writer.writerows([la, j, f"{caused[la, j]:.6g}", f"{lost[la, j]:.6g}"] for la in range(L)
                             for j in range(lm.n_kv_heads))  # fmt: skip
        print(f"wrote {args.heads_out}: the loss each K/V head's evictions cause (its full cache restored alone)")
