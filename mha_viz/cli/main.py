"""Command line: ``python -m mha_viz trace --text "..." --out trace.npz``.

One module per command: ``trace`` (attention patterns to .npz; with --full every intermediate of one layer),
``roles`` (head roles to JSON), ``induction`` (induction scores of a decoder's heads to CSV), ``importance`` (each
head's importance by ablation to CSV, the pruning curve with --curve), ``corpus`` (head statistics over a corpus),
``patch`` (per-head activation patching), ``variants`` (K/V heads shared: MHA → GQA → MQA, output change against KV
cache size, to CSV), ``kv`` (KV cache eviction policies per head, to CSV), ``why`` (one head's score split by where
its query and key came from, to CSV), ``export``
(one view as a self-contained .html page), ``models`` and ``app`` (the dashboard);
what they share is in options.py. This module parses (before torch loads: --help and errors are fast) and runs one.

Layers and heads are numbered from 0. Bad input: one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from mha_viz.cli import app as app_cli
from mha_viz.cli import corpus as corpus_cli
from mha_viz.cli import export as export_cli
from mha_viz.cli import importance as importance_cli
from mha_viz.cli import induction as induction_cli
from mha_viz.cli import kv as kv_cli
from mha_viz.cli import long as long_cli
from mha_viz.cli import models as models_cli
from mha_viz.cli import patch as patch_cli
from mha_viz.cli import roles as roles_cli
from mha_viz.cli import trace as trace_cli
from mha_viz.cli import variants as variants_cli
from mha_viz.cli import why as why_cli
from mha_viz.cli.options import Parser
from mha_viz.errors import MhaVizError
from mha_viz.runtime import before_torch
from mha_viz.runtime.threads import adapt

EXIT_USAGE = 2
EXIT_FAILURE = 1


def invoked_as() -> str:
    """How the command line was started, for its usage and error lines: the installed `mha-viz` script (or
    mha-viz.exe), else `python -m mha_viz` (argparse's own default would print "__main__.py")."""
    return "mha-viz" if os.path.basename(sys.argv[0] or "").startswith("mha-viz") else "python -m mha_viz"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=invoked_as(), description="mha-viz: multi-head attention, traced.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    trace_cli.add_parser(sub)
    roles_cli.add_parser(sub)
    induction_cli.add_parser(sub)
    long_cli.add_parser(sub)
    importance_cli.add_parser(sub)
    corpus_cli.add_parser(sub)
    patch_cli.add_parser(sub)
    variants_cli.add_parser(sub)
    kv_cli.add_parser(sub)
    why_cli.add_parser(sub)
    export_cli.add_parser(sub)
    models_cli.add_parser(sub)
    app_cli.add_parser(sub)
    return parser


COMMANDS = {
    "trace": trace_cli.command,
    "roles": roles_cli.command,
    "induction": induction_cli.command,
    "long": long_cli.command,
    "models": models_cli.command,
    "importance": importance_cli.command,
    "corpus": corpus_cli.command,
    "patch": patch_cli.command,
    "variants": variants_cli.command,
    "kv": kv_cli.command,
    "why": why_cli.command,
    "export": export_cli.command,
}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if args.command == "app":  # the rest goes to Streamlit
            return app_cli.command(extra)
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        before_torch()  # MHA_VIZ_TORCH_THREADS (1 when hosted), huge pages; before the command imports torch
        if args.command != "models":
            adapt(probe=True)  # else: the cores other processes leave free (a busy machine), runtime/threads.py
        COMMANDS[args.command](args)
        return 0
    except MhaVizError as exc:
        print(f"mha-viz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error; quiet at exit too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        print(f"mha-viz: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # never a traceback for users; MHA_VIZ_DEBUG=1 shows it
        if os.environ.get("MHA_VIZ_DEBUG"):
            raise
        print(f"mha-viz: internal error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
