"""``python -m mha_viz importance``: every head's importance to CSV, and the pruning curve with --curve."""

from __future__ import annotations

import argparse

from mha_viz.analysis import csv_cells
from mha_viz.cli.options import add_device, add_input, check_out, pretrained, request, texts

COLUMNS = ("layer", "head", "importance")
CURVE_COLUMNS = ("heads_removed", "share_removed", "by_importance", "random_mean", "random_min", "random_max")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("importance", help="each head's importance by ablation to CSV (and the pruning curve)")
    add_input(p, many=True)
    add_device(p)
    p.add_argument("--out", required=True, help="write FILE.csv: one row per head (layer, head, importance)")
    p.add_argument(
        "--curve",
        default=None,
        help="also write FILE.csv: the pruning curve (heads removed least important first, against random orders)",
    )


def command(args: argparse.Namespace) -> None:
    from mha_viz.studies import importance as im

    out = check_out(args.out, ".csv")
    curve_path = None if args.curve is None else check_out(args.curve, ".csv", flag="--curve")
    lm = pretrained(args, "importance needs a pretrained model; own weights are one layer with no output to measure")
    scorer = im.Scorer.of(lm, request(args, lm), texts(args))  # --part, --target; every --text averaged
    imp = im.head_importance(scorer)
    L, H = imp.shape
    with open(out, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows([la, h, f"{imp[la, h]:.6g}"] for la in range(L) for h in range(H))
    top = sorted(((imp[la, h], la, h) for la in range(L) for h in range(H)), reverse=True)[:5]
    print(f"wrote {out}: {L * H} heads; measure: {im.measure_name(lm)}")
    print("most important: " + ", ".join(f"L{la}H{h} {v:.4g}" for v, la, h in top))
    if curve_path is None:
        return
    curves = im.pruning_curves(scorer, imp)
    steps, greedy, rand = [int(k) for k in curves["steps"]], curves["by_importance"], curves["random"]
    n = L * H
    with open(curve_path, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(CURVE_COLUMNS)
        for i, k in enumerate(steps):
            r = rand[:, i]
            writer.writerow(
                [k, f"{k / n:.6g}", f"{greedy[i]:.6g}", *(f"{v:.6g}" for v in (r.mean(), r.min(), r.max()))]
            )
    half = steps.index(min(steps, key=lambda k: abs(k - n / 2)))
    print(
        f"wrote {curve_path}: {len(steps)} points; with {steps[half]} of {n} heads removed: "
        f"{greedy[half]:.4g} by importance, {rand[:, half].mean():.4g} in random order (mean of {len(im.RANDOM_SEEDS)})"
    )
