"""``python -m mha_viz why``: one head's score from a query token to a key (against a second key with --versus) split
into query-source × key-source terms (studies/why.py), to CSV."""

from __future__ import annotations

import argparse

from mha_viz.cli.options import add_device, add_input, check_out, int_in, pretrained, request, say_cut

COLUMNS = ("query_source", "key_source", "contribution")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("why", help="split one head's score (query -> key, against --versus) by where q and k came from")
    add_input(p)
    p.add_argument("--layer", type=int_in(0, None, "--layer"), required=True, help="the layer (from 0)")
    p.add_argument("--head", type=int_in(0, None, "--head"), required=True, help="the head (from 0)")
    p.add_argument("--query", required=True, help="the query token (its word, or a position; its last occurrence)")
    p.add_argument("--key", required=True, help="the key token (its word, or a position; its first occurrence)")
    p.add_argument("--versus", default=None, help="a second key: split the difference of the two scores")
    add_device(p, spread=False)
    p.add_argument("--out", required=True, help="write FILE.csv: query_source, key_source, contribution")


def command(args: argparse.Namespace) -> None:
    from mha_viz.analysis import csv_cells
    from mha_viz.analysis.why_plan import csv_rows, grouped, sentence, shown_terms
    from mha_viz.pipeline.road import encode
    from mha_viz.studies.why import LINEARISATION, why_of

    check_out(args.out, ".csv")
    lm = pretrained(args, "why needs a pretrained model; own weights are one layer with no earlier sources")
    sel = request(args, lm)  # --text, --target, --part, --layer: what the dashboard's Why? tab splits
    say_cut(encode(lm, sel.text, sel.target)[0], lm.name, sel.text)
    w = why_of(lm, sel, args.head, args.query, args.key, args.versus)
    rows = csv_rows(w)
    with open(args.out, "w", encoding="utf-8", newline="") as fh:
        writer = csv_cells.writer(fh)
        writer.writerow(COLUMNS)
        for q, k, value in rows:
            writer.writerow([q, k, f"{value:.9g}"])
    terms, _, _ = shown_terms(w)
    print(f"wrote {args.out}: {len(rows) - 2} terms, then the position bias and the model's score")
    print(sentence(w, *grouped(terms, w.q_sources, w.k_sources, expand=True)))
    if w.softcap:
        print(f"the split is of the score before the model's soft-cap ({w.softcap:g} · tanh(s / {w.softcap:g}))")
    print(LINEARISATION)
