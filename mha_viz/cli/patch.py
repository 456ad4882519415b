"""``python -m mha_viz patch``: activation patching per head (mha_viz/studies/patching.py) to CSV."""

from __future__ import annotations

import argparse

from mha_viz.analysis import csv_cells
from mha_viz.cli.options import add_device, add_model, check_out, pretrained
from mha_viz.errors import MhaVizError

COLUMNS = ("layer", "head", "patched", "recovered", "clean", "corrupted")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("patch", help="activation patching: each head's clean value put into the corrupted run, to CSV")
    p.add_argument("--clean", required=True, help="the clean text")
    p.add_argument("--corrupt", required=True, help="the corrupted text (the same number of tokens)")
    add_model(p)
    p.add_argument("--answer", default=None, help='decoders: the answer token (default " Mary")')
    p.add_argument("--wrong", default=None, help='decoders: the wrong token (default " John")')
    p.add_argument("--focus", default="it", help='encoders: the focus token (default "it")')
    p.add_argument(
        "--referents", nargs=2, default=["animal", "street"], metavar=("R1", "R2"),
        help='encoders: the two referents (default "animal" "street")',
    )  # fmt: skip
    p.add_argument("--what", choices=("out", "q", "k", "v"), default="out",
                   help="patch each head's output (default), query, key or value (k, v: per K/V head)")  # fmt: skip
    p.add_argument(
        "--sender", nargs=2, type=int, default=None, metavar=("LAYER", "HEAD"),
        help="path patching: that head's clean output reaching each later head only through its --what (q, k or v)",
    )  # fmt: skip
    p.add_argument(
        "--method", choices=("exact", "attribution"), default="exact",
        help="exact patching (one run per head, batched; default) or attribution patching (first-order estimate)",
    )  # fmt: skip
    add_device(p)
    p.add_argument("--out", required=True, help="write FILE.csv: one row per head (per K/V head for k, v)")


def command(args: argparse.Namespace) -> None:
    import numpy as np

    from mha_viz.studies import patching as pt

    check_out(args.out, ".csv")
    lm = pretrained(args, "patch needs a pretrained model; own weights are one layer with no output to measure")
    if args.sender is not None and args.what == "out":
        raise MhaVizError("path patching reaches a later head through its q, k or v: add --what q, k or v")
    if args.sender is not None and args.method == "attribution":
        raise MhaVizError("path patching is exact only; leave out --method attribution or --sender")
    pair = pt.prepare(lm, args.clean, args.corrupt, args.answer, args.wrong, args.focus, tuple(args.referents))
    if args.method == "attribution":
        from mha_viz.studies.attribution_patching import attribution

        patched = attribution(pair, args.what)
    elif args.sender is None:
        patched = pt.patch_heads(pair, args.what)
    else:
        from mha_viz.studies.path_patching import path_patch

        patched = path_patch(pair, tuple(args.sender), args.what)  # NaN: layers up to the sender's
    recovered = pair.recovered(patched)
    L, G = patched.shape
    kv = args.what in ("k", "v")
    with open(args.out, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow((*COLUMNS, "query_heads") if kv else COLUMNS)
        for la in range(L):
            for h in range(G) if np.isfinite(patched[la]).all() else ():
                row = [la, h, *(f"{v:.6g}" for v in (patched[la, h], recovered[la, h], pair.clean, pair.corrupted))]
                writer.writerow([*row, " ".join(map(str, pt.sharing(lm, h)))] if kv else row)
    unit = "K/V heads" if kv and lm.n_heads != G else "heads"
    n = int(np.isfinite(patched).sum())
    path = "" if args.sender is None else f" from L{args.sender[0]}H{args.sender[1]}"
    how = " (attribution estimate)" if args.method == "attribution" else ""
    print(f"wrote {args.out}: {n} {unit}{how}; patched{path}: {pt.WHATS[args.what]}; metric: {pair.metric.describe()}")
    print(f"clean {pair.clean:.4g}, corrupted {pair.corrupted:.4g}; most recovered: "
          + ", ".join(f"L{la}H{h} {r:+.3f}" for la, h, r in pt.top_heads(recovered, 5)))  # fmt: skip
