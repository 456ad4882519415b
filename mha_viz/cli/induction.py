"""``python -m mha_viz induction``: every head's induction score on random tokens repeated twice, to CSV."""

from __future__ import annotations

import argparse

from mha_viz.cli.options import add_device, check_out, int_in, pretrained
from mha_viz.config import INDUCTION_LENGTH, MAX_INDUCTION_LENGTH, MAX_SEED, MIN_INDUCTION_LENGTH

COLUMNS = ("layer", "head", "induction_score", "rank")


def add_parser(sub: argparse._SubParsersAction) -> None:
    ind = sub.add_parser("induction", help="induction scores of every head on random tokens repeated twice, to CSV")
    ind.add_argument("--model", default="smollm2", help="a decoder: smollm2 (default), a Hugging Face id or folder")
    lo, hi = MIN_INDUCTION_LENGTH, MAX_INDUCTION_LENGTH
    ind.add_argument(
        "--length", type=int_in(lo, hi, "--length"), default=INDUCTION_LENGTH,
        help=f"random tokens per copy, {lo} to {hi} (default {INDUCTION_LENGTH})",
    )  # fmt: skip
    ind.add_argument(
        "--seed", type=int_in(0, MAX_SEED, "--seed"), default=0, help=f"seed of the random tokens (0 to {MAX_SEED})"
    )
    ind.add_argument("--no-bos", action="store_true", help="do not put the model's BOS token in front")
    add_device(ind)
    ind.add_argument("--out", required=True, help="write FILE.csv: one row per head (layer, head, induction_score)")


def command(args: argparse.Namespace) -> None:
    from mha_viz.analysis import csv_cells
    from mha_viz.studies.induction import run_induction

    check_out(args.out, ".csv")
    lm = pretrained(args, "induction needs a pretrained decoder; own weights are one untrained layer")
    result = run_induction(lm, args.length, args.seed, bos=not args.no_bos)
    n_layers, n_heads = result.scores.shape
    rank = {(la, h): i + 1 for i, (la, h, _) in enumerate(result.top_heads(n_layers * n_heads))}
    with open(args.out, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(COLUMNS)
        for la in range(n_layers):
            for h in range(n_heads):
                writer.writerow([la, h, f"{result.scores[la, h]:.6g}", rank[(la, h)]])
    top = ", ".join(f"L{la}H{h} {s:.3f}" for la, h, s in result.top_heads(5))
    print(f"wrote {args.out}: {n_layers * n_heads} heads ({n_layers} layers x {n_heads}); top: {top}")
    print(
        f"mean loss (nats/token) on {len(result.tokens.ids)} tokens: first copy {result.mean_loss(0):.3f}, "
        f"second copy {result.mean_loss(1):.3f}"
    )
