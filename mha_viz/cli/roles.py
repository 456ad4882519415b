"""``python -m mha_viz roles``: every head's role (previous token, [SEP] sink, broad, ...) scored on a text, to JSON."""

from __future__ import annotations

import argparse

from mha_viz.cli.options import add_device, add_input, check_out, pretrained, request, say_cut
from mha_viz.errors import MhaVizError


def add_parser(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("roles", help="score every head's role (previous token, [SEP] sink, broad, ...) to JSON")
    add_input(r)
    add_device(r)
    r.add_argument("--out", default=None, help="write FILE.json (without it, print the JSON)")


def command(args: argparse.Namespace) -> None:
    import json

    from mha_viz.analysis.roles import ROLE_RULES
    from mha_viz.pipeline.road import record
    from mha_viz.studies.sweeps import roles_of

    if args.out:
        check_out(args.out, ".json")
    lm = pretrained(args, "roles needs a pretrained model; own weights have no trained roles")
    sel = request(args, lm)  # every layer (no --layer), as the dashboard's Head roles reads them
    part = lm.part(sel.part)
    rec = record(lm, sel.text, sel.target)
    say_cut(rec.tokens, lm.name, sel.text)
    say_cut(rec.target, lm.name, sel.target)
    if part == "cross":
        raise MhaVizError("head roles compare a token with its neighbours; choose --part encoder or decoder")
    rows = roles_of(lm, rec, sel)
    text = json.dumps(rows, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        labels = sorted({r["label"] for r in rows})
        print(f"wrote {args.out}: {len(rows)} heads ({', '.join(labels)}); rules: {ROLE_RULES}")
    else:
        print(text)
