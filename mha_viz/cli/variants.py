"""``python -m mha_viz variants``: the model converted to fewer K/V heads (MHA → GQA → MQA), the whole-model
output change against the key/value cache size, to CSV (mha_viz/studies/variants.py)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mha_viz.analysis import csv_cells
from mha_viz.cli.options import add_device, add_input, check_out, pretrained, request, texts

if TYPE_CHECKING:
    from mha_viz.pipeline.road import LoadedModel
    from mha_viz.selection import Selection

COLUMNS = ("grouping", "kv_heads", "kv_cache_bytes", "change")
GROUPINGS_SHOWN = ("aligned", "orthogonal")  # printed beside "mean"
MOH_COLUMNS = ("k", "change_routed", "change_static")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "variants", help="share keys and values (MHA → GQA → MQA): output change against KV cache size, to CSV"
    )
    add_input(p, many=True)
    p.add_argument(
        "--moh",
        action="store_true",
        help="instead: mixture of heads, top-k heads per token against static pruning (columns k, change_routed, "
        "change_static)",
    )
    add_device(p)
    p.add_argument(
        "--out", required=True, help="write FILE.csv: one row per (grouping, kv_heads): kv_cache_bytes, change"
    )


def command(args: argparse.Namespace) -> None:
    from mha_viz.studies import importance, variants

    check_out(args.out, ".csv")
    lm = pretrained(args, "variants needs a pretrained model; own weights are one layer with no output to measure")
    sel = request(args, lm)  # --part, --target (and the first --text; every --text is averaged)
    if args.moh:
        _moh(lm, sel, texts(args), args.out)
        return
    found = variants.study(lm, texts(args), sel.part, sel.target)
    with open(args.out, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows([p.grouping, p.kv_heads, f"{p.kv_cache_bytes:.6g}", f"{p.change:.6g}"] for p in found.points)
    print(
        f"wrote {args.out}: {len(found.points)} rows; {found.n_layers} layers, {found.n_heads} query heads, "
        f"{found.n_kv_heads} K/V heads of {found.d_head}; measure: {importance.measure_name(lm)}"
    )
    print(f"KV cache = {variants.CACHE_FORMULA}; at {variants.LONG_CONTEXT:,} tokens:")
    for p in found.curve("mean"):
        other = "".join(
            f", {gr} {a.change:.4g}" for gr in GROUPINGS_SHOWN for a in found.curve(gr) if a.kv_heads == p.kv_heads
        )
        print(f"  {p.kv_heads} K/V heads: {p.long_cache_bytes / 2**20:,.0f} MiB; change mean {p.change:.4g}{other}")


def _moh(lm: LoadedModel, sel: Selection, all_texts: list[str], out: str) -> None:
    from mha_viz.studies import importance, moh

    c = moh.moh_curve(lm, all_texts, sel.part, sel.target)
    with open(out, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(MOH_COLUMNS)
        rows = zip(c.ks, c.routed, c.static, strict=True)
        writer.writerows([int(k), f"{r:.6g}", f"{s:.6g}"] for k, r, s in rows)
    print(
        f"wrote {out}: k = 0 … {c.n_heads} heads kept per token and layer; router: {moh.ROUTER}; static: "
        f"{c.n_layers} · (h − k) heads pruned in importance order; measure: {importance.measure_name(lm)}"
    )
    for k, r, s in zip(c.ks, c.routed, c.static, strict=True):
        print(f"  k = {k}: routed {r:.4g}, static {s:.4g}")
