"""``python -m mha_viz long``: the heads that matter at length on your own long text, to CSV (issue 38 §4).

One row per head: layer, head, sink, local, retrieval, kind (DuoAttention: retrieval or streaming), then pattern
(MInference's kind) and its three recalls. The needle test's recall (no head masked, the top-k retrieval heads
masked, k random heads masked) is printed."""

from __future__ import annotations

import argparse
import sys

from mha_viz.cli.options import add_device, check_out, int_in, pretrained
from mha_viz.config import MAX_LONG_TEXT_CHARS, MAX_SEED, MAX_TEXT_CHARS, hosted
from mha_viz.errors import MhaVizError

COLUMNS = ("layer", "head", "sink", "local", "retrieval", "kind", "pattern", "a_shape", "vertical_slash",
           "block_sparse")  # fmt: skip


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("long", help="sink, local and retrieval scores of every head on a long text, to CSV")
    p.add_argument("--model", default="smollm2", help="a decoder: smollm2 (default), a Hugging Face id or folder")
    p.add_argument("--text-file", required=True, help="a UTF-8 text file: the long text (up to the model's window)")
    p.add_argument("--needle", default="", help="the needle sentence (default: 'The secret word of the day is "
                   "tangerine.'); the model is asked for its last word")  # fmt: skip
    p.add_argument("--answer", default="", help="the needle's word the model should copy (default: its last word)")
    p.add_argument("--depths", default="0.1,0.3,0.5,0.7,0.9", help="needle depths, 0 to 1, comma-separated")
    p.add_argument("--k", type=int_in(1, 4096, "--k"), default=8, help="heads masked in the masking experiment")
    p.add_argument("--seed", type=int_in(0, MAX_SEED, "--seed"), default=0, help="seed of the k random heads")
    p.add_argument("--max-tokens", type=int_in(64, 1_000_000, "--max-tokens"), default=None,
                   help="cut the text to this many tokens (default: the model's window)")  # fmt: skip
    add_device(p)
    p.add_argument("--out", required=True, help="write FILE.csv: one row per head")


def command(args: argparse.Namespace) -> None:
    import numpy as np

    from mha_viz.analysis import csv_cells
    from mha_viz.studies.long_heads import NEEDLE, Needle, study

    check_out(args.out, ".csv")
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
