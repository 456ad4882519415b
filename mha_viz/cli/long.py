"""``python -m mha_viz long``: the heads that matter at length on your own long text, to CSV (issue 38 §4).

One row per head: layer, head, sink, local, retrieval, kind (DuoAttention: retrieval or streaming), then pattern
(MInference's kind) and its three recalls. The needle test's recall (no head masked, the top-k retrieval heads
masked, k random heads masked) is printed. ``--html FILE`` also draws the three layer × head maps
(figures/long_heads.py); ``--from-csv heads.csv --html FILE`` draws them from a CSV written before, with no model run
(a CSV holds no recalls: the title says so)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mha_viz.cli.options import add_device, check_out, int_in, pretrained
from mha_viz.config import MAX_LONG_TEXT_CHARS, MAX_SEED, MAX_TEXT_CHARS, hosted
from mha_viz.errors import MhaVizError

if TYPE_CHECKING:  # numpy loads when a command runs, not when the CLI parses
    import numpy as np

COLUMNS = ("layer", "head", "sink", "local", "retrieval", "kind", "pattern", "a_shape", "vertical_slash",
           "block_sparse")  # fmt: skip


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("long", help="sink, local and retrieval scores of every head on a long text, to CSV")
    p.add_argument("--model", default="smollm2", help="a decoder: smollm2 (default), a Hugging Face id or folder")
    p.add_argument("--text-file", default=None, help="a UTF-8 text file: the long text (up to the model's window)")
    p.add_argument("--needle", default="", help="the needle sentence (default: 'The secret word of the day is "
                   "tangerine.'); the model is asked for its last word")  # fmt: skip
    p.add_argument("--answer", default="", help="the needle's word the model should copy (default: its last word)")
    p.add_argument("--depths", default="0.1,0.3,0.5,0.7,0.9", help="needle depths, 0 to 1, comma-separated")
    p.add_argument("--k", type=int_in(1, 4096, "--k"), default=8, help="heads masked in the masking experiment")
    p.add_argument("--seed", type=int_in(0, MAX_SEED, "--seed"), default=0, help="seed of the k random heads")
    p.add_argument("--max-tokens", type=int_in(64, 1_000_000, "--max-tokens"), default=None,
                   help="cut the text to this many tokens (default: the model's window)")  # fmt: skip
    add_device(p)
    p.add_argument("--out", default=None, help="write FILE.csv: one row per head (needed with --text-file)")
    p.add_argument("--html", default=None, help="also write FILE.html: the sink, local and retrieval maps")
    p.add_argument("--from-csv", default=None, help="draw --html from this CSV of `mha-viz long` (no model run)")


def read_csv(path: str) -> dict[str, np.ndarray]:
    """The maps in a CSV that `mha-viz long` wrote: sink, local, retrieval [L, H] float64; kind, pattern [L, H] str.
    A missing, garbled or incomplete file is a one-line MhaVizError."""
    import csv

    import numpy as np

    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise MhaVizError(f"cannot read --from-csv {path!r}: {exc}") from None
    if not rows or any(c not in rows[0] for c in COLUMNS[:7]):
        raise MhaVizError(f"--from-csv {path!r} is not a CSV of `mha-viz long`: it needs the columns "
                          f"{', '.join(COLUMNS[:7])}")  # fmt: skip
    try:
        at = np.array([(int(r["layer"]), int(r["head"])) for r in rows])  # [rows, 2]
        values = np.array([[float(r[c]) for c in ("sink", "local", "retrieval")] for r in rows])  # [rows, 3]
    except (TypeError, ValueError):
        raise MhaVizError(f"--from-csv {path!r}: a layer, head, sink, local or retrieval is not a number") from None
    n_layers, n_heads = (at.max(0) + 1) if at.min() >= 0 else (0, 0)
    if len({tuple(a) for a in at.tolist()}) != len(rows) or len(rows) != n_layers * n_heads:
        raise MhaVizError(f"--from-csv {path!r} needs exactly one row per (layer, head), numbered from 0")
    if not np.isfinite(values).all() or values.min() < 0 or values.max() > 1:
        raise MhaVizError(f"--from-csv {path!r}: sink, local and retrieval must be numbers from 0 to 1")
    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(("sink", "local", "retrieval")):
        out[name] = np.zeros((n_layers, n_heads))
        out[name][at[:, 0], at[:, 1]] = values[:, i]
    for name in ("kind", "pattern"):
        out[name] = np.full((n_layers, n_heads), "", dtype=object)
        out[name][at[:, 0], at[:, 1]] = [r[name] or "" for r in rows]
    return out


def write_html(path: str, maps: dict[str, np.ndarray], recall: dict[str, float] | None, k: int, tokens: int | None,
               about: str) -> None:  # fmt: skip
    """The three maps as one self-contained HTML page (plotly.js inlined, no network)."""
    from mha_viz.figures.finish import finish
    from mha_viz.figures.html_page import page
    from mha_viz.figures.long_heads import long_heads_maps

    fig = long_heads_maps(maps["sink"], maps["local"], maps["retrieval"], maps["kind"], maps["pattern"], recall, k,
                          tokens)  # fmt: skip
    doc = page([finish(fig)], "mha-viz · the heads that matter at length", {"top-k retrieval heads": str(k)}, about)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(doc)
    print(f"wrote {path}: the sink, local and retrieval maps", file=sys.stderr)


def command(args: argparse.Namespace) -> None:
    from mha_viz.analysis import csv_cells

    if args.html is not None:
        check_out(args.html, ".html", flag="--html")
    if args.from_csv is not None:
        if args.text_file is not None or args.html is None:
            raise MhaVizError("--from-csv draws an existing CSV: give --html FILE, and no --text-file")
        write_html(args.html, read_csv(args.from_csv), None, args.k, None, f"the heads of {args.from_csv}")
        return
    if args.text_file is None or args.out is None:
        raise MhaVizError("give --text-file FILE and --out FILE.csv (or --from-csv FILE.csv --html FILE.html)")
    check_out(args.out, ".csv")
    import numpy as np

    from mha_viz.studies.long_heads import NEEDLE, Needle, study

    limit = MAX_TEXT_CHARS if hosted() else MAX_LONG_TEXT_CHARS
    try:
        with open(args.text_file, encoding="utf-8") as fh:
            text = fh.read(limit + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise MhaVizError(f"cannot read --text-file {args.text_file!r}: {exc}") from None
    if len(text) > limit:
        raise MhaVizError(f"--text-file is over {limit:,} characters; cut it (hosted mode keeps {MAX_TEXT_CHARS:,})")
    try:
        depths = [float(d) for d in args.depths.split(",") if d.strip()]
    except ValueError:
        raise MhaVizError("--depths must be numbers between 0 and 1, comma-separated") from None
    lm = pretrained(args, "the heads at length need a pretrained decoder; own weights are one untrained layer")
    result = study(lm, text, Needle(args.needle or NEEDLE, args.answer), depths, args.k, args.seed, args.max_tokens)
    s = result.shares
    with open(args.out, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(COLUMNS)
        for (layer, head), r in np.ndenumerate(result.retrieval):
            cells = [s.sink[layer, head], s.local[layer, head], r]
            kinds = [result.kinds[layer, head], result.patterns[layer, head]]
            writer.writerow([layer, head, *(f"{x:.4f}" for x in cells), *kinds,
                             *(f"{x:.4f}" for x in s.recalls[layer, head])])  # fmt: skip
    print(f"{result.tokens} tokens; needle recall over {len(depths)} depths: " + "; ".join(
        f"{name} {value:.0%}" for name, value in result.recall.items()), file=sys.stderr)  # fmt: skip
    print(f"masked top-k retrieval heads (layer, head): {result.masked['top-k retrieval']}", file=sys.stderr)
    if args.html is not None:
        maps = {"sink": s.sink, "local": s.local, "retrieval": result.retrieval, "kind": result.kinds,
                "pattern": result.patterns}  # fmt: skip
        write_html(args.html, maps, result.recall, args.k, result.tokens, text)
