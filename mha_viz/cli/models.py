"""``python -m mha_viz models``: the architectures this install can trace (--all: also those it cannot, and why)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("models", help="list the architectures this install can trace")
    m.add_argument("--all", action="store_true", help="also list those that are not supported, with the reason")


def command(args: argparse.Namespace) -> None:
    from mha_viz.models.catalog import catalog, format_table

    print(format_table(catalog(), show_unsupported=args.all))
